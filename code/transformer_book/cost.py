"""FLOPs of one sequence layer (the paper's Table 1, Sec. 4), counted once for the whole book
(chapters 1 and 10). A multiply-add counts 2 FLOPs (as PyTorch's ``FlopCounterMode`` does); n
positions of width d, forward pass, batch 1, biases and nonlinearities ignored:

==========================  ======================  ==========================================
layer                       FLOPs                   where it comes from
==========================  ======================  ==========================================
Eq. (1) alone               4 n^2 d                 Q K^T (2 n^2 d) and weights times V (2 n^2 d)
self-attention layer        8 n d^2 + 4 n^2 d       Q, K, V and output projections (4 x 2 n d^2)
                                                    plus Eq. (1)
Elman RNN layer             4 n d^2                 x_t U and h_{t-1} W per step (2 x 2 d^2)
GRU layer                   12 n d^2                3 gates, each 2 x 2 d^2 per step
LSTM layer                  16 n d^2                4 gates, each 2 x 2 d^2 per step
==========================  ======================  ==========================================

The paper's "n < d" compares Eq. (1) alone with the Elman recurrence (chapter 1).
"""

from __future__ import annotations

__all__ = ["LAYER_FLOPS", "crossover_length", "layer_flops"]

# FLOPs of one layer over n positions of width d (forward, batch 1, multiply-add = 2 FLOPs).
LAYER_FLOPS = {
    "attention": lambda n, d: 4 * n**2 * d,  # Eq. (1) alone: Q K^T and weights @ V
    "self-attention layer": lambda n, d: 8 * n * d**2 + 4 * n**2 * d,  # 4 projections + Eq. (1)
    "elman": lambda n, d: 4 * n * d**2,  # x_t U + h_{t-1} W at every step
    "gru": lambda n, d: 12 * n * d**2,  # 3 gates
    "lstm": lambda n, d: 16 * n * d**2,  # 4 gates
}


def layer_flops(kind: str, n: int, d: int) -> int:
    """FLOPs of one layer of ``kind`` (a key of :data:`LAYER_FLOPS`), n positions of width d."""
    if kind not in LAYER_FLOPS:
        raise ValueError(f"unknown layer kind {kind!r}; choose one of {sorted(LAYER_FLOPS)}")
    if n < 1 or d < 1:
        raise ValueError(f"n and d must be positive, got n={n}, d={d}")
    return int(LAYER_FLOPS[kind](n, d))


def crossover_length(kind: str, other: str, d: int) -> float | None:
    """The length n at which layer ``kind`` starts to cost more FLOPs than ``other``, at width d.

    Below it ``kind`` is the cheaper one. ``None`` when ``kind`` is never (or always) cheaper.
    Every formula is a n d^2 + b n^2 d, so n = d (a2 - a1) / (b1 - b2).
    """
    a1, b1 = _coefficients(kind)
    a2, b2 = _coefficients(other)
    if b1 == b2:
        return None
    n = d * (a2 - a1) / (b1 - b2)
    return n if n > 0 else None


def _coefficients(kind: str) -> tuple[float, float]:
    """(a, b) with FLOPs = a n d^2 + b n^2 d, read off the formula at two points."""
    f = LAYER_FLOPS[kind]
    # f(n, d) = a n d^2 + b n^2 d: at (1, 1) a + b; at (2, 1) 2a + 4b.
    s1, s2 = f(1, 1), f(2, 1)
    b = (s2 - 2 * s1) / 2
    return s1 - b, b
