"""Sec. 3.2.3: the two masks of the Transformer, and the check every attention call runs on them.

A mask is a **boolean** tensor, ``True`` = this query may attend to this key (as in PyTorch's
SDPA), broadcastable to the scores' shape (B, H, L, S); masks combine with ``&``.
``torch.nn.MultiheadAttention`` and ``torch.nn.Transformer`` use the opposite meaning
(``True`` = blocked): invert with ``~`` at the boundary with them.
"""

from __future__ import annotations

import torch
from torch import Tensor


def padding_mask(tokens: Tensor, pad_id: int) -> Tensor:
    """A mask that hides padding tokens from every query (the paper does not mention padding;
    implementations mask it with Sec. 3.2.3's mechanism).

    Args:
        tokens: integer token ids, right- or left-padded with ``pad_id``.
        pad_id: the id of the padding token.

    Returns:
        Boolean mask, ``True`` where the token is real (may be attended to).

    Shape:
        tokens (B, S) -> mask (B, 1, 1, S), broadcasting over heads and query positions.
    """
    if not isinstance(tokens, Tensor):
        raise TypeError(f"tokens must be a torch.Tensor, got {type(tokens).__name__}")
    if tokens.dim() != 2:
        raise ValueError(f"tokens must have shape (B, S), got {tuple(tokens.shape)}")
    # dtype attributes, not Tensor methods: torch 2.3's dynamo cannot trace Tensor.is_complex()
    if tokens.dtype.is_floating_point or tokens.dtype == torch.bool or tokens.dtype.is_complex:
        raise TypeError(f"tokens must hold integer ids, got dtype {tokens.dtype}")
    return (tokens != pad_id)[:, None, None, :]  # (B, 1, 1, S)


def causal_mask(
    L: int, device: torch.device | str | None = None, *, key_len: int | None = None
) -> Tensor:
    """Sec. 3.2.3: the decoder's look-ahead mask; position i may attend to positions j <= i.

    Args:
        L: number of query positions.
        device: where to create the mask.
        key_len: number of key positions S (default ``L``). With ``key_len > L`` the L queries
            are taken to be the *last* L of the S positions, as in incremental decoding with a
            key/value cache: query i (at absolute position ``key_len - L + i``) sees keys
            ``0 .. key_len - L + i``.

    Returns:
        Boolean mask, ``True`` on and below the (shifted) diagonal.

    Shape:
        (L, S) with S = ``key_len`` (default ``L``); broadcasts against (B, H, L, S).
    """
    S = L if key_len is None else key_len
    if L < 0 or S < L:
        raise ValueError(f"need 0 <= L <= key_len, got L={L}, key_len={S}")
    ones = torch.ones(L, S, dtype=torch.bool, device=device)  # (L, S)
    return torch.tril(ones, diagonal=S - L)  # (L, S)


def check_mask_shape(
    mask: Tensor | None, target_shape: tuple[int, ...], name: str = "attn_mask"
) -> None:
    """Raise a clear error unless ``mask`` is None or a boolean tensor broadcastable to
    ``target_shape`` without enlarging it (each right-aligned dimension 1 or the target's)."""
    if mask is None:
        return
    if not isinstance(mask, Tensor):
        raise TypeError(f"{name} must be a boolean torch.Tensor or None, got {type(mask).__name__}")
    if mask.dtype != torch.bool:
        raise TypeError(
            f"{name} must have dtype torch.bool (True = may attend), got {mask.dtype}; "
            "convert with mask.bool() if 1 means 'attend', or ~mask.bool() if 1 means 'blocked'"
        )
    target = tuple(target_shape)
    ok = mask.dim() <= len(target) and all(
        m in (1, t) for m, t in zip(reversed(mask.shape), reversed(target), strict=False)
    )
    if not ok:
        raise ValueError(
            f"{name} of shape {tuple(mask.shape)} does not broadcast to the attention scores' "
            f"shape {target} (B, H, L, S)"
        )


def check_mask(
    mask: Tensor | None, B: int, H: int, L: int, S: int, name: str = "attn_mask"
) -> None:
    """Sec. 3.2.3: validate an attention mask against scores of shape (B, H, L, S).

    Args:
        mask: ``None`` or a boolean tensor, ``True`` = may attend.
        B, H, L, S: batch size, heads, query length, key length.
        name: the argument name used in error messages.

    Raises:
        TypeError: the mask is not a boolean tensor.
        ValueError: the mask does not broadcast to (B, H, L, S).
    """
    check_mask_shape(mask, (B, H, L, S), name=name)
