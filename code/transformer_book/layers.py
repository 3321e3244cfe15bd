"""Sec. 3.1 and 3.3: the building blocks of Figure 1, and the encoder and decoder stacks.

Every sub-layer is wrapped in "Add & Norm" (:class:`SublayerConnection`), post-norm as in the
paper or pre-norm with ``norm_first=True``. Attention weights are returned when asked for
(``need_weights=True``), never stored on modules.
"""

from __future__ import annotations

from collections.abc import Callable

from torch import Tensor, nn

from transformer_book.attention import KVCache, MultiHeadAttention
from transformer_book.config import TransformerConfig


class PositionwiseFeedForward(nn.Module):
    """Eq. (2), Sec. 3.3: FFN(x) = max(0, x W_1 + b_1) W_2 + b_2, applied to each position alone.

    Args:
        d_model: input and output width (512 in the paper).
        d_ff: inner width (2048 in the paper).
        dropout: dropout after the ReLU (not in the paper; 0 keeps it out).

    Shape:
        (B, L, D) -> (B, L, D)
    """

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)  # W_1, b_1
        self.linear2 = nn.Linear(d_ff, d_model)  # W_2, b_2
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.linear2(self.dropout(self.linear1(x).relu()))


class SublayerConnection(nn.Module):
    """Sec. 3.1 and 5.4, "Add & Norm": LayerNorm(x + Dropout(Sublayer(x))).

    With ``norm_first=True`` (pre-norm, Xiong et al. 2020; chapter 5) it computes
    x + Dropout(Sublayer(LayerNorm(x))) instead.

    Args:
        d_model: width D of x.
        dropout: residual dropout P_drop (Sec. 5.4).
        norm_first: pre-norm instead of the paper's post-norm.
        eps: LayerNorm epsilon.
    """

    def __init__(
        self, d_model: int, dropout: float = 0.0, norm_first: bool = False, eps: float = 1e-5
    ):
        super().__init__()
        self.norm = nn.LayerNorm(d_model, eps=eps)
        self.dropout = nn.Dropout(dropout)
        self.norm_first = norm_first
        # An ablation switch, not a constructor argument (the paper always keeps the residual):
        # chapter 7 sets it to False on a model's sub-layers to measure what the residual adds.
        self.residual = True

    def forward(self, x: Tensor, sublayer: Callable[[Tensor], Tensor]) -> Tensor:
        """Apply ``sublayer`` (a function of a (B, L, D) tensor) with residual and LayerNorm;
        x (B, L, D) -> (B, L, D)."""
        if self.norm_first:
            out = self.dropout(sublayer(self.norm(x)))
            return x + out if self.residual else out
        out = self.dropout(sublayer(x))
        return self.norm(x + out if self.residual else out)  # "Add", then "Norm"


# "AddNorm" is the name Figure 1 of the paper gives to the same block.
AddNorm = SublayerConnection


class EncoderLayer(nn.Module):
    """Sec. 3.1, encoder: multi-head self-attention, then the feed-forward network, each wrapped
    in Add & Norm.

    Args:
        d_model, num_heads, d_ff: widths (Sec. 3.1-3.3).
        dropout: residual dropout (Sec. 5.4).
        norm_first: pre-norm instead of the paper's post-norm.
        layer_norm_eps: LayerNorm epsilon.
        attention_dropout: dropout on attention weights (not in the paper).
        ffn_dropout: dropout inside the feed-forward network (not in the paper).
        d_k, d_v: per-head widths; None = d_model / num_heads (Sec. 3.2.2; Table 3 (B) varies d_k).
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        d_ff: int,
        dropout: float = 0.0,
        *,
        norm_first: bool = False,
        layer_norm_eps: float = 1e-5,
        attention_dropout: float = 0.0,
        ffn_dropout: float = 0.0,
        d_k: int | None = None,
        d_v: int | None = None,
    ):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout=attention_dropout,
                                            d_k=d_k, d_v=d_v)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout=ffn_dropout)
        self.attn_sublayer = SublayerConnection(d_model, dropout, norm_first, layer_norm_eps)
        self.ffn_sublayer = SublayerConnection(d_model, dropout, norm_first, layer_norm_eps)

    def forward(
        self, x: Tensor, src_mask: Tensor | None = None, need_weights: bool = False
    ) -> tuple[Tensor, Tensor | None]:
        """x (B, S, D), the source; src_mask, its padding mask, broadcastable to (B, H, S, S).

        Returns ``(x (B, S, D), weights (B, H, S, S) if need_weights else None)``.
        """
        weights = None

        def self_attention(h: Tensor) -> Tensor:  # h: x, or LayerNorm(x) with norm_first
            nonlocal weights
            out, weights = self.self_attn(h, h, h, attn_mask=src_mask, need_weights=need_weights)
            return out

        x = self.attn_sublayer(x, self_attention)  # (B, S, D)
        x = self.ffn_sublayer(x, self.feed_forward)  # (B, S, D)
        return x, weights


class DecoderLayer(nn.Module):
    """Sec. 3.1, decoder: masked self-attention, encoder-decoder attention (Sec. 3.2.3), then the
    feed-forward network, each wrapped in Add & Norm. Same arguments as :class:`EncoderLayer`.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        d_ff: int,
        dropout: float = 0.0,
        *,
        norm_first: bool = False,
        layer_norm_eps: float = 1e-5,
        attention_dropout: float = 0.0,
        ffn_dropout: float = 0.0,
        d_k: int | None = None,
        d_v: int | None = None,
    ):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout=attention_dropout,
                                            d_k=d_k, d_v=d_v)
        self.cross_attn = MultiHeadAttention(d_model, num_heads, dropout=attention_dropout,
                                             d_k=d_k, d_v=d_v)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout=ffn_dropout)
        self.self_attn_sublayer = SublayerConnection(d_model, dropout, norm_first, layer_norm_eps)
        self.cross_attn_sublayer = SublayerConnection(d_model, dropout, norm_first, layer_norm_eps)
        self.ffn_sublayer = SublayerConnection(d_model, dropout, norm_first, layer_norm_eps)

    def forward(
        self,
        x: Tensor,
        memory: Tensor | None,
        src_mask: Tensor | None = None,
        tgt_mask: Tensor | None = None,
        need_weights: bool = False,
        self_cache: KVCache | None = None,
        cross_cache: KVCache | None = None,
    ) -> tuple[Tensor, Tensor | None, Tensor | None]:
        """Args:
            x: the target representation (B, T, D) (only the new positions when caching).
            memory: the encoder output (B, S, D) (may be None once ``cross_cache`` is filled).
            src_mask: source padding mask, broadcastable to (B, H, T, S).
            tgt_mask: causal & target padding mask, broadcastable to (B, H, T, T_total).
            need_weights: also return both attention maps.
            self_cache, cross_cache: optional :class:`KVCache` objects for incremental decoding
                (``cross_cache`` must be ``static``).

        Returns:
            ``(x (B, T, D), self_weights (B, H, T, T_total), cross_weights (B, H, T, S))``, the
            weights None unless ``need_weights``.
        """
        self_weights = cross_weights = None

        def self_attention(h: Tensor) -> Tensor:
            nonlocal self_weights
            out, self_weights = self.self_attn(
                h, h, h, attn_mask=tgt_mask, need_weights=need_weights, kv_cache=self_cache
            )
            return out

        def cross_attention(h: Tensor) -> Tensor:  # queries from the decoder, keys/values: memory
            nonlocal cross_weights
            out, cross_weights = self.cross_attn(
                h,
                memory,
                memory,
                attn_mask=src_mask,
                need_weights=need_weights,
                kv_cache=cross_cache,
            )
            return out

        x = self.self_attn_sublayer(x, self_attention)  # (B, T, D)
        x = self.cross_attn_sublayer(x, cross_attention)  # (B, T, D)
        x = self.ffn_sublayer(x, self.feed_forward)  # (B, T, D)
        return x, self_weights, cross_weights


def _layer_kwargs(config: TransformerConfig) -> dict:
    return {
        "d_model": config.d_model,
        "num_heads": config.num_heads,
        "d_ff": config.d_ff,
        "dropout": config.dropout,
        "norm_first": config.norm_first,
        "layer_norm_eps": config.layer_norm_eps,
        "attention_dropout": config.attention_dropout,
        "ffn_dropout": config.ffn_dropout,
        "d_k": config.d_key,  # None: d_model / h, the paper's choice
        "d_v": config.d_value,
    }


class Encoder(nn.Module):
    """Sec. 3.1: a stack of N identical (not weight-sharing) encoder layers; it ends with a
    LayerNorm when ``config.norm_first`` (pre-norm layers leave their output unnormalised)."""

    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.layers = nn.ModuleList(
            EncoderLayer(**_layer_kwargs(config)) for _ in range(config.num_layers)
        )
        self.norm = (
            nn.LayerNorm(config.d_model, eps=config.layer_norm_eps) if config.norm_first else None
        )

    def forward(
        self, x: Tensor, src_mask: Tensor | None = None, need_weights: bool = False
    ) -> tuple[Tensor, list[Tensor]]:
        """x (B, S, D) -> ``(memory (B, S, D), weights)``: one (B, H, S, S) per layer, empty
        unless ``need_weights``."""
        all_weights = []
        for layer in self.layers:
            x, weights = layer(x, src_mask, need_weights)  # (B, S, D)
            if need_weights:
                all_weights.append(weights)
        if self.norm is not None:
            x = self.norm(x)
        return x, all_weights


class Decoder(nn.Module):
    """Sec. 3.1: a stack of N identical (not weight-sharing) decoder layers, each attending to
    the same encoder output. Ends with a LayerNorm when ``config.norm_first``."""

    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.layers = nn.ModuleList(
            DecoderLayer(**_layer_kwargs(config)) for _ in range(config.num_layers)
        )
        self.norm = (
            nn.LayerNorm(config.d_model, eps=config.layer_norm_eps) if config.norm_first else None
        )

    def forward(
        self,
        x: Tensor,
        memory: Tensor | None,
        src_mask: Tensor | None = None,
        tgt_mask: Tensor | None = None,
        need_weights: bool = False,
        caches: list[tuple[KVCache, KVCache]] | None = None,
    ) -> tuple[Tensor, list[Tensor], list[Tensor]]:
        """Arguments as :meth:`DecoderLayer.forward`; ``caches``: one (self, cross) pair of
        :class:`KVCache` per layer. Returns ``(x (B, T, D), self_weights, cross_weights)``, lists
        of (B, H, T, T_total) and (B, H, T, S), one per layer, empty unless ``need_weights``.
        """
        if caches is not None and len(caches) != len(self.layers):
            raise ValueError(
                f"need one cache pair per layer ({len(self.layers)}), got {len(caches)}"
            )
        self_weights, cross_weights = [], []
        for i, layer in enumerate(self.layers):
            self_cache, cross_cache = caches[i] if caches is not None else (None, None)
            x, sw, cw = layer(x, memory, src_mask, tgt_mask, need_weights, self_cache, cross_cache)
            if need_weights:
                self_weights.append(sw)
                cross_weights.append(cw)
        if self.norm is not None:
            x = self.norm(x)
        return x, self_weights, cross_weights
