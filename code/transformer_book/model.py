"""Sec. 3, Figure 1: the encoder-decoder Transformer, assembled from the package's pieces.

The model returns logits; the softmax of Figure 1 lives in the loss (cross-entropy) and in
decoding (log-softmax), where it is numerically safer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from transformer_book.attention import KVCache
from transformer_book.batching import check_tokens
from transformer_book.config import RecurrentConfig, TransformerConfig
from transformer_book.layers import Decoder, Encoder
from transformer_book.masks import causal_mask, padding_mask
from transformer_book.positional import LearnedPositionalEmbedding, PositionalEncoding
from transformer_book.recurrent import RecurrentTranslator


@dataclass
class DecoderCache:
    """Everything incremental decoding reuses between steps. Create one with
    :meth:`Transformer.new_cache` and pass it to every :meth:`Transformer.decode` call of one
    decoding run; it is updated in place.
    """

    layers: list[tuple[KVCache, KVCache]]  # per decoder layer: (self-attention, cross-attention)
    tgt_keep: Tensor | None = field(default=None)  # (B, T_past) bool: True = not padding

    def __len__(self) -> int:
        """Number of target positions already decoded."""
        return 0 if self.tgt_keep is None else self.tgt_keep.shape[1]

    def reorder(self, index: Tensor) -> None:
        """Keep batch rows ``index`` (in that order), e.g. the beams beam search chose."""
        for self_cache, cross_cache in self.layers:
            self_cache.reorder(index)
            cross_cache.reorder(index)
        if self.tgt_keep is not None:
            self.tgt_keep = self.tgt_keep.index_select(0, index)  # (B', T_past)


class Transformer(nn.Module):
    """Sec. 3, Figure 1: the paper's encoder-decoder model ("EncoderDecoder").

    * Embeddings are multiplied by sqrt(d_model) (Sec. 3.4), then positions are added and
      dropout applied (Sec. 3.5, 5.4).
    * ``config.share_embeddings``: source and target share one embedding matrix; with
      ``config.tie_output`` the pre-softmax linear layer (``generator``, no bias) reuses the
      target embedding matrix (Sec. 3.4, after Press and Wolf 2017).
    * Weight matrices are initialised Xavier-uniform (the paper does not state its
      initialisation); biases and LayerNorm keep PyTorch's defaults. With
      ``config.embed_init="normal"`` the embeddings are drawn from N(0, d_model^-0.5) instead,
      as in the paper's code (tensor2tensor; chapters/lab_b_embedding_scale.ipynb).
    """

    def __init__(self, config: TransformerConfig):
        super().__init__()
        if not isinstance(config, TransformerConfig):
            raise TypeError(f"config must be a TransformerConfig, got {type(config).__name__}")
        self.config = config
        D = config.d_model
        self.src_embed = nn.Embedding(config.src_vocab_size, D)
        self.tgt_embed = (
            self.src_embed if config.share_embeddings else nn.Embedding(config.tgt_vocab_size, D)
        )
        positions = LearnedPositionalEmbedding if config.learned_positions else PositionalEncoding
        # One positional module for both sides (with learned_positions, one shared table).
        self.positional = positions(D, config.max_len, config.dropout)
        self.encoder = Encoder(config)
        self.decoder = Decoder(config)
        self.generator = nn.Linear(D, config.tgt_vocab_size, bias=False)  # pre-softmax linear
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)
        if config.embed_init == "normal":  # tensor2tensor: std d^-0.5, so x * sqrt(d) has RMS 1
            nn.init.normal_(self.src_embed.weight, 0.0, D**-0.5)
            if not config.share_embeddings:
                nn.init.normal_(self.tgt_embed.weight, 0.0, D**-0.5)
        if config.tie_output:
            self.generator.weight = self.tgt_embed.weight  # Sec. 3.4: (V_tgt, D), one tensor
        # Whether every forward checks that token ids lie inside the vocabulary. The check reads
        # the ids' min and max back to the host: on a GPU that waits for all queued work (a
        # host sync) and under torch.compile it splits the graph. A training loop whose data
        # pipeline validated the ids on the host before the transfer
        # (transformer_book.batching.check_token_ids) switches it off; torch.compile skips it.
        self.check_token_ids = True

    # ---- input checks -------------------------------------------------------------------

    def _check_tokens(self, tokens: Tensor, name: str, vocab_size: int, offset: int = 0) -> None:
        check_tokens(tokens, name, vocab_size, max_len=self.config.max_len, offset=offset,
                     check_ids=self.check_token_ids, max_len_is="the positional table")

    # ---- the two halves ------------------------------------------------------------------

    def _encode(self, src: Tensor, need_weights: bool) -> tuple[Tensor, Tensor, list[Tensor]]:
        self._check_tokens(src, "src", self.config.src_vocab_size)
        src_mask = padding_mask(src, self.config.pad_id)  # (B, 1, 1, S)
        x = self.src_embed(src) * math.sqrt(self.config.d_model)  # (B, S, D), Sec. 3.4
        x = self.positional(x)  # (B, S, D)
        memory, weights = self.encoder(x, src_mask, need_weights)  # (B, S, D)
        return memory, src_mask, weights

    def encode(self, src: Tensor) -> tuple[Tensor, Tensor]:
        """Sec. 3.1: run the encoder once over the source.

        Args:
            src: source token ids, padded with ``config.pad_id``.

        Returns:
            ``(memory, src_mask)``: the encoder output and the source padding mask to pass to
            :meth:`decode`.

        Shape:
            src (B, S) -> memory (B, S, D), src_mask (B, 1, 1, S)
        """
        memory, src_mask, _ = self._encode(src, need_weights=False)
        return memory, src_mask

    def _decode(
        self,
        tgt: Tensor,
        memory: Tensor,
        src_mask: Tensor | None,
        cache: DecoderCache | None,
        need_weights: bool,
    ) -> tuple[Tensor, list[Tensor], list[Tensor]]:
        past = 0 if cache is None else len(cache)
        self._check_tokens(tgt, "tgt", self.config.tgt_vocab_size, offset=past)
        B, T = tgt.shape
        if (
            not isinstance(memory, Tensor)
            or memory.dim() != 3
            or memory.shape[0] != B
            or memory.shape[2] != self.config.d_model
        ):
            shape = tuple(memory.shape) if isinstance(memory, Tensor) else type(memory).__name__
            raise ValueError(
                f"memory must have shape (B={B}, S, D={self.config.d_model}), got {shape}"
            )
        if cache is not None and len(cache.layers) != self.config.num_layers:
            raise ValueError("cache was made for another model; create it with model.new_cache()")
        keep = tgt != self.config.pad_id  # (B, T): real target tokens
        if cache is not None:
            if cache.tgt_keep is not None:
                if cache.tgt_keep.shape[0] != B:
                    raise ValueError(
                        f"cache has batch size {cache.tgt_keep.shape[0]} but tgt has {B}"
                    )
                keep = torch.cat([cache.tgt_keep, keep], dim=1)  # (B, past + T)
            cache.tgt_keep = keep
        # Position past + i may see keys 0 .. past + i that are not padding (Sec. 3.2.3).
        future = causal_mask(T, tgt.device, key_len=past + T)  # (T, past + T)
        tgt_mask = keep[:, None, None, :] & future  # (B, 1, T, past + T)
        x = self.tgt_embed(tgt) * math.sqrt(self.config.d_model)  # (B, T, D), Sec. 3.4
        x = self.positional(x, offset=past)  # (B, T, D)
        caches = cache.layers if cache is not None else None
        x, self_w, cross_w = self.decoder(x, memory, src_mask, tgt_mask, need_weights, caches)
        # x: (B, T, D)
        return self.generator(x), self_w, cross_w  # logits (B, T, V_tgt)

    def decode(
        self,
        tgt: Tensor,
        memory: Tensor,
        src_mask: Tensor | None,
        cache: DecoderCache | None = None,
    ) -> Tensor:
        """Sec. 3.1: run the decoder over target positions, attending to the encoder memory.

        Without a cache, ``tgt`` is the whole target prefix (starting with BOS). With a cache
        (from :meth:`new_cache`), ``tgt`` holds only the positions the cache has not seen yet
        (usually one token per step), and only their logits are returned. Both ways give the
        same logits for the same positions.

        Args:
            tgt: target token ids.
            memory: encoder output from :meth:`encode`.
            src_mask: source padding mask from :meth:`encode`.
            cache: optional :class:`DecoderCache`, updated in place.

        Returns:
            Logits over the target vocabulary (no softmax).

        Shape:
            tgt (B, T), memory (B, S, D), src_mask (B, 1, 1, S) -> logits (B, T, tgt_vocab_size)
        """
        logits, _, _ = self._decode(tgt, memory, src_mask, cache, need_weights=False)
        return logits

    def forward(
        self, src: Tensor, tgt: Tensor, need_weights: bool = False
    ) -> Tensor | tuple[Tensor, dict[str, list[Tensor]]]:
        """Figure 1: logits for every target position, given the source and the shifted target.

        Masks are built here from ``config.pad_id``: source padding for encoder self-attention
        and encoder-decoder attention; target padding & causal for decoder self-attention.

        Args:
            src: source token ids, padded with ``pad_id``.
            tgt: decoder input (BOS + target without its last token), padded with ``pad_id``.
            need_weights: also return every attention map, for visualisation.

        Returns:
            ``logits``, or ``(logits, weights)`` when ``need_weights``, where ``weights`` is
            ``{"encoder": [(B, H, S, S)] * N, "decoder_self": [(B, H, T, T)] * N,
            "decoder_cross": [(B, H, T, S)] * N}``.

        Shape:
            src (B, S), tgt (B, T) -> logits (B, T, tgt_vocab_size)
        """
        memory, src_mask, enc_w = self._encode(src, need_weights)  # (B, S, D), (B, 1, 1, S)
        if isinstance(tgt, Tensor) and tgt.dim() == 2 and tgt.shape[0] != src.shape[0]:
            raise ValueError(f"src and tgt batch sizes differ: {src.shape[0]} and {tgt.shape[0]}")
        logits, self_w, cross_w = self._decode(tgt, memory, src_mask, None, need_weights)
        # logits: (B, T, tgt_vocab_size)
        if need_weights:
            return logits, {"encoder": enc_w, "decoder_self": self_w, "decoder_cross": cross_w}
        return logits

    # ---- helpers -------------------------------------------------------------------------

    def new_cache(self) -> DecoderCache:
        """An empty :class:`DecoderCache` for incremental decoding with :meth:`decode`."""
        return DecoderCache(
            layers=[(KVCache(), KVCache(static=True)) for _ in range(self.config.num_layers)]
        )

    def num_parameters(self, trainable_only: bool = False) -> int:
        """Number of parameters, each shared (tied) tensor counted once (Table 3's "params")."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad or not trainable_only)


def build_model(config) -> nn.Module:
    """A new model for ``config``: a :class:`Transformer`, or for a ``RecurrentConfig`` a
    :class:`~transformer_book.recurrent.RecurrentTranslator`."""
    return RecurrentTranslator(config) if isinstance(config, RecurrentConfig) else Transformer(config)
