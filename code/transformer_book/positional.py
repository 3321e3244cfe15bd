"""Sec. 3.5: positional encodings, added to the token embeddings so that attention can see order
(chapter 6): the paper's fixed sinusoids (the default), or learned embeddings (Table 3, row E;
``TransformerConfig.learned_positions``).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


def sinusoidal_table(max_len: int, d_model: int) -> Tensor:
    """Sec. 3.5: PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(same angle).

    Dimensions are interleaved as in the formula (sin, cos, sin, ...; Tensor2Tensor concatenates
    [sin | cos], a permutation of the columns). Computed in float64, returned as float32.

    Args:
        max_len: number of positions (rows).
        d_model: embedding width (columns); an odd width drops the last cosine.

    Returns:
        The (max_len, d_model) table; row ``pos`` is the encoding of position ``pos``.
    """
    if max_len <= 0 or d_model <= 0:
        raise ValueError(f"max_len and d_model must be positive, got {max_len}, {d_model}")
    position = torch.arange(max_len, dtype=torch.float64)[:, None]  # (max_len, 1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # (ceil(D/2),): the even indices 2i
    angle = position / 10000.0 ** (two_i / d_model)  # (max_len, ceil(D/2))
    table = torch.zeros(max_len, d_model, dtype=torch.float64)  # (max_len, D)
    table[:, 0::2] = torch.sin(angle)  # even dimensions
    table[:, 1::2] = torch.cos(angle[:, : d_model // 2])  # odd dimensions
    return table.float()


def _check_positions(x: Tensor, d_model: int, offset: int, max_len: int) -> None:
    if not isinstance(x, Tensor) or x.dim() != 3 or x.shape[-1] != d_model:
        shape = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
        raise ValueError(f"x must have shape (B, L, d_model={d_model}), got {shape}")
    if offset < 0:
        raise ValueError(f"offset must be >= 0, got {offset}")
    if offset + x.shape[1] > max_len:
        raise ValueError(
            f"positions {offset}..{offset + x.shape[1] - 1} exceed the positional table "
            f"(max_len={max_len}); use shorter sequences or a larger max_len"
        )


class PositionalEncoding(nn.Module):
    """Sec. 3.5 and 5.4: add the sinusoidal table to the (scaled) embeddings, then dropout.

    The table is a buffer (moves with ``.to(device)``, never trained) and is not saved in the
    ``state_dict`` since it is a pure function of ``max_len`` and ``d_model``.

    Args:
        d_model: embedding width D.
        max_len: number of positions in the table; longer inputs raise a ValueError.
        dropout: dropout on the sum (Sec. 5.4: P_drop = 0.1 in the base model).
    """

    def __init__(self, d_model: int, max_len: int, dropout: float = 0.0):
        super().__init__()
        self.d_model = d_model
        self.max_len = max_len
        self.dropout = nn.Dropout(dropout)
        table = sinusoidal_table(max_len, d_model)  # (max_len, D)
        self.register_buffer("pe", table, persistent=False)

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        """Add PE[offset : offset + L] to the embeddings x, (B, L, D) -> (B, L, D); ``offset``
        is the absolute position of ``x[:, 0]`` (non-zero in incremental decoding)."""
        _check_positions(x, self.d_model, offset, self.max_len)
        L = x.shape[1]
        return self.dropout(x + self.pe[offset : offset + L].to(x.dtype))  # (B, L, D)


class LearnedPositionalEmbedding(nn.Module):
    """Table 3, row (E): a learned embedding per position instead of the sinusoids (Sec. 3.5).

    The paper found "nearly identical results"; unlike the sinusoids it cannot extend past
    ``max_len``. Same interface as :class:`PositionalEncoding`.
    """

    def __init__(self, d_model: int, max_len: int, dropout: float = 0.0):
        super().__init__()
        self.d_model = d_model
        self.max_len = max_len
        self.embedding = nn.Embedding(max_len, d_model)  # row pos: learned vector of position pos
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        """Add the learned vectors of positions offset .. offset + L - 1; (B, L, D) -> (B, L, D)."""
        _check_positions(x, self.d_model, offset, self.max_len)
        positions = torch.arange(offset, offset + x.shape[1], device=x.device)  # (L,)
        return self.dropout(x + self.embedding(positions).to(x.dtype))  # (B, L, D)
