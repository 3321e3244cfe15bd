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
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from transformer_book.attention import MultiHeadAttention, scaled_dot_product_attention

__all__ = [
    "GPU_PEAK_BF16_TFLOPS",
    "TorchTransformerBaseline",
    "attention_implementations",
    "count_train_flops",
    "format_bytes",
    "format_table",
    "gpu_peak_tflops",
    "loglog_slope",
    "make_eos_unreachable",
    "matched_configs",
    "measure_attention",
    "measure_sequence_layers",
    "measure_train_throughput",
    "operator_names",
    "peak_memory_bytes",
    "source_batches",
    "sync",
    "synthetic_batch",
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
    """Send the process's C-level stderr to /dev/null for a moment (and mute the profiler's
    per-cycle warning).

    The CPU profiler's C++ backend prints a start/stop banner there that would otherwise land in
    every notebook output; Python-level errors still propagate as exceptions.
    """
    with warnings.catch_warnings():
        # Some PyTorch versions also warn, at every profile, that events are cleared per cycle.
        warnings.filterwarnings("ignore", message=".*Profiler clears events", category=UserWarning)
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


def operator_names(fn: Callable[[], Any], contains: str = "") -> list[str]:
    """The names of the PyTorch operators ``fn()`` ran (containing ``contains``), sorted.

    Read from ``torch.profiler``; shows, for instance, which fused kernel
    ``F.scaled_dot_product_attention`` dispatched to on this machine.
    """
    from torch.profiler import profile

    with _quiet_stderr(), profile() as prof:
        fn()
    return sorted({e.name for e in prof.events() if contains in e.name})


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
    from transformer_book.rnn import ElmanRNN  # chapter 1's module

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


# ---------------------------------------------------------------------------------------------
# Training throughput: our Transformer against torch.nn.Transformer doing the same work
# ---------------------------------------------------------------------------------------------

class TorchTransformerBaseline(nn.Module):
    """``torch.nn.Transformer`` wrapped to do the same work as :class:`transformer_book.Transformer`.

    ``nn.Transformer`` has no embeddings, positions or output layer, so they are added around it
    exactly as the book's model has them (Sec. 3.4, 3.5): token embeddings times sqrt(d_model)
    (one matrix shared by source and target and tied to the output layer when the config says
    so), the sinusoidal table plus dropout, and a bias-free pre-softmax linear layer. The stacks
    end with a LayerNorm only for pre-norm, as the book's model does (``nn.Transformer`` alone
    always adds one). ``nn.Transformer`` applies its one ``dropout`` to the residuals, the
    attention weights and the inner feed-forward activations alike; compare it with a config
    whose ``attention_dropout`` and ``ffn_dropout`` equal ``dropout`` (see
    :func:`matched_configs`).

    Args:
        config: a :class:`transformer_book.config.TransformerConfig`.
    """

    def __init__(self, config) -> None:
        super().__init__()
        from transformer_book.positional import PositionalEncoding

        self.config = config
        D = config.d_model
        self.src_embed = nn.Embedding(config.src_vocab_size, D)
        self.tgt_embed = (self.src_embed if config.share_embeddings
                          else nn.Embedding(config.tgt_vocab_size, D))
        self.positional = PositionalEncoding(D, config.max_len, config.dropout)
        layer_args = dict(d_model=D, nhead=config.num_heads, dim_feedforward=config.d_ff,
                          dropout=config.dropout, batch_first=True, norm_first=config.norm_first,
                          layer_norm_eps=config.layer_norm_eps)

        def final_norm():
            return nn.LayerNorm(D, eps=config.layer_norm_eps) if config.norm_first else None

        encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(**layer_args),
                                        config.num_layers, norm=final_norm(),
                                        enable_nested_tensor=False)
        decoder = nn.TransformerDecoder(nn.TransformerDecoderLayer(**layer_args),
                                        config.num_layers, norm=final_norm())
        self.transformer = nn.Transformer(d_model=D, nhead=config.num_heads,
                                          custom_encoder=encoder, custom_decoder=decoder,
                                          batch_first=True)
        self.generator = nn.Linear(D, config.tgt_vocab_size, bias=False)
        if config.tie_output:
            self.generator.weight = self.tgt_embed.weight

    def forward(self, src: Tensor, tgt: Tensor) -> Tensor:
        """Logits (B, T, tgt_vocab_size) for src (B, S) and the shifted target tgt (B, T)."""
        scale = math.sqrt(self.config.d_model)
        x = self.positional(self.src_embed(src) * scale)  # (B, S, D)
        y = self.positional(self.tgt_embed(tgt) * scale)  # (B, T, D)
        T = tgt.shape[1]
        # nn.Transformer's masks mean the opposite of the book's: True = may NOT attend.
        src_pad = src == self.config.pad_id  # (B, S)
        tgt_pad = tgt == self.config.pad_id  # (B, T)
        future = torch.ones(T, T, dtype=torch.bool, device=tgt.device).triu(1)  # (T, T)
        h = self.transformer(x, y, tgt_mask=future, src_key_padding_mask=src_pad,
                             tgt_key_padding_mask=tgt_pad, memory_key_padding_mask=src_pad,
                             tgt_is_causal=True)  # (B, T, D)
        return self.generator(h)


def matched_configs(config):
    """The config with every dropout equal to ``config.dropout``, as ``nn.Transformer`` has them.

    The paper drops out residuals and embeddings only (Sec. 5.4); ``nn.Transformer`` cannot
    switch off its attention and feed-forward dropout separately, so a fair speed comparison
    gives the book's model the same three dropouts.
    """
    return config.replace(attention_dropout=config.dropout, ffn_dropout=config.dropout)


def synthetic_batch(
    batch: int,
    src_len: int,
    tgt_len: int,
    vocab_size: int,
    *,
    pad_id: int = 0,
    device: torch.device | str = "cpu",
    seed: int = 0,
) -> tuple[Tensor, Tensor, Tensor]:
    """Random token ids shaped like a training batch: ``(src, tgt_in, tgt_out)``, no padding.

    Speed does not depend on which ids the tokens are, only on the shapes, so random ids stand
    in for real sentences. Ids avoid ``pad_id``.

    Shape:
        src (B, src_len); tgt_in and tgt_out (B, tgt_len).
    """
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, vocab_size, (batch, src_len + tgt_len + 1), generator=gen)
    ids = torch.where(ids == pad_id, (pad_id + 1) % vocab_size, ids)
    src = ids[:, :src_len]
    tgt = ids[:, src_len:]
    return src.to(device), tgt[:, :-1].to(device), tgt[:, 1:].to(device)


def _train_step_fn(model: nn.Module, src: Tensor, tgt_in: Tensor, tgt_out: Tensor, *,
                   pad_id: int, amp_dtype: torch.dtype | None, lr: float = 1e-4
                   ) -> Callable[[], Tensor]:
    """One optimiser step of Sec. 5: forward, label-smoothed loss, backward, Adam."""
    device_type = src.device.type
    optimizer = torch.optim.Adam(model.parameters(), lr=lr, betas=(0.9, 0.98), eps=1e-9)

    def step() -> Tensor:
        with torch.autocast(device_type, dtype=amp_dtype, enabled=amp_dtype is not None):
            logits = model(src, tgt_in)  # (B, T, V)
            loss = F.cross_entropy(logits.flatten(0, 1).float(), tgt_out.flatten(),
                                   ignore_index=pad_id, label_smoothing=0.1)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return loss.detach()

    return step


def count_train_flops(model: nn.Module, src: Tensor, tgt_in: Tensor, tgt_out: Tensor,
                      *, pad_id: int = 0, amp_dtype: torch.dtype | None = None) -> int:
    """Floating-point operations of one forward + backward pass, as PyTorch counts them.

    Uses ``torch.utils.flop_counter.FlopCounterMode``, which adds up matrix products (2 FLOPs
    per multiply-add); element-wise work (softmax, LayerNorm, the optimiser) is not counted, as
    is usual for "model FLOPs". The counting pass runs PyTorch's attention through its "math"
    backend, made of plain matrix products, because the counter has no formula for the fused
    CPU kernel; the FLOPs are the same, only the kernel differs.
    """
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter, sdpa_kernel(SDPBackend.MATH), torch.autocast(
            src.device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
        logits = model(src, tgt_in)
        loss = F.cross_entropy(logits.flatten(0, 1).float(), tgt_out.flatten(),
                               ignore_index=pad_id, label_smoothing=0.1)
        loss.backward()
    model.zero_grad(set_to_none=True)
    return int(counter.get_total_flops())


def measure_train_throughput(
    models: dict[str, nn.Module],
    *,
    batch: int,
    src_len: int,
    tgt_len: int,
    device: torch.device | str = "cpu",
    amp_dtype: torch.dtype | None = None,
    steps: int = 3,
    rounds: int = 3,
    flops: bool = True,
    seed: int = 0,
) -> list[dict]:
    """Training-step speed of several models on the same batch (forward, backward, Adam).

    The models take turns: each round times ``steps`` consecutive steps of every model, and
    the fastest round of each model is kept, so a slow spell of the machine cannot favour one
    of them.

    Args:
        models: name -> model with ``forward(src, tgt_in) -> logits`` and a ``config``
            attribute (vocabulary size, pad id); all are trained in place.
        batch, src_len, tgt_len: the batch shape (every token real, no padding).
        device: where to train.
        amp_dtype: autocast dtype (e.g. ``torch.bfloat16``), or None for full precision.
        steps: steps per timed round.
        rounds: timed rounds per model (after one untimed warm-up round).
        flops: also count the model FLOPs of one step (see :func:`count_train_flops`).
        seed: seed of the synthetic batch.

    Returns:
        One dict per model: ``model``, ``seconds_per_step``, ``tokens_per_second`` (target
        tokens), ``flops_per_step`` (NaN unless ``flops``), ``tflops`` (achieved TFLOP/s).
    """
    device = torch.device(device)
    steppers = {}
    batches = {}
    for name, model in models.items():
        cfg = model.config
        model.to(device).train()
        src, tgt_in, tgt_out = synthetic_batch(batch, src_len, tgt_len, cfg.tgt_vocab_size,
                                               pad_id=cfg.pad_id, device=device, seed=seed)
        batches[name] = (src, tgt_in, tgt_out)
        steppers[name] = _train_step_fn(model, src, tgt_in, tgt_out, pad_id=cfg.pad_id,
                                        amp_dtype=amp_dtype)
    best = {name: math.inf for name in models}
    for r in range(rounds + 1):
        for name, step in steppers.items():
            sync(device)
            start = time.perf_counter()
            for _ in range(steps):
                step()
            sync(device)
            if r > 0:  # round 0 warms up (allocator, kernel choice, optimiser state)
                best[name] = min(best[name], (time.perf_counter() - start) / steps)
    rows = []
    for name, model in models.items():
        n_flops = math.nan
        if flops:
            n_flops = count_train_flops(model, *batches[name], pad_id=model.config.pad_id,
                                        amp_dtype=amp_dtype)
        seconds = best[name]
        rows.append({"model": name, "seconds_per_step": seconds,
                     "tokens_per_second": batch * tgt_len / seconds,
                     "flops_per_step": n_flops, "tflops": n_flops / seconds / 1e12})
    return rows


def profile_train_step(model: nn.Module, *, batch: int, src_len: int, tgt_len: int,
                       device: torch.device | str = "cpu", amp_dtype: torch.dtype | None = None,
                       steps: int = 3, row_limit: int = 12, seed: int = 0) -> str:
    """Where one training step's time goes: ``torch.profiler``'s table of the operators that
    took the most device time (CUDA kernels on a GPU, CPU time otherwise), over ``steps``
    steps after one warm-up step. Evidence for what separates two models in
    :func:`measure_train_throughput`."""
    from torch.profiler import ProfilerActivity, profile

    device = torch.device(device)
    cfg = model.config
    model.to(device).train()
    batch_tensors = synthetic_batch(batch, src_len, tgt_len, cfg.tgt_vocab_size,
                                    pad_id=cfg.pad_id, device=device, seed=seed)
    step = _train_step_fn(model, *batch_tensors, pad_id=cfg.pad_id, amp_dtype=amp_dtype)
    step()
    sync(device)
    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    with _quiet_stderr(), profile(activities=activities) as prof:
        for _ in range(steps):
            step()
        sync(device)
    sort_by = "self_cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
    return prof.key_averages().table(sort_by=sort_by, row_limit=row_limit, max_name_column_width=60)


# ---------------------------------------------------------------------------------------------
# Decoding speed: greedy and beam search, with and without the key/value cache
# ---------------------------------------------------------------------------------------------

def source_batches(sources: Sequence[Sequence[int]], batch_size: int, *, pad_id: int,
                   eos_id: int) -> list[tuple[list[int], Tensor]]:
    """Sentences sorted by length and cut into batches, each padded as the model reads it.

    Grouping similar lengths keeps padding (wasted work) small. Each source gets ``eos_id``
    appended, as :func:`transformer_book.batching.collate` does in training.

    Returns:
        ``(indices, src)`` pairs: the positions of the batch's sentences in ``sources`` and the
        (B, S) tensor of ids.
    """
    from transformer_book.batching import pad_sequences

    if batch_size < 1:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    out = []
    for start in range(0, len(order), batch_size):
        idx = order[start:start + batch_size]
        out.append((idx, pad_sequences([list(sources[i]) + [eos_id] for i in idx], pad_id)))
    return out


def make_eos_unreachable(model: nn.Module, eos_id: int) -> None:
    """Zero the output-layer row of ``eos_id``, so an untrained model never chooses it.

    Its logit is then exactly 0 while the best of thousands of random logits is positive, so
    greedy and beam search (beam sizes far below the vocabulary) run to their length limit.
    With tied weights (Sec. 3.4) the embedding row of ``eos_id`` is zeroed too, which does not
    matter since EOS is never fed back. Used to time decoding of a fixed length.
    """
    with torch.no_grad():
        model.generator.weight[eos_id].zero_()


def measure_decoding(
    model: nn.Module,
    batches: Sequence[tuple[list[int], Tensor]],
    methods: dict[str, dict],
    *,
    bos_id: int,
    eos_id: int,
    max_new_tokens: int | None = None,
    device: torch.device | str | None = None,
) -> dict[str, dict]:
    """Decode every batch with every method, timing each; methods take turns batch by batch.

    Args:
        model: a :class:`transformer_book.model.Transformer`.
        batches: from :func:`source_batches`.
        methods: name -> keyword arguments: ``beam_size`` (1 = greedy decoding with
            :func:`transformer_book.decode.greedy_decode`, more = beam search with
            :func:`transformer_book.decode.beam_search`), ``use_cache``, ``length_penalty``.
        bos_id, eos_id: the special tokens.
        max_new_tokens: length limit (None = the decoder's default: source length + 50).
        device: where to decode (default: the model's device).

    Returns:
        name -> ``{"seconds", "sentences", "sentences_per_second", "tokens" (generated, BOS and
        padding not counted), "outputs" (one id list per sentence, in the input order)}``. The
        first batch is decoded once by every method before timing starts (warm-up).
    """
    from transformer_book import decode

    device = torch.device(device) if device is not None else next(model.parameters()).device
    model.eval()
    total = sum(len(idx) for idx, _ in batches)
    results = {name: {"seconds": 0.0, "sentences": total, "tokens": 0,
                      "outputs": [None] * total} for name in methods}
    pad = model.config.pad_id

    def run(src: Tensor, beam_size: int = 1, use_cache: bool = True,
            length_penalty: float = 0.6) -> list[list[int]]:
        kwargs = {} if max_new_tokens is None else {"max_new_tokens": max_new_tokens}
        if beam_size == 1:
            ids = decode.greedy_decode(model, src, bos_id, eos_id, use_cache=use_cache, **kwargs)
            return [[t for t in row if t != pad] for row in ids.tolist()]
        return decode.beam_search(model, src, bos_id, eos_id, beam_size=beam_size,
                                  length_penalty=length_penalty, use_cache=use_cache, **kwargs)

    if batches:
        for options in methods.values():  # warm-up: allocator, kernel choice
            run(batches[0][1][:2].to(device), **options)
    for idx, src in batches:
        src = src.to(device)
        for name, options in methods.items():
            sync(device)
            start = time.perf_counter()
            outputs = run(src, **options)
            sync(device)
            results[name]["seconds"] += time.perf_counter() - start
            for i, out in zip(idx, outputs, strict=True):
                results[name]["outputs"][i] = out
                results[name]["tokens"] += len(out) - 1  # without BOS
    for r in results.values():
        r["sentences_per_second"] = r["sentences"] / r["seconds"] if r["seconds"] else math.nan
    return results
