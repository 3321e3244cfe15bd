"""What attention costs against sequence length n (Sec. 4, Table 1): Eq. (1) from scratch
against PyTorch's fused kernel, and one self-attention layer against chapter 1's recurrent
networks. Chapter 10 and ``benchmarks/attention_cost.py`` call these functions."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from transformer_book.attention import MultiHeadAttention, scaled_dot_product_attention

from transformer_lab.memory import peak_memory_bytes
from transformer_lab.timing import time_call


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

