"""Recurrent networks, the baseline the Transformer replaces (Sec. 1 and 4 of the paper), as
chapter 1 builds them: :class:`ElmanRNN` (Elman 1990), :class:`AdditiveAttention` (Bahdanau et
al. 2015) and :class:`Seq2Seq`, a GRU encoder-decoder with or without it. The toy copy task and
its training loop are re-exported from :mod:`transformer_book.copy_task`.

Shapes are batch first: ``B`` batch, ``L`` target length, ``S`` source length.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from transformer_book.copy_task import copy_task_batch, token_accuracy, train_seq2seq

__all__ = [
    "AdditiveAttention",
    "ElmanRNN",
    "Seq2Seq",
    "copy_task_batch",
    "token_accuracy",
    "train_seq2seq",
]

_NONLINEARITIES = {"tanh": torch.tanh, "identity": lambda z: z}


class ElmanRNN(nn.Module):
    """Elman's simple recurrent network, named after its equations (Sec. 1 of the paper).

    ``h_t = f(x_t U + h_{t-1} W + b)`` and ``o_t = h_t V``, one step after the other. With
    ``nonlinearity="tanh"`` (the default) this is exactly ``nn.RNN(nonlinearity="tanh")``
    followed by a linear read-out without bias.

    Args:
        input_size: size of each input vector ``x_t``.
        hidden_size: size of the hidden state ``h_t``.
        output_size: size of each output ``o_t``.
        nonlinearity: ``"tanh"`` (as ``nn.RNN``) or ``"identity"`` (the linear form).

    Attributes:
        U: input-to-hidden weights, shape ``(input_size, hidden_size)``.
        W: hidden-to-hidden weights, shape ``(hidden_size, hidden_size)``.
        b: hidden bias, shape ``(hidden_size,)``.
        V: hidden-to-output weights, shape ``(hidden_size, output_size)``.
    """

    def __init__(
        self, input_size: int, hidden_size: int, output_size: int, nonlinearity: str = "tanh"
    ) -> None:
        super().__init__()
        for name, value in [("input_size", input_size), ("hidden_size", hidden_size),
                            ("output_size", output_size)]:
            if value < 1:
                raise ValueError(f"{name} must be positive, got {value}")
        if nonlinearity not in _NONLINEARITIES:
            raise ValueError(
                f"nonlinearity must be one of {sorted(_NONLINEARITIES)}, got {nonlinearity!r}"
            )
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.output_size = output_size
        self.nonlinearity = nonlinearity
        # The weights multiply from the right (x_t U), as in the equations; nn.RNN stores the
        # transposes (weight_ih_l0 = U.T, weight_hh_l0 = W.T).
        self.U = nn.Parameter(torch.empty(input_size, hidden_size))
        self.W = nn.Parameter(torch.empty(hidden_size, hidden_size))
        self.b = nn.Parameter(torch.empty(hidden_size))
        self.V = nn.Parameter(torch.empty(hidden_size, output_size))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Uniform in ``[-1/sqrt(hidden_size), 1/sqrt(hidden_size)]``, as ``nn.RNN`` does."""
        bound = 1.0 / math.sqrt(self.hidden_size)
        for p in self.parameters():
            nn.init.uniform_(p, -bound, bound)

    def hidden_states(self, x: torch.Tensor, h0: torch.Tensor | None = None) -> torch.Tensor:
        """The recurrence alone, ``h_t = f(x_t U + h_{t-1} W + b)``, one step at a time: the
        "recurrent layer" of the paper's Table 1 (no read-out ``V``).

        Shape:
            x (B, L, input_size), h0 (B, hidden_size) or None (zeros) -> the hidden state after
            every step, (B, L, hidden_size).
        """
        if x.dim() != 3 or x.shape[-1] != self.input_size:
            raise ValueError(
                f"x must have shape (B, L, input_size={self.input_size}), got {tuple(x.shape)}"
            )
        if x.shape[1] == 0:
            raise ValueError("x is an empty sequence (L = 0)")
        B, L, _ = x.shape
        if h0 is None:
            h = x.new_zeros(B, self.hidden_size)
        elif h0.shape != (B, self.hidden_size):
            raise ValueError(
                f"h0 must have shape (B={B}, hidden_size={self.hidden_size}), got {tuple(h0.shape)}"
            )
        else:
            h = h0
        f = _NONLINEARITIES[self.nonlinearity]
        # x U for every step at once: it does not depend on h, so only h W is sequential.
        xu = x @ self.U + self.b  # (B, L, hidden)
        states = []
        for t in range(L):  # step t waits for step t-1: L sequential operations
            h = f(xu[:, t] + h @ self.W)  # (B, hidden)
            states.append(h)
        return torch.stack(states, dim=1)  # (B, L, hidden)

    def forward(
        self, x: torch.Tensor, h0: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`hidden_states` (same arguments), then ``o_t = h_t V``. Returns ``(o, h)`` of
        every step, (B, L, output_size) and (B, L, hidden_size)."""
        hs = self.hidden_states(x, h0)  # (B, L, hidden)
        return hs @ self.V, hs  # (B, L, output), (B, L, hidden)


class AdditiveAttention(nn.Module):
    """Additive ("Bahdanau") attention of an RNN decoder over encoder states.

    ``e_ij = v^T tanh(W_s s_i + W_h h_j + b)``, ``a_i = softmax_j(e_ij)``,
    ``c_i = sum_j a_ij h_j`` (Bahdanau et al., 2015, Sec. 3.1 and App. A.1.2; chapter 1). It
    scores whatever query states it is given (Bahdanau et al. the previous decoder state, without
    ``b``); ``b`` is ``key_proj``'s bias. No mask: the sources of a batch must share one length.

    Args:
        query_size: size of each decoder state ``s_i``.
        key_size: size of each encoder state ``h_j``.
        attn_size: size of the hidden layer of the scoring network.
    """

    def __init__(self, query_size: int, key_size: int, attn_size: int) -> None:
        super().__init__()
        self.query_proj = nn.Linear(query_size, attn_size, bias=False)  # W_s
        self.key_proj = nn.Linear(key_size, attn_size, bias=True)  # W_h (and a bias)
        self.score = nn.Linear(attn_size, 1, bias=False)  # v

    def forward(
        self, query: torch.Tensor, keys: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Weights of the decoder states ``query`` (B, L, query_size) over the encoder states
        ``keys`` (B, S, key_size, also the values), and the contexts they give.

        Returns ``(context (B, L, key_size), weights (B, L, S))``; each row of weights sums to 1.
        """
        if query.dim() != 3 or keys.dim() != 3 or query.shape[0] != keys.shape[0]:
            raise ValueError(
                f"query must be (B, L, query_size) and keys (B, S, key_size) with the same B, "
                f"got {tuple(query.shape)} and {tuple(keys.shape)}"
            )
        q = self.query_proj(query)[:, :, None]  # (B, L, 1, attn)
        k = self.key_proj(keys)[:, None]  # (B, 1, S, attn)
        scores = self.score(torch.tanh(q + k)).squeeze(-1)  # (B, L, S)
        weights = torch.softmax(scores.float(), dim=-1).to(keys.dtype)  # (B, L, S)
        return weights @ keys, weights  # (B, L, key_size), (B, L, S)


class Seq2Seq(nn.Module):
    """Chapter 1's toy GRU encoder-decoder, with or without attention (Sec. 1 and 2).

    The encoder's last state starts the decoder (Sutskever et al., 2014); with attention, each
    decoder state also reads an :class:`AdditiveAttention` context over all encoder states and
    predicts the next token from both. The context comes from the decoder's *current* state and
    is used at the output (Luong et al., 2015), so teacher-forced training runs the GRU over the
    whole target in one call. Fixed-length tasks only (no padding, no mask); the book's
    translator is :class:`transformer_book.recurrent.RecurrentTranslator`.

    Args:
        vocab_size: number of token ids (source and target share them).
        embed_size: size of the token embeddings.
        hidden_size: size of the encoder and decoder GRU states.
        attention: whether the decoder attends over the encoder states.
    """

    def __init__(
        self, vocab_size: int, embed_size: int, hidden_size: int, attention: bool = False
    ) -> None:
        super().__init__()
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.embed = nn.Embedding(vocab_size, embed_size)
        self.encoder = nn.GRU(embed_size, hidden_size, batch_first=True)
        self.decoder = nn.GRU(embed_size, hidden_size, batch_first=True)
        self.attention = (
            AdditiveAttention(hidden_size, hidden_size, hidden_size) if attention else None
        )
        self.generator = nn.Linear(hidden_size * (2 if attention else 1), vocab_size)

    def _check_tokens(self, name: str, tokens: torch.Tensor) -> None:
        if tokens.dim() != 2 or tokens.dtype != torch.long:
            raise ValueError(
                f"{name} must be a (B, length) tensor of torch.long token ids, "
                f"got shape {tuple(tokens.shape)} and dtype {tokens.dtype}"
            )
        if tokens.shape[1] == 0:
            raise ValueError(f"{name} is empty (length 0)")
        if tokens.min() < 0 or tokens.max() >= self.vocab_size:
            raise ValueError(f"{name} has token ids outside 0 .. {self.vocab_size - 1}")

    def encode(self, src: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """All encoder states, and the last one (the summary that starts the decoder):
        src (B, S) -> ``(states (B, S, hidden), last (1, B, hidden))``."""
        self._check_tokens("src", src)
        return self.encoder(self.embed(src))  # (B, S, hidden), (1, B, hidden)

    def decode(
        self, tgt_in: torch.Tensor, states: torch.Tensor, s0: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Logits for each next token given the decoder inputs and the encoder's output:
        tgt_in (B, L), states (B, S, hidden), s0 (1, B, hidden) -> ``(logits (B, L, vocab_size),
        s_last (1, B, hidden), weights (B, L, S))``; ``weights`` is None without attention.
        """
        s, s_last = self.decoder(self.embed(tgt_in), s0)  # (B, L, hidden), (1, B, hidden)
        if self.attention is None:
            return self.generator(s), s_last, None
        context, weights = self.attention(s, states)  # (B, L, hidden), (B, L, S)
        return self.generator(torch.cat([s, context], dim=-1)), s_last, weights

    def forward(
        self, src: torch.Tensor, tgt_in: torch.Tensor, return_weights: bool = False
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Teacher-forced logits for every target position.

        Args:
            src: source token ids (B, S).
            tgt_in: decoder inputs (B, L): BOS, then the target shifted right.
            return_weights: also return the attention weights (needs ``attention=True``).

        Returns:
            logits (B, L, vocab_size), or ``(logits, weights (B, L, S))``.
        """
        self._check_tokens("tgt_in", tgt_in)
        if tgt_in.shape[0] != src.shape[0]:
            raise ValueError(
                f"src and tgt_in batch sizes differ: {src.shape[0]} != {tgt_in.shape[0]}"
            )
        if return_weights and self.attention is None:
            raise ValueError("return_weights=True needs a model built with attention=True")
        states, last = self.encode(src)
        logits, _, weights = self.decode(tgt_in, states, last)
        return (logits, weights) if return_weights else logits

    @torch.no_grad()
    def greedy_decode(self, src: torch.Tensor, length: int, bos_id: int = 0) -> torch.Tensor:
        """Decode ``length`` tokens, one at a time, feeding back the most likely token:
        src (B, S) -> token ids (B, length)."""
        if length < 1:
            raise ValueError(f"length must be positive, got {length}")
        states, s = self.encode(src)
        token = torch.full((src.shape[0], 1), bos_id, dtype=torch.long, device=src.device)
        out = []
        for _ in range(length):
            logits, s, _ = self.decode(token, states, s)  # (B, 1, vocab)
            token = logits.argmax(dim=-1)  # (B, 1)
            out.append(token)
        return torch.cat(out, dim=1)  # (B, length)
