"""FLOPs of one sequence layer, counted once for the whole book (chapters 1 and 10 cite this).

The paper's Table 1 (Sec. 4) gives the complexity per layer: O(n^2 d) for self-attention and
O(n d^2) for a recurrent layer. Its remark that self-attention is faster "when the sequence
length n is smaller than the representation dimensionality d" compares exactly those two terms:
the attention operation of Eq. (1) (n^2 d) against the recurrence's d^2 work per step (n d^2).
Whole layers carry more constants. Counting a multiply-add as 2 FLOPs (as PyTorch's
``FlopCounterMode`` does), for n positions of width d, forward pass, batch 1, biases and
nonlinearities ignored:

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

So a whole self-attention layer is never cheaper than an Elman layer (8 n d^2 alone exceeds
4 n d^2); it is cheaper than a GRU layer for n < d and than an LSTM layer for n < 2 d. Eq. (1)
alone is cheaper than the Elman recurrence for n < d: that is the paper's "n < d".
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
    """FLOPs of one layer of ``kind`` (a key of :data:`LAYER_FLOPS`) over ``n`` positions of width ``d``."""
    if kind not in LAYER_FLOPS:
        raise ValueError(f"unknown layer kind {kind!r}; choose one of {sorted(LAYER_FLOPS)}")
    if n < 1 or d < 1:
        raise ValueError(f"n and d must be positive, got n={n}, d={d}")
    return int(LAYER_FLOPS[kind](n, d))


def crossover_length(kind: str, other: str, d: int) -> float | None:
    """The length n at which layer ``kind`` starts to cost more FLOPs than ``other``, at width d.

    Below it ``kind`` is the cheaper one. Returns ``None`` when ``kind`` is never cheaper (or
    always cheaper). Solved from the formulas, which are all of the form a n d^2 + b n^2 d:
    a1 n d^2 + b1 n^2 d = a2 n d^2 + b2 n^2 d  =>  n = d (a2 - a1) / (b1 - b2).
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
