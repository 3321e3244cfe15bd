"""Sec. 1 and Table 2: the recurrent translator the Transformer is measured against.

:class:`RecurrentTranslator` is a recurrent design of the paper's time, grown from chapter 1's
pieces and sized for Multi30k; chapter 9 builds it and gives the source of each choice. It has
the Transformer's interface, so the book's training step, loss, checkpoints, command line,
greedy decoding and beam search (:mod:`transformer_book.decode`) serve it unchanged:

- ``forward(src, tgt_in) -> logits (B, T, V)``;
- ``encode(src) -> (memory, src_mask)``, ``src_mask`` the book's (B, 1, 1, S), True = real token;
- ``decode(tgt, memory, src_mask, cache=None) -> logits (B, T, V)``: with a :class:`RecurrentCache`
  from ``new_cache()``, only the new tokens, as the Transformer's key/value cache does.

The design: a bidirectional LSTM encoder (Bahdanau et al. 2015); an LSTM decoder with global
attention and input feeding (Luong et al. 2015; ``input_feeding=False`` runs the whole target
through the LSTM in one call), additive scores by default; a first decoder state
tanh(W_s [->h_S; <-h_1]) per layer; one embedding matrix for source, target and output layer;
dropout on the non-recurrent connections only (Zaremba et al. 2014); parameters uniform in
[-0.1, 0.1] (Luong et al., Sec. 4.1).

Sources must be right-padded, as the book's batches are: they are packed, so each direction
reads only the real tokens, and attention gives padded positions no weight. Targets need no
mask: the decoder reads left to right.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from transformer_book.batching import check_tokens
from transformer_book.config import RecurrentConfig
from transformer_book.masks import padding_mask
from transformer_book.rnn import AdditiveAttention

__all__ = ["GlobalAttention", "RecurrentCache", "RecurrentTranslator"]


@dataclass
class RecurrentCache:
    """What incremental decoding carries between steps: the LSTM state, the last attentional
    vector (input feeding) and the encoder states' attention keys. Create one with
    :meth:`RecurrentTranslator.new_cache` and pass it to every :meth:`RecurrentTranslator.decode`
    call of one decoding run; it is updated in place.
    """

    state: tuple[Tensor, Tensor] | None = None  # the LSTM's (h, c), each (L, B, H)
    feed: Tensor | None = None  # (B, D): h~ of the last step (input feeding), else None
    keys: Tensor | None = None  # (B, S, H): the encoder states' projection for the scores
    steps: int = 0  # target positions already decoded

    def __len__(self) -> int:
        """Number of target positions already decoded."""
        return self.steps

    def reorder(self, index: Tensor) -> None:
        """Keep batch rows ``index`` (in that order), e.g. the beams beam search chose."""
        if self.state is not None:
            self.state = tuple(s.index_select(1, index) for s in self.state)  # (L, B', H)
        if self.feed is not None:
            self.feed = self.feed.index_select(0, index)  # (B', D)
        if self.keys is not None:
            self.keys = self.keys.index_select(0, index)  # (B', S, H)


class GlobalAttention(nn.Module):
    """Luong et al. (2015), Sec. 3.1: global attention of decoder states over all encoder states.

    score(h_t, h_s) = v^T tanh(W_q h_t + W_k h_s + b) (``"additive"``, chapter 1's
    :class:`~transformer_book.rnn.AdditiveAttention`), or h_t^T W_a h_s (``"general"``). The
    source's part (W_k h_s + b, or W_a h_s) is computed once per sentence by :meth:`keys`.
    Padded source positions get no weight; a row with no real position at all (never in the
    book's batches) would spread its weight evenly.

    Args:
        size: width of the decoder and encoder states (``hidden_size``).
        score: ``"additive"`` or ``"general"``.
    """

    def __init__(self, size: int, score: str = "additive"):
        super().__init__()
        if score not in ("additive", "general"):
            raise ValueError(f"score must be 'additive' or 'general', got {score!r}")
        self.kind = score
        if score == "additive":
            self.additive = AdditiveAttention(size, size, size)
        else:
            self.general = nn.Linear(size, size, bias=False)  # W_a

    def keys(self, memory: Tensor) -> Tensor:
        """The encoder states' part of the score, once per source. Shape: (B, S, H) -> (B, S, H)."""
        return (self.additive.key_proj if self.kind == "additive" else self.general)(memory)

    def forward(self, query: Tensor, keys: Tensor, memory: Tensor,
                src_mask: Tensor) -> tuple[Tensor, Tensor]:
        """Context vectors c_t (the weighted average of the encoder states) and the weights.

        Shape:
            query (B, T, H), keys (B, S, H), memory (B, S, H), src_mask (B, 1, 1, S)
            -> context (B, T, H), weights (B, T, S)
        """
        if self.kind == "additive":
            q = self.additive.query_proj(query)  # (B, T, H)
            hidden = torch.tanh(q[:, :, None] + keys[:, None])  # (B, T, S, H)
            scores = self.additive.score(hidden).squeeze(-1)  # (B, T, S)
        else:
            scores = query @ keys.transpose(1, 2)  # (B, T, S)
        real = src_mask[:, 0]  # (B, 1, S): broadcasts over the T queries
        scores = scores.float().masked_fill(~real, torch.finfo(torch.float32).min)  # (B, T, S)
        weights = torch.softmax(scores, dim=-1).to(memory.dtype)  # (B, T, S)
        return weights @ memory, weights  # (B, T, H), (B, T, S)


class RecurrentTranslator(nn.Module):
    """A bidirectional LSTM encoder and an LSTM decoder with global attention and input feeding
    (Luong et al. 2015), with the Transformer's interface (module docstring; chapter 9).

    Args:
        config: the hyperparameters (:class:`~transformer_book.config.RecurrentConfig`).
    """

    def __init__(self, config: RecurrentConfig):
        super().__init__()
        if not isinstance(config, RecurrentConfig):
            raise TypeError(f"config must be a RecurrentConfig, got {type(config).__name__}")
        self.config = config
        D, H, L = config.d_model, config.hidden_size, config.num_layers
        between = config.dropout if L > 1 else 0.0  # nn.LSTM drops out between its layers only
        self.src_embed = nn.Embedding(config.src_vocab_size, D)
        self.tgt_embed = (
            self.src_embed if config.share_embeddings else nn.Embedding(config.tgt_vocab_size, D)
        )
        self.dropout = nn.Dropout(config.dropout)
        self.encoder = nn.LSTM(D, H // 2, L, batch_first=True, bidirectional=True,
                               dropout=between)
        self.bridge = nn.Linear(H, L * H)  # W_s: the decoder's first state, one per layer
        self.decoder = nn.LSTM(2 * D if config.input_feeding else D, H, L, batch_first=True,
                               dropout=between)
        self.attention = GlobalAttention(H, config.attention)
        self.combine = nn.Linear(2 * H, D)  # W_c of h~_t = tanh(W_c [c_t; h_t]), Luong Eq. (5)
        self.generator = nn.Linear(D, config.tgt_vocab_size, bias=False)  # pre-softmax linear
        for p in self.parameters():
            nn.init.uniform_(p, -0.1, 0.1)  # Luong et al., Sec. 4.1
        if config.tie_output:
            self.generator.weight = self.tgt_embed.weight  # (V_tgt, D), one tensor
        self.check_token_ids = True  # as Transformer.check_token_ids

    def _check_tokens(self, tokens: Tensor, name: str, vocab_size: int, offset: int = 0) -> None:
        check_tokens(tokens, name, vocab_size, max_len=self.config.max_len, offset=offset,
                     check_ids=self.check_token_ids,
                     max_len_is="the longest sequence this config accepts")

    def num_parameters(self, trainable_only: bool = False) -> int:
        """Number of parameters, each shared (tied) tensor counted once."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad or not trainable_only)

    def encode(self, src: Tensor) -> tuple[Tensor, Tensor]:
        """Bahdanau et al. (2015), Sec. 3.2: the annotations h_j = [->h_j; <-h_j] of every word.

        Args:
            src: source token ids, right-padded with ``config.pad_id``.

        Returns:
            ``(memory, src_mask)``: the annotations (zeros at padded positions) and the source
            padding mask, to pass to :meth:`decode`.

        Shape:
            src (B, S) -> memory (B, S, hidden_size), src_mask (B, 1, 1, S)
        """
        self._check_tokens(src, "src", self.config.src_vocab_size)
        src_mask = padding_mask(src, self.config.pad_id)  # (B, 1, 1, S)
        real = src_mask[:, 0, 0]  # (B, S)
        lengths = real.sum(dim=1)  # (B,)
        S = src.shape[1]
        if not torch.equal(real, torch.arange(S, device=src.device) < lengths[:, None]):
            raise ValueError("src must be right-padded: padding only after each sentence's last "
                             "real token, as the book's batches are")
        x = self.dropout(self.src_embed(src))  # (B, S, D)
        # packed: each direction reads only the real tokens, the backward one starting at the last
        packed = pack_padded_sequence(x, lengths.clamp(min=1).cpu(), batch_first=True,
                                      enforce_sorted=False)
        memory, _ = pad_packed_sequence(self.encoder(packed)[0], batch_first=True,
                                        total_length=S)  # (B, S, H), zeros at padding
        return memory, src_mask

    def _start(self, cache: RecurrentCache, memory: Tensor, src_mask: Tensor,
               dtype: torch.dtype) -> None:
        """Fill an empty cache: the first decoder state tanh(W_s [->h_S; <-h_1]), zero cells, a
        zero h~ to feed, the attention keys. The state takes the embeddings' ``dtype`` (under
        autocast, W_s's output may be bf16)."""
        B, _, H = memory.shape
        half, L = H // 2, self.config.num_layers
        last = (src_mask[:, 0, 0].sum(dim=1) - 1).clamp(min=0)  # (B,): the last real token
        forward_last = memory[torch.arange(B, device=memory.device), last, :half]  # (B, H/2)
        backward_first = memory[:, 0, half:]  # (B, H/2): has read the whole sentence
        h = torch.tanh(self.bridge(torch.cat([forward_last, backward_first], dim=-1)))  # (B, L*H)
        h = h.view(B, L, H).transpose(0, 1).contiguous().to(dtype)  # (L, B, H)
        cache.state = (h, torch.zeros_like(h))
        cache.keys = self.attention.keys(memory)  # (B, S, H)
        if self.config.input_feeding:
            cache.feed = h.new_zeros(B, self.config.d_model)  # (B, D)

    def _attend(self, h: Tensor, cache: RecurrentCache, memory: Tensor,
                src_mask: Tensor) -> tuple[Tensor, Tensor]:
        context, weights = self.attention(h, cache.keys, memory, src_mask)  # (B,T,H), (B,T,S)
        attentional = torch.tanh(self.combine(torch.cat([context, h], dim=-1)))  # (B, T, D)
        return self.dropout(attentional), weights

    def _decode(self, tgt: Tensor, memory: Tensor, src_mask: Tensor | None,
                cache: RecurrentCache | None) -> tuple[Tensor, Tensor]:
        if cache is not None and not isinstance(cache, RecurrentCache):
            raise ValueError(f"cache must be a RecurrentCache from model.new_cache(), got "
                             f"{type(cache).__name__}")
        past = 0 if cache is None else len(cache)
        self._check_tokens(tgt, "tgt", self.config.tgt_vocab_size, offset=past)
        B, T = tgt.shape
        H = self.config.hidden_size
        if (not isinstance(memory, Tensor) or memory.dim() != 3 or memory.shape[0] != B
                or memory.shape[2] != H):
            shape = tuple(memory.shape) if isinstance(memory, Tensor) else type(memory).__name__
            raise ValueError(f"memory must have shape (B={B}, S, hidden_size={H}), got {shape}")
        S = memory.shape[1]
        if src_mask is None:  # every source position is real
            src_mask = torch.ones(B, 1, 1, S, dtype=torch.bool, device=memory.device)
        if (not isinstance(src_mask, Tensor) or src_mask.dtype != torch.bool
                or tuple(src_mask.shape) != (B, 1, 1, S)):
            raise ValueError(f"src_mask must be a bool tensor of shape (B={B}, 1, 1, S={S}), "
                             "as encode() returns it")
        x = self.dropout(self.tgt_embed(tgt))  # (B, T, D)
        run = RecurrentCache() if cache is None else cache
        if run.state is None:
            self._start(run, memory, src_mask, x.dtype)
        elif run.keys.shape[0] != B:
            raise ValueError(f"cache has batch size {run.keys.shape[0]} but tgt has {B}")
        if self.config.input_feeding:  # step t reads h~_{t-1}: one step at a time (Sec. 3.3)
            outs, weights = [], []
            for t in range(T):
                feed = run.feed[:, None].to(x.dtype)  # (B, 1, D): h~_{t-1}
                step = torch.cat([x[:, t : t + 1], feed], dim=-1)  # (B, 1, 2D)
                h, run.state = self.decoder(step, run.state)  # (B, 1, H)
                out, w = self._attend(h, run, memory, src_mask)  # (B, 1, D), (B, 1, S)
                run.feed = out[:, 0]  # (B, D)
                outs.append(out)
                weights.append(w)
            out, w = torch.cat(outs, dim=1), torch.cat(weights, dim=1)  # (B, T, D), (B, T, S)
        else:  # the whole target through the LSTM in one call, then attention at every step
            h, run.state = self.decoder(x, run.state)  # (B, T, H)
            out, w = self._attend(h, run, memory, src_mask)  # (B, T, D), (B, T, S)
        run.steps = past + T
        return self.generator(out), w  # logits (B, T, V_tgt), weights (B, T, S)

    def decode(self, tgt: Tensor, memory: Tensor, src_mask: Tensor | None,
               cache: RecurrentCache | None = None) -> Tensor:
        """Run the decoder over target positions, attending to the encoder's annotations.

        As :meth:`Transformer.decode <transformer_book.model.Transformer.decode>`: with a cache
        (from :meth:`new_cache`), ``tgt`` holds only the positions it has not seen yet. Both ways
        give the same logits for the same positions (up to floating-point rounding).

        Args:
            tgt: target token ids.
            memory: the annotations from :meth:`encode`.
            src_mask: the source padding mask from :meth:`encode` (None: no padding).
            cache: optional :class:`RecurrentCache`, updated in place.

        Returns:
            Logits over the target vocabulary (no softmax).

        Shape:
            tgt (B, T), memory (B, S, H), src_mask (B, 1, 1, S) -> logits (B, T, tgt_vocab_size)
        """
        return self._decode(tgt, memory, src_mask, cache)[0]

    def forward(self, src: Tensor, tgt: Tensor, need_weights: bool = False
                ) -> Tensor | tuple[Tensor, dict[str, list[Tensor]]]:
        """Logits for every target position, given the source and the shifted target.

        Args:
            src: source token ids, right-padded with ``pad_id``.
            tgt: decoder input (BOS + target without its last token), padded with ``pad_id``.
            need_weights: also return the attention weights, in the Transformer's format.

        Returns:
            ``logits``, or ``(logits, weights)`` when ``need_weights``, where ``weights`` is
            ``{"encoder": [], "decoder_self": [], "decoder_cross": [(B, 1, T, S)]}``: one
            "layer" with one "head", the single alignment of each target position.

        Shape:
            src (B, S), tgt (B, T) -> logits (B, T, tgt_vocab_size)
        """
        memory, src_mask = self.encode(src)  # (B, S, H), (B, 1, 1, S)
        if isinstance(tgt, Tensor) and tgt.dim() == 2 and tgt.shape[0] != src.shape[0]:
            raise ValueError(f"src and tgt batch sizes differ: {src.shape[0]} and {tgt.shape[0]}")
        logits, weights = self._decode(tgt, memory, src_mask, None)  # (B, T, V), (B, T, S)
        if need_weights:
            return logits, {"encoder": [], "decoder_self": [], "decoder_cross": [weights[:, None]]}
        return logits

    def new_cache(self) -> RecurrentCache:
        """An empty :class:`RecurrentCache` for incremental decoding with :meth:`decode`."""
        return RecurrentCache()
