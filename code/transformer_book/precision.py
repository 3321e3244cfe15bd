"""Mixed precision (chapter 11): which autocast dtype a device trains in, and the autocast
context of the forward pass (the weights and Adam's moments stay float32)."""

from __future__ import annotations

import contextlib

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

__all__ = ["autocast", "autocast_dtype", "native_cpu_bf16"]


def autocast(device_type: str, dtype: torch.dtype | None):
    """``torch.autocast`` to ``dtype`` on ``device_type``; a no-op when ``dtype`` is None.

    On a CPU, attention then runs through ``scaled_dot_product_attention``'s plain ("math")
    kernel: the fused CPU kernel's backward pass is several times slower in bf16 than in
    float32 (chapter 11), which would take back much of what bf16 gains.
    """
    if dtype is None:
        return contextlib.nullcontext()
    if device_type != "cpu":
        return torch.autocast(device_type, dtype=dtype)
    return _cpu_autocast(dtype)


@contextlib.contextmanager
def _cpu_autocast(dtype: torch.dtype):
    # two nested contexts, written out: torch.compile traces this (not an ExitStack)
    with torch.autocast("cpu", dtype=dtype), sdpa_kernel(SDPBackend.MATH):
        yield


def native_cpu_bf16() -> bool:
    """Whether this CPU has bf16 instructions (x86: AVX512_BF16 or AMX); without them bf16 is
    slower than float32. False where PyTorch cannot tell (e.g. ARM)."""
    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(getattr(torch.cpu, name, lambda: False)() for name in checks)


def autocast_dtype(device: torch.device, *, cuda: bool = True,
                   cpu: bool | None = False) -> torch.dtype | None:
    """The autocast dtype for training on ``device``, or None for full precision.

    On CUDA (if ``cuda``): bf16 from Ampere on, else fp16 (which needs loss scaling). On the
    CPU: bf16 if ``cpu`` is True, or if None and :func:`native_cpu_bf16`. Elsewhere: None.
    """
    if device.type == "cpu":
        wanted = native_cpu_bf16() if cpu is None else cpu
        return torch.bfloat16 if wanted else None
    if device.type != "cuda" or not cuda:
        return None
    return torch.bfloat16 if _native_bf16(device) else torch.float16


def _native_bf16(device: torch.device) -> bool:
    """Whether the GPU has bf16 units: compute capability 8.0 (Ampere) or later; ROCm GPUs do.

    Not ``torch.cuda.is_bf16_supported()``: it also answers True where bf16 is only emulated
    (Colab's T4), and torch 2.3, the oldest release the book supports, has no
    ``including_emulation=False`` to ask for native support only.
    """
    if torch.version.hip:
        return True
    return torch.cuda.get_device_capability(device)[0] >= 8
