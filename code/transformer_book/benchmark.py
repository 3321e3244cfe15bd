"""Measuring what the Transformer costs: wall time, peak memory, throughput (Sec. 4, Table 1).

The scripts in ``benchmarks/`` and the chapter "What attention costs" call these functions, so the
figures printed by the command-line tables and the figures in the book come from the same code.

How things are measured:

- **Time** (:func:`time_call`): the fastest of ``repeats`` calls after ``warmup`` calls, with the
  GPU synchronised around each call so that queued kernels are counted. Other processes can
  only slow a call down, never speed it up, so on a shared machine the minimum is the figure
  closest to the cost of the computation itself (the reasoning of Python's ``timeit``); the
  median is available too.
- **Peak memory** (:func:`peak_memory_bytes`): on CUDA, ``torch.cuda.max_memory_allocated``
  above what was allocated before the call. On CPU, the peak of the allocations and frees that
  ``torch.profiler`` records with ``profile_memory=True``, replayed in time order (allocations
  at the start of the operator that made them, frees at its end, so within one operator the
  figure errs on the high side). Both count tensors created during the call only, not its inputs.
- **Slopes** (:func:`loglog_slope`): a least-squares line through ``log(n), log(value)``; a slope
  of 2 is quadratic growth, 1 linear.

Nothing here is a timed test: timings depend on the machine and on what else runs on it, so every
table puts a ratio measured in the same run beside the raw figures.
"""

from __future__ import annotations

import contextlib
import math
import os
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from transformer_book.attention import MultiHeadAttention, scaled_dot_product_attention
from transformer_book.rnn import ElmanRNN

__all__ = [
    "GPU_PEAK_BF16_TFLOPS",
    "attention_implementations",
    "format_bytes",
    "format_table",
    "gpu_peak_tflops",
    "loglog_slope",
    "measure_attention",
    "measure_sequence_layers",
    "peak_memory_bytes",
    "sync",
    "time_call",
]

# Dense (no structured sparsity) bf16 tensor-core peaks from NVIDIA's data sheets, in TFLOP/s.
# The data sheets print the sparse figure first; the dense one is half of it.
GPU_PEAK_BF16_TFLOPS = {
    "H200": 989.4,  # H200 SXM: same tensor cores as H100 SXM, more and faster memory
    "H100 PCIe": 756.0,
    "H100 NVL": 835.0,
    "H100": 989.4,  # H100 SXM5 (HBM3), the default when the name says only "H100"
    "A100": 312.0,  # A100 SXM4 and PCIe alike
}


def gpu_peak_tflops(name: str) -> float | None:
    """The dense bf16 peak (TFLOP/s) of a GPU named like ``torch.cuda.get_device_name()``.

    Returns None for a GPU not in :data:`GPU_PEAK_BF16_TFLOPS` (then no utilisation is printed).
    """
    upper = name.upper()
    for key, peak in GPU_PEAK_BF16_TFLOPS.items():  # most specific keys come first
        if all(part.upper() in upper for part in key.split()):
            return peak
    return None


def sync(device: torch.device | str | None) -> None:
    """Wait for queued GPU work on ``device`` (a no-op on CPU), so a timer sees it finish."""
    if device is not None and torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def time_call(
    fn: Callable[[], Any],
    *,
    device: torch.device | str | None = None,
    warmup: int = 1,
    repeats: int = 5,
    reduce: str = "min",
) -> float:
    """Wall time of ``fn()`` in seconds: the fastest (or median) of ``repeats`` timed calls.

    Args:
        fn: the call to time, without arguments.
        device: the device ``fn`` runs on; CUDA is synchronised before and after each call.
        warmup: calls made first and not timed (kernel selection, caches, lazy allocation).
        repeats: timed calls.
        reduce: ``"min"`` (default; least disturbed by other processes) or ``"median"``.

    Returns:
        The minimum or median of the ``repeats`` timings, in seconds.
    """
    if warmup < 0 or repeats < 1:
        raise ValueError(f"need warmup >= 0 and repeats >= 1, got {warmup} and {repeats}")
    if reduce not in ("min", "median"):
        raise ValueError(f"reduce must be 'min' or 'median', got {reduce!r}")
    for _ in range(warmup):
        fn()
    sync(device)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - start)
    return min(times) if reduce == "min" else statistics.median(times)


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """Send the process's C-level stderr to /dev/null for a moment.

    The CPU profiler's C++ backend prints a start/stop banner there that would otherwise land in
    every notebook output; Python-level errors still propagate as exceptions.
    """
    try:
        saved = os.dup(2)
    except OSError:  # no real stderr (some embedded interpreters): nothing to silence
        yield
        return
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _cpu_peak_bytes(fn: Callable[[], Any]) -> int:
    from torch.profiler import ProfilerActivity, profile

    with _quiet_stderr(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        result = fn()
        del result  # freed inside the profiled region, like every other temporary
    deltas = []  # (time in us, bytes): + allocated, - freed
    for event in prof.events():
        change = event.self_cpu_memory_usage
        if change > 0:  # allocated by this operator: count it from the operator's start
            deltas.append((event.time_range.start, change))
        elif change < 0:  # freed by it (or a temporary of its children): count it at its end
            deltas.append((event.time_range.end, change))
    # At equal times, count allocations before frees, so the peak is never underestimated.
    deltas.sort(key=lambda d: (d[0], -d[1]))
    current = peak = 0
    for _, change in deltas:
        current += change
        peak = max(peak, current)
    return peak


def peak_memory_bytes(fn: Callable[[], Any], device: torch.device | str | None = None) -> int:
    """Peak bytes allocated while ``fn()`` runs, above what was allocated before it.

    On CUDA this reads ``torch.cuda.max_memory_allocated``; on CPU it replays the allocations
    ``torch.profiler`` records (see the module docstring). What ``fn`` returns is freed before
    the function returns, and counts while it exists.

    Args:
        fn: the call to measure, without arguments.
        device: the device ``fn`` allocates on (``None`` means CPU).

    Returns:
        The peak, in bytes.
    """
    device = torch.device(device) if device is not None else torch.device("cpu")
    if device.type == "cuda":
        sync(device)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        result = fn()
        sync(device)
        peak = torch.cuda.max_memory_allocated(device) - before
        del result
        return int(peak)
    if device.type != "cpu":
        raise ValueError(f"peak memory is measured on CPU and CUDA only, not {device.type!r}")
    return _cpu_peak_bytes(fn)


def loglog_slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Slope of the least-squares line through ``(log x, log y)``: the exponent k of y ~ x^k.

    Points whose y is not a positive finite number (a skipped or failed measurement) are left out.

    Raises:
        ValueError: fewer than two usable points.
    """
    pts = [
        (math.log(x), math.log(y))
        for x, y in zip(xs, ys, strict=True)
        if x > 0 and y is not None and math.isfinite(y) and y > 0
    ]
    if len(pts) < 2:
        raise ValueError(f"need at least two positive points to fit a slope, got {len(pts)}")
    mx = sum(p[0] for p in pts) / len(pts)
    my = sum(p[1] for p in pts) / len(pts)
    sxx = sum((p[0] - mx) ** 2 for p in pts)
    if sxx == 0:
        raise ValueError("all x values are equal; no slope can be fitted")
    return sum((p[0] - mx) * (p[1] - my) for p in pts) / sxx


def format_bytes(n: float) -> str:
    """``1536`` -> ``'1.5 KiB'``; NaN (not measured) -> ``'-'``."""
    if n is None or not math.isfinite(n):
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def format_table(rows: Sequence[dict], columns: Sequence[tuple[str, str, str | Callable]]) -> str:
    """A plain-text table, one line per row.

    Args:
        rows: dictionaries of values.
        columns: ``(header, key, format)`` triples; ``format`` is a format spec such as ``".3f"``
            or a function from the value to a string. A missing key or a NaN prints as ``-``.

    Returns:
        The table, right-aligned, headers underlined.
    """

    def cell(row: dict, key: str, fmt: str | Callable) -> str:
        value = row.get(key)
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return "-"
        return fmt(value) if callable(fmt) else format(value, fmt)

    body = [[cell(r, key, fmt) for _, key, fmt in columns] for r in rows]
    headers = [h for h, _, _ in columns]
    widths = [max([len(h)] + [len(line[i]) for line in body]) for i, h in enumerate(headers)]
    lines = [
        "  ".join(h.rjust(w) for h, w in zip(headers, widths, strict=True)),
        "  ".join("-" * w for w in widths),
    ]
    lines += ["  ".join(c.rjust(w) for c, w in zip(line, widths, strict=True)) for line in body]
    return "\n".join(lines)


def _is_out_of_memory(err: BaseException) -> bool:
    return isinstance(err, torch.OutOfMemoryError) or "out of memory" in str(err).lower()


# ---------------------------------------------------------------------------------------------
# Attention alone: Eq. (1) from scratch against PyTorch's fused kernel
# ---------------------------------------------------------------------------------------------


def attention_implementations() -> dict[str, Callable[[Tensor, Tensor, Tensor], Tensor]]:
    """The two ways the book computes Eq. (1), as ``fn(q, k, v) -> output``.

    ``"from scratch"`` is :func:`transformer_book.attention.scaled_dot_product_attention`, which
    materialises the (B, H, L, S) score and weight matrices; ``"PyTorch SDPA"`` is
    ``torch.nn.functional.scaled_dot_product_attention``, whose fused kernels need not.
    """
    return {
        "from scratch": lambda q, k, v: scaled_dot_product_attention(q, k, v)[0],
        "PyTorch SDPA": F.scaled_dot_product_attention,
    }


def _measure_each(
    lengths: Sequence[int],
    implementations: dict[str, Callable[[int], Callable[[], Any]]],
    *,
    device: torch.device,
    repeats: int,
    memory: bool,
    extra: Callable[[int], dict],
) -> list[dict]:
    """Time (and measure) every implementation at every length; stop one at its first OOM."""
    rows, stopped = [], set()
    for n in lengths:
        for name, make_call in implementations.items():
            row = {
                "implementation": name,
                "n": n,
                "seconds": math.nan,
                "peak_bytes": math.nan,
                "note": "",
                **extra(n),
            }
            if name in stopped:
                row["note"] = "skipped (out of memory at a shorter length)"
                rows.append(row)
                continue
            try:
                call = make_call(n)
                with torch.no_grad():
                    row["seconds"] = time_call(call, device=device, warmup=1, repeats=repeats)
                    if memory:
                        row["peak_bytes"] = peak_memory_bytes(call, device)
            except (RuntimeError, MemoryError) as err:
                if not _is_out_of_memory(err) and not isinstance(err, MemoryError):
                    raise
                stopped.add(name)
                row["note"] = "out of memory"
                if device.type == "cuda":
                    torch.cuda.empty_cache()
            rows.append(row)
    return rows


def measure_attention(
    lengths: Sequence[int],
    *,
    batch: int = 1,
    heads: int = 8,
    d_k: int = 64,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
    repeats: int = 3,
    memory: bool = True,
    seed: int = 0,
) -> list[dict]:
    """Time and peak memory of Eq. (1), from scratch and through PyTorch's SDPA, against n.

    Self-attention shapes: L = S = n. The inputs are allocated before measuring, so the peak
    counts what attention itself creates: for the from-scratch path, the (B, H, n, n) scores and
    weights; for a fused kernel, the output and small per-row statistics.

    Args:
        lengths: sequence lengths n to measure.
        batch, heads, d_k: the other dimensions of q, k, v (B, H, n, Dk); the paper's base
            model has H = 8, Dk = 64.
        device, dtype: where and in what precision.
        repeats: timed calls per point (the fastest is kept, see :func:`time_call`).
        memory: also measure the peak memory (on CPU this runs the profiler once per point).
        seed: seed of the random inputs.

    Returns:
        One dict per (implementation, n) with keys ``implementation``, ``n``, ``seconds``,
        ``peak_bytes``, ``score_bytes`` (the size of one (B, H, n, n) matrix in ``dtype``) and
        ``note`` (``"out of memory"`` when a length did not fit; the implementation is then
        skipped at longer lengths).
    """
    device = torch.device(device)
    gen = torch.Generator(device=device).manual_seed(seed)
    element = torch.finfo(dtype).bits // 8
    impls = attention_implementations()

    def inputs(n: int) -> list[Tensor]:
        return [
            torch.randn(batch, heads, n, d_k, generator=gen, device=device, dtype=dtype)
            for _ in range(3)
        ]  # q, k, v: (B, H, n, Dk)

    cache: dict[int, list[Tensor]] = {}

    def maker(fn):
        def make_call(n: int):
            if n not in cache:
                cache.clear()  # free the previous length's inputs first
                cache[n] = inputs(n)
            q, k, v = cache[n]
            return lambda: fn(q, k, v)

        return make_call

    return _measure_each(
        lengths,
        {name: maker(fn) for name, fn in impls.items()},
        device=device,
        repeats=repeats,
        memory=memory,
        extra=lambda n: {"score_bytes": batch * heads * n * n * element},
    )


# ---------------------------------------------------------------------------------------------
# One layer against one layer: self-attention against the recurrent networks of chapter 1
# ---------------------------------------------------------------------------------------------


def measure_sequence_layers(
    lengths: Sequence[int],
    *,
    d_model: int = 512,
    heads: int = 8,
    batch: int = 1,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
    repeats: int = 3,
    memory: bool = False,
    seed: int = 0,
) -> list[dict]:
    """Time (and peak memory) of one sequence layer of width ``d_model`` against n (Table 1).

    The layers compared, each mapping a (B, n, D) sequence to a (B, n, D) sequence:

    - ``"self-attention layer"``: :class:`transformer_book.MultiHeadAttention` (projections and
      PyTorch's SDPA), O(n^2 d + n d^2) operations, O(1) sequential steps;
    - ``"Elman RNN (ch. 1)"``: :class:`transformer_book.rnn.ElmanRNN`, the recurrence written in
      Python, O(n d^2) operations in n sequential steps;
    - ``"nn.GRU"``: PyTorch's GRU (the encoder of chapter 1's ``Seq2Seq``), the loop in C++.

    Returns:
        One dict per (layer, n) with ``implementation``, ``n``, ``seconds``, ``peak_bytes``
        (NaN unless ``memory``), ``note``.
    """
    device = torch.device(device)
    torch.manual_seed(seed)
    layers: dict[str, nn.Module] = {
        "self-attention layer": MultiHeadAttention(d_model, heads),
        "Elman RNN (ch. 1)": ElmanRNN(d_model, d_model, d_model),
        "nn.GRU": nn.GRU(d_model, d_model, batch_first=True),
    }
    calls = {
        "self-attention layer": lambda m, x: m(x, x, x)[0],
        "Elman RNN (ch. 1)": lambda m, x: m(x)[0],
        "nn.GRU": lambda m, x: m(x)[0],
    }
    for layer in layers.values():
        layer.to(device=device, dtype=dtype).eval()
    gen = torch.Generator(device=device).manual_seed(seed)
    cache: dict[int, Tensor] = {}

    def maker(name: str):
        def make_call(n: int):
            if n not in cache:
                cache.clear()
                cache[n] = torch.randn(
                    batch, n, d_model, generator=gen, device=device, dtype=dtype
                )  # (B, n, D)
            x = cache[n]
            return lambda: calls[name](layers[name], x)

        return make_call

    return _measure_each(
        lengths,
        {name: maker(name) for name in layers},
        device=device,
        repeats=repeats,
        memory=memory,
        extra=lambda n: {},
    )
