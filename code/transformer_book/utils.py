"""Small helpers every chapter uses: seeding, device choice, naming the hardware."""

from __future__ import annotations

import contextlib
import os
import platform
import random
from collections.abc import Iterator

import numpy as np
import torch


def set_seed(seed: int = 0) -> None:
    """Seed Python, NumPy and PyTorch (all devices) so a chapter reruns identically."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # also seeds every CUDA device


def device_name(prefer: str | None = None) -> str:
    """The device to use, unchecked (:func:`get_device` checks): ``prefer`` if given, else
    ``$TRANSFORMER_BOOK_DEVICE`` (e.g. ``cpu`` on a GPU machine), else ``"cuda"`` when
    available, else ``"cpu"``."""
    return (prefer or os.environ.get("TRANSFORMER_BOOK_DEVICE")
            or ("cuda" if torch.cuda.is_available() else "cpu"))


def get_device(prefer: str | None = None) -> torch.device:
    """The device to train on, :func:`device_name`'s, checked.

    Raises:
        RuntimeError: a CUDA device was asked for and CUDA is not available.
    """
    choice = device_name(prefer)
    device = torch.device(choice)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(
            f"device {choice!r} was requested but CUDA is not available; "
            "unset TRANSFORMER_BOOK_DEVICE or choose 'cpu'"
        )
    return device


def describe_hardware(device: torch.device | str | None = None) -> str:
    """One line naming the hardware a number was measured on, for printing beside results."""
    device = torch.device(device) if device is not None else get_device()
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        return f"{props.name} ({props.total_memory / 2**30:.0f} GiB), torch {torch.__version__}"
    cpu = _first_cpu().get("model name") or platform.processor() or platform.machine()
    return f"CPU: {cpu}, {torch.get_num_threads()} threads, torch {torch.__version__}"


def _first_cpu() -> dict[str, str]:
    """The fields of the first processor in /proc/cpuinfo (empty where there is none)."""
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if not line.strip():
                    if fields:
                        break
                    continue
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    return fields


def cpu_identity() -> dict[str, str]:
    """The CPU's family, model and stepping, for results' records (one name, "AMD EPYC", covers
    generations of different speeds). Empty where /proc/cpuinfo is not there."""
    cpu = _first_cpu()
    names = {"cpu family": "family", "model": "model", "stepping": "stepping"}
    return {short: cpu[key] for key, short in names.items() if key in cpu}


@contextlib.contextmanager
def expect_error(*expected: type[BaseException]) -> Iterator[None]:
    """Run a block that must fail, print its error in one line, and let the notebook go on
    (chapters *show* errors without stopping "Run all"). The block must raise one of
    ``expected`` (default: any ``Exception``), else this raises ``AssertionError``."""
    expected = expected or (Exception,)
    try:
        yield
    except expected as err:
        print(f"{type(err).__name__}: {err}")
    else:
        names = ", ".join(e.__name__ for e in expected)
        raise AssertionError(f"expected the block to raise {names}, but it ran without error")
