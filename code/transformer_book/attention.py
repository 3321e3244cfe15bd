"""Sec. 3.2: scaled dot-product attention (Eq. 1) and multi-head attention (chapters 2 and 3).

Two paths compute the same thing: :func:`scaled_dot_product_attention`, from the formula, returns
the weights; :func:`fast_scaled_dot_product_attention` (PyTorch's fused SDPA) does not.
Masks are boolean, ``True`` = may attend, broadcastable to (B, H, L, S)
(:mod:`transformer_book.masks`). A query whose keys are all masked gets zero weights and a zero
output on both paths (not a uniform average, not NaN), and no NaN in the gradients.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from transformer_book.masks import check_mask_shape


def _check_qkv(q: Tensor, k: Tensor, v: Tensor) -> tuple[int, ...]:
    """Validate q (..., L, Dk), k (..., S, Dk), v (..., S, Dv); return the scores' shape."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if not t.is_floating_point():
            raise TypeError(f"{name} must be a floating-point tensor, got dtype {t.dtype}")
        if t.dim() < 2:
            raise ValueError(
                f"{name} must have at least 2 dimensions (..., len, dim), got {tuple(t.shape)}"
            )
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k, v must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"q and k must have the same last dimension Dk, got {q.shape[-1]} and {k.shape[-1]}"
        )
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"k and v must have the same length S, got {k.shape[-2]} and {v.shape[-2]}"
        )
    try:
        batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except RuntimeError as err:
        raise ValueError(
            f"leading (batch, head) dimensions of q {tuple(q.shape)}, k {tuple(k.shape)}, "
            f"v {tuple(v.shape)} do not broadcast"
        ) from err
    return (*batch, q.shape[-2], k.shape[-2])  # (B, H, L, S)


def scaled_dot_product_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    attn_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    *,
    scale: float | None = None,
) -> tuple[Tensor, Tensor]:
    """Eq. (1), Sec. 3.2.1: Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V, from scratch.

    Masked scores become ``torch.finfo(dtype).min`` (``-1e9`` overflows in float16, ``-inf``
    gives NaN); the softmax runs in at least float32 and is cast back to the input dtype.

    Args:
        q, k, v: queries, keys, values.
        attn_mask: optional boolean mask, ``True`` = may attend (as in PyTorch's SDPA).
        dropout_p: dropout on the attention weights; applied whenever > 0 (as in PyTorch's SDPA),
            so pass 0.0 at evaluation time.
        scale: factor on the scores, default ``1 / sqrt(Dk)``; ``scale=1.0`` removes the scaling.

    Returns:
        ``(output, weights)``; ``weights`` are the softmax probabilities before dropout.

    Shape:
        q (B, H, L, Dk), k (B, H, S, Dk), v (B, H, S, Dv), attn_mask broadcastable to (B, H, L, S)
        -> output (B, H, L, Dv), weights (B, H, L, S). Any leading dimensions that broadcast
        work, e.g. (L, Dk) or (B, L, Dk).
    """
    score_shape = _check_qkv(q, k, v)
    check_mask_shape(attn_mask, score_shape)
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"dropout_p must be in [0, 1), got {dropout_p}")
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])

    scores = (q @ k.transpose(-2, -1)) * scale  # (B, H, L, S)
    if attn_mask is not None:
        # The most negative finite value of the dtype: exp() of it is exactly 0 after the max
        # is subtracted, and it cannot overflow the way -1e9 does in float16.
        scores = scores.masked_fill(~attn_mask, torch.finfo(scores.dtype).min)
    # At least float32 for accuracy: float16/bfloat16 scores are upcast, float64 stays float64.
    softmax_dtype = torch.promote_types(scores.dtype, torch.float32)
    weights = torch.softmax(scores.to(softmax_dtype), dim=-1)  # (B, H, L, S)
    if attn_mask is not None:
        # A fully masked row would be uniform after the softmax; make it all zeros instead.
        weights = weights.masked_fill(~attn_mask, 0.0)
    weights = weights.to(q.dtype)
    dropped = F.dropout(weights, p=dropout_p) if dropout_p > 0.0 else weights
    output = dropped @ v  # (B, H, L, Dv)
    return output, weights


def fast_scaled_dot_product_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    attn_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    *,
    scale: float | None = None,
) -> Tensor:
    """Eq. (1) through PyTorch's fused ``F.scaled_dot_product_attention``; output only, no weights.

    Same arguments, shapes and fully-masked-row behaviour (zero output) as
    :func:`scaled_dot_product_attention`, which it agrees with to floating-point tolerance.
    Inputs are assumed valid (callers validate); this is the fast path.
    """
    has_key = None
    if attn_mask is not None:
        has_key = attn_mask.any(dim=-1, keepdim=True)  # (..., L, 1): rows with a key to attend to
        # Some PyTorch versions and kernels return NaN for a fully masked row. Let such rows
        # attend everywhere (finite result, finite gradient), then zero them below.
        attn_mask = attn_mask | ~has_key  # (..., L, S)
    output = F.scaled_dot_product_attention(
        q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, scale=scale
    )  # (B, H, L, Dv)
    if has_key is not None:
        output = output.masked_fill(~has_key, 0.0)  # fully masked rows -> 0, as documented
    return output


@dataclass
class KVCache:
    """Keys and values one attention layer has already projected (split into heads), so that
    each step of incremental decoding projects only its new positions. ``static=True``
    (encoder-decoder attention): computed from the encoder memory once, on the first call.
    Owned by the caller's decoding loop; :class:`MultiHeadAttention` reads and extends it.
    """

    key: Tensor | None = None  # (B, H, S, Dk): keys seen so far, or None before the first step
    value: Tensor | None = None  # (B, H, S, Dk): the matching values
    static: bool = False  # True: keys/values are fixed after the first call (cross-attention)

    def __len__(self) -> int:
        """Number of cached key positions S (0 when empty)."""
        return 0 if self.key is None else self.key.shape[-2]

    def reorder(self, index: Tensor) -> None:
        """Select batch rows in place (beam search keeps the beams it chose): rows = ``index``."""
        if self.key is not None:
            self.key = self.key.index_select(0, index)  # (B', H, S, Dk)
            self.value = self.value.index_select(0, index)  # (B', H, S, Dk)


class MultiHeadAttention(nn.Module):
    """Sec. 3.2.2: MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O,
    head_i = Attention(Q W^Q_i, K W^K_i, V W^V_i).

    The heads' projections sit side by side in one ``nn.Linear`` per role (``q_proj``,
    ``k_proj``: d_model -> h * d_k; ``v_proj``: h * d_v), split into heads by a reshape;
    ``out_proj`` is W^O. Default d_k = d_v = d_model / h, as in the paper.

    Args:
        d_model: model width D (512 in the paper).
        num_heads: number of heads h (8 in the paper); must divide ``d_model`` unless both ``d_k``
            and ``d_v`` are given.
        dropout: dropout on the attention weights during training (not in the paper, Sec. 5.4).
        bias: whether the four projections have biases.
        d_k: per-head width of queries and keys (Table 3 (B) varies it); default d_model / h.
        d_v: per-head width of values; default d_model / h.
    """

    def __init__(self, d_model: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 d_k: int | None = None, d_v: int | None = None):
        super().__init__()
        if (
            not isinstance(d_model, int)
            or not isinstance(num_heads, int)
            or d_model <= 0
            or num_heads <= 0
        ):
            raise ValueError(
                f"d_model and num_heads must be positive integers, got {d_model!r}, {num_heads!r}"
            )
        for name, size in (("d_k", d_k), ("d_v", d_v)):
            if size is not None and (not isinstance(size, int) or isinstance(size, bool) or size <= 0):
                raise ValueError(f"{name} must be a positive integer or None, got {size!r}")
        if (d_k is None or d_v is None) and d_model % num_heads != 0:
            raise ValueError(
                f"d_model ({d_model}) must be divisible by num_heads ({num_heads}) so that each "
                f"head has d_k = d_model / num_heads dimensions"
            )
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        self.d_model = d_model
        self.num_heads = num_heads
        self.d_k = d_k if d_k is not None else d_model // num_heads
        self.d_v = d_v if d_v is not None else d_model // num_heads
        self.dropout = dropout
        HDk, HDv = num_heads * self.d_k, num_heads * self.d_v  # d_model each with the defaults
        self.q_proj = nn.Linear(d_model, HDk, bias=bias)  # W^Q for all heads side by side
        self.k_proj = nn.Linear(d_model, HDk, bias=bias)  # W^K
        self.v_proj = nn.Linear(d_model, HDv, bias=bias)  # W^V
        self.out_proj = nn.Linear(HDv, d_model, bias=bias)  # W^O

    def _check_input(self, name: str, x: Tensor, batch: int | None) -> None:
        if not isinstance(x, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
        if x.dim() != 3 or x.shape[-1] != self.d_model:
            raise ValueError(
                f"{name} must have shape (B, len, d_model={self.d_model}), got {tuple(x.shape)}"
            )
        if batch is not None and x.shape[0] != batch:
            raise ValueError(f"{name} has batch size {x.shape[0]} but query has {batch}")

    def _split_heads(self, x: Tensor) -> Tensor:
        B, length, _ = x.shape  # length: L for queries, S for keys and values
        return x.view(B, length, self.num_heads, -1).transpose(1, 2)  # (B, H, L or S, Dk or Dv)

    def _project(self, x: Tensor, *projections: nn.Linear) -> tuple[Tensor, ...]:
        """``x`` through several projections as one matrix product, their weights stacked (as
        nn.MultiheadAttention's in_proj): each result split into heads, (B, H, L or S, Dk)."""
        weight = torch.cat([p.weight for p in projections])  # (sum of out_features, D)
        bias = None if projections[0].bias is None else torch.cat([p.bias for p in projections])
        out = F.linear(x, weight, bias)  # (B, L or S, sum of out_features)
        parts = out.split([p.out_features for p in projections], dim=-1)
        return tuple(self._split_heads(part) for part in parts)

    def forward(
        self,
        query: Tensor,
        key: Tensor | None,
        value: Tensor | None,
        attn_mask: Tensor | None = None,
        need_weights: bool = False,
        kv_cache: KVCache | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """Sec. 3.2.2: attend from ``query`` to ``key``/``value`` with h heads (self-attention:
        one tensor three times; encoder-decoder attention: key = value = the encoder output).

        Args:
            query: the sequence that asks.
            key: the sequence that is matched (may be None when ``kv_cache`` is a filled static
                cache).
            value: the sequence that is passed on (same length as ``key``).
            attn_mask: optional boolean mask, ``True`` = may attend, broadcastable to
                (B, H, L, S), where S counts cached keys too.
            need_weights: also return the attention weights. Then the from-scratch path runs;
                otherwise PyTorch's fused SDPA (the results agree).
            kv_cache: optional :class:`KVCache`, updated in place. Not static: the new keys and
                values are appended and attention runs over all of them. Static: filled from
                ``key``/``value`` on the first call, reused as is afterwards.

        Returns:
            ``(output, weights)``; ``weights`` is None unless ``need_weights``.

        Shape:
            query (B, L, D), key and value (B, S, D) -> output (B, L, D), weights (B, H, L, S).
        """
        self._check_input("query", query, None)
        B, L, _ = query.shape
        q = None
        if kv_cache is not None and kv_cache.static and kv_cache.key is not None:
            if kv_cache.key.shape[0] != B:
                raise ValueError(
                    f"kv_cache has batch size {kv_cache.key.shape[0]} but query has {B}"
                )
            k, v = kv_cache.key, kv_cache.value  # (B, H, S, Dk) each, computed on an earlier call
        else:
            self._check_input("key", key, B)
            self._check_input("value", value, B)
            if key.shape[1] != value.shape[1]:
                raise ValueError(
                    f"key and value must have the same length, got {key.shape[1]} and {value.shape[1]}"
                )
            # Fewer, larger matrix products when inputs coincide (same maths as one each):
            if query is key and key is value:  # self-attention: W^Q, W^K, W^V at once
                q, k, v = self._project(query, self.q_proj, self.k_proj, self.v_proj)
            elif key is value:  # encoder-decoder attention: W^K, W^V at once
                k, v = self._project(key, self.k_proj, self.v_proj)  # (B, H, S_new, Dk) each
            else:
                k = self._split_heads(self.k_proj(key))  # (B, H, S_new, Dk)
                v = self._split_heads(self.v_proj(value))  # (B, H, S_new, Dk)
            if kv_cache is not None:
                if kv_cache.key is not None:  # not static: append the new positions
                    if kv_cache.key.shape[0] != B:
                        raise ValueError(
                            f"kv_cache has batch size {kv_cache.key.shape[0]} but query has {B}"
                        )
                    k = torch.cat([kv_cache.key, k], dim=2)  # (B, H, S_past + S_new, Dk)
                    v = torch.cat([kv_cache.value, v], dim=2)  # (B, H, S_past + S_new, Dk)
                kv_cache.key, kv_cache.value = k, v
        if q is None:
            q = self._split_heads(self.q_proj(query))  # (B, H, L, Dk)
        S = k.shape[2]
        check_mask_shape(attn_mask, (B, self.num_heads, L, S))

        dropout_p = self.dropout if self.training else 0.0
        if need_weights:
            # The from-scratch path of Eq. (1): out (B, H, L, Dk), weights (B, H, L, S)
            out, weights = scaled_dot_product_attention(q, k, v, attn_mask, dropout_p)
        else:
            out, weights = fast_scaled_dot_product_attention(q, k, v, attn_mask, dropout_p), None
        out = out.transpose(1, 2).contiguous().view(B, L, self.num_heads * self.d_v)  # concat heads
        return self.out_proj(out), weights
