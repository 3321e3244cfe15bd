"""Peak memory of a call, and which operators it ran (read from ``torch.profiler``).

On CUDA, ``torch.cuda.max_memory_allocated`` above what was allocated before the call. On CPU,
the peak of the allocations and frees that ``torch.profiler`` records with
``profile_memory=True``, replayed in time order (allocations at the start of the operator that
made them, frees at its end, so within one operator the figure errs on the high side). Both
count tensors created during the call only, not its inputs.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch

from transformer_lab.timing import sync


@contextlib.contextmanager
def quiet_stderr() -> Iterator[None]:
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

    with quiet_stderr(), profile() as prof:
        fn()
    return sorted({e.name for e in prof.events() if contains in e.name})


def _cpu_peak_bytes(fn: Callable[[], Any]) -> int:
    from torch.profiler import ProfilerActivity, profile

    with quiet_stderr(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
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

