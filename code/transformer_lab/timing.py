"""Wall time of a call, and the small helpers every table uses (slopes, formatting).

- **Time** (:func:`time_call`): the fastest of ``repeats`` calls after ``warmup`` calls, with the
  GPU synchronised around each call so that queued kernels are counted. Other processes can
  only slow a call down, never speed it up, so on a shared machine the minimum is the figure
  closest to the cost of the computation itself (the reasoning of Python's ``timeit``); the
  median is available too.
- **Slopes** (:func:`loglog_slope`): a least-squares line through ``log(n), log(value)``; a slope
  of 2 is quadratic growth, 1 linear.
- **Peaks** (:func:`gpu_peak_tflops`): the dense bf16 peak of a GPU, for model FLOPs
  utilisation (MFU).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

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

