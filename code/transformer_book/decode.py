"""Sec. 3.1 and 6.1: auto-regressive decoding, greedy and beam search, for any model with the
interface of :class:`EncoderDecoder`. With ``use_cache=True`` each step runs the decoder on the
newest token only (the model's cache keeps the rest): the same result as re-running the whole
prefix, only faster.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch
import torch.nn.functional as F
from torch import Tensor


class EncoderDecoder(Protocol):
    """What decoding needs of a model (the Transformer and the recurrent translator have it).
    ``new_cache()`` is optional; its cache has ``reorder(index)`` (keep those batch rows, for
    beam search) and ``len()``.
    """

    config: Any  # with pad_id, tgt_vocab_size and max_len
    training: bool

    def encode(self, src: Tensor) -> tuple[Tensor, Tensor]: ...  # memory, src_mask (B,1,1,S)

    def decode(self, tgt: Tensor, memory: Tensor, src_mask: Tensor | None,
               cache: Any = None) -> Tensor: ...  # logits (B, T, V)


def _check_args(
    model: EncoderDecoder, src: Tensor, bos_id: int, eos_id: int, max_new_tokens: int | None
) -> None:
    if not all(hasattr(model, name) for name in ("encode", "decode", "config")):
        raise TypeError(
            f"model must be an encoder-decoder with encode(src), decode(tgt, memory, src_mask, "
            f"cache) and a config (like transformer_book's Transformer), got "
            f"{type(model).__name__}"
        )
    vocab = model.config.tgt_vocab_size
    for name, value in (("bos_id", bos_id), ("eos_id", eos_id)):
        if not isinstance(value, int) or not 0 <= value < vocab:
            raise ValueError(f"{name} must be an int in [0, {vocab}), got {value!r}")
    if max_new_tokens is not None and (not isinstance(max_new_tokens, int) or max_new_tokens < 1):
        raise ValueError(f"max_new_tokens must be a positive int or None, got {max_new_tokens!r}")


def _cache_choice(model, use_cache: bool | None) -> bool:
    """``use_cache``, or (None) whether the model keeps a key/value cache."""
    keeps = hasattr(model, "new_cache")
    if use_cache and not keeps:
        raise ValueError(f"{type(model).__name__} keeps no cache (no new_cache()): decode with "
                         "use_cache=False")
    return keeps if use_cache is None else use_cache


def _length_limits(model: EncoderDecoder, src: Tensor, max_new_tokens: int | None) -> list[int]:
    """New tokens allowed per sentence: ``max_new_tokens``, or the paper's source length + 50
    (Sec. 6.1, counting real source tokens); never past ``config.max_len`` (the Transformer's
    positional table; BOS takes one)."""
    cap = model.config.max_len - 1
    if cap < 1:
        raise ValueError("max_len must be at least 2 to decode (BOS plus one token)")
    if max_new_tokens is not None:
        return [min(max_new_tokens, cap)] * src.shape[0]
    src_lengths = (src != model.config.pad_id).sum(dim=1)  # (B,)
    return [min(int(n) + 50, cap) for n in src_lengths]


def greedy_decode(
    model: EncoderDecoder,
    src: Tensor,
    bos_id: int,
    eos_id: int,
    max_new_tokens: int | None = None,
    use_cache: bool | None = None,
) -> Tensor:
    """Sec. 3.1: greedy auto-regressive decoding, the most probable token at every step.

    Runs in eval mode without gradients (the model's mode is restored afterwards). Stops when
    every sentence has emitted ``eos_id`` or reached its length limit.

    Args:
        model: the Transformer, or any :class:`EncoderDecoder`.
        src: source token ids padded with ``model.config.pad_id``.
        bos_id: the token the decoder starts from.
        eos_id: the token that ends a sentence.
        max_new_tokens: most tokens to generate after BOS; default the source length + 50 per
            sentence (Sec. 6.1), capped by ``max_len - 1``.
        use_cache: reuse keys/values of earlier steps (same result, faster); None (default):
            when the model keeps a cache (has ``new_cache``, as the book's Transformer does).

    Returns:
        Token ids starting with ``bos_id``; after a sentence's ``eos_id`` its row holds ``pad_id``.

    Shape:
        src (B, S) -> (B, 1 + number of steps run)
    """
    _check_args(model, src, bos_id, eos_id, max_new_tokens)
    use_cache = _cache_choice(model, use_cache)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            memory, src_mask = model.encode(src)  # (B, S, D), (B, 1, 1, S)
            B = src.shape[0]
            limits = torch.tensor(_length_limits(model, src, max_new_tokens),
                                  device=src.device)  # (B,)
            tokens = torch.full((B, 1), bos_id, dtype=torch.long, device=src.device)  # (B, 1)
            finished = torch.zeros(B, dtype=torch.bool, device=src.device)  # (B,)
            cache = model.new_cache() if use_cache else None
            for step in range(int(limits.max())):
                step_input = tokens[:, -1:] if use_cache else tokens  # (B, 1) or (B, t)
                logits = model.decode(step_input, memory, src_mask, cache)[:, -1]  # (B, V)
                next_token = logits.argmax(dim=-1)  # (B,)
                next_token = next_token.masked_fill(finished, model.config.pad_id)  # (B,)
                tokens = torch.cat([tokens, next_token[:, None]], dim=1)  # (B, t + 1)
                finished |= (next_token == eos_id) | (limits <= step + 1)
                if bool(finished.all()):
                    break
    finally:
        model.train(was_training)
    return tokens


def length_penalty_gnmt(length: int, alpha: float) -> float:
    """Wu et al. (2016), GNMT: lp(Y) = ((5 + |Y|) / 6)^alpha; alpha = 0.6 in Sec. 6.1."""
    return ((5.0 + length) / 6.0) ** alpha


def beam_search(
    model: EncoderDecoder,
    src: Tensor,
    bos_id: int,
    eos_id: int,
    beam_size: int = 4,
    length_penalty: float = 0.6,
    max_new_tokens: int | None = None,
    use_cache: bool | None = None,
) -> list[list[int]]:
    """Sec. 6.1: beam search with beam size 4 and length penalty alpha = 0.6.

    Keeps the ``beam_size`` best partial translations of each sentence (by total log-probability)
    and ranks finished ones by log-probability / :func:`length_penalty_gnmt`. A hypothesis ends
    at EOS (only an EOS within the top ``beam_size`` candidates counts, so ``beam_size=1`` with
    ``length_penalty=0`` is exactly greedy decoding) or at the length limit. A sentence is done
    when it has ``beam_size`` finished hypotheses and no live beam can still beat the worst.

    Args:
        model: the Transformer, or any :class:`EncoderDecoder`.
        src: source token ids padded with ``model.config.pad_id``; sentences are decoded
            together, each with its own beams.
        bos_id, eos_id: start and end tokens.
        beam_size: beams per sentence (4 in the paper).
        length_penalty: alpha (0.6 in the paper; 0 ranks by raw log-probability).
        max_new_tokens: as in :func:`greedy_decode`.
        use_cache: reuse keys/values between steps; None (default): when the model keeps a
            cache, as in :func:`greedy_decode`.

    Returns:
        For each sentence, the best hypothesis as a list of ids: ``bos_id``, the generated
        tokens, and ``eos_id`` if it finished before the length limit.

    Shape:
        src (B, S) -> B lists
    """
    _check_args(model, src, bos_id, eos_id, max_new_tokens)
    if not isinstance(beam_size, int) or beam_size < 1:
        raise ValueError(f"beam_size must be a positive int, got {beam_size!r}")
    if length_penalty < 0:
        raise ValueError(f"length_penalty (alpha) must be >= 0, got {length_penalty}")
    use_cache = _cache_choice(model, use_cache)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            return _beam_search(model, src, bos_id, eos_id, beam_size, length_penalty,
                                max_new_tokens, use_cache)
    finally:
        model.train(was_training)


def _beam_search(model: EncoderDecoder, src: Tensor, bos_id: int, eos_id: int, K: int,
                 alpha: float, max_new_tokens: int | None, use_cache: bool) -> list[list[int]]:
    device = src.device
    B = src.shape[0]
    V = model.config.tgt_vocab_size
    limits = _length_limits(model, src, max_new_tokens)
    memory, src_mask = model.encode(src)  # (B, S, D), (B, 1, 1, S)
    memory = memory.repeat_interleave(K, dim=0)  # (B*K, S, D): K beams per sentence, side by side
    src_mask = src_mask.repeat_interleave(K, dim=0)  # (B*K, 1, 1, S)
    tokens = torch.full((B * K, 1), bos_id, dtype=torch.long, device=device)  # (B*K, 1)
    scores = torch.zeros(B, K, device=device)  # (B, K): log-probability of each beam
    scores[:, 1:] = float("-inf")  # at first all beams are the same BOS: keep only one live
    finished: list[list[tuple[float, list[int]]]] = [[] for _ in range(B)]  # (score, ids)
    done = [False] * B
    cache = model.new_cache() if use_cache else None

    for step in range(max(limits)):
        length = step + 1  # generated tokens once this step's token is appended
        step_input = tokens[:, -1:] if use_cache else tokens  # (B*K, 1) or (B*K, t)
        logits = model.decode(step_input, memory, src_mask, cache)[:, -1]  # (B*K, V)
        log_probs = F.log_softmax(logits.float(), dim=-1)  # (B*K, V)
        total = (scores.view(B * K, 1) + log_probs).view(B, K * V)  # (B, K*V): every extension
        # 2K candidates: even if K of them end with EOS, K live ones remain.
        top_scores, top_index = total.topk(min(2 * K, K * V), dim=1)  # (B, 2K)
        top_beam, top_token = (top_index // V).tolist(), (top_index % V).tolist()
        top_scores = top_scores.tolist()

        rows, next_tokens, next_scores = [], [], []  # the K beams kept for each sentence
        for b in range(B):
            if done[b]:  # keep the rows in place, feed padding, ignore them
                rows += [b * K + i for i in range(K)]
                next_tokens += [model.config.pad_id] * K
                next_scores += [float("-inf")] * K
                continue
            live = []
            candidates = zip(top_scores[b], top_beam[b], top_token[b], strict=True)
            for rank, (s, beam, tok) in enumerate(candidates):
                if tok == eos_id:
                    if rank < K and s > float("-inf"):  # an EOS in the top K ends a hypothesis
                        ids = tokens[b * K + beam].tolist() + [eos_id]
                        finished[b].append((s / length_penalty_gnmt(length, alpha), ids))
                elif len(live) < K:
                    live.append((s, beam, tok))
            if length >= limits[b]:  # out of length: live beams end here, unfinished
                for s, beam, tok in live:
                    if s > float("-inf"):
                        ids = tokens[b * K + beam].tolist() + [tok]
                        finished[b].append((s / length_penalty_gnmt(length, alpha), ids))
                done[b] = True
            elif len(finished[b]) >= K:
                worst_kept = sorted((f[0] for f in finished[b]), reverse=True)[K - 1]
                best_possible = live[0][0] / length_penalty_gnmt(limits[b], alpha)
                done[b] = best_possible <= worst_kept
            rows += [b * K + beam for _, beam, _ in live]
            next_tokens += [tok for _, _, tok in live]
            next_scores += [s for s, _, _ in live]
        if all(done):
            break
        index = torch.tensor(rows, device=device)  # (B*K,): the row each kept beam extends
        new = torch.tensor(next_tokens, device=device)[:, None]  # (B*K, 1)
        tokens = torch.cat([tokens[index], new], dim=1)  # (B*K, t+1)
        scores = torch.tensor(next_scores, device=device).view(B, K)  # (B, K)
        if cache is not None:
            cache.reorder(index)

    return [max(hyps, key=lambda h: h[0])[1] for hyps in finished]


def to_lists(tokens: Tensor, eos_id: int, pad_id: int | None = None) -> list[list[int]]:
    """Rows of :func:`greedy_decode`'s output as lists, each cut after its first ``eos_id``
    (rows without one lose their trailing ``pad_id`` tokens, if ``pad_id`` is given), so they
    compare directly with :func:`beam_search`'s output.

    Shape:
        tokens (B, T) -> B lists
    """
    out = []
    for row in tokens.tolist():
        if eos_id in row:
            row = row[: row.index(eos_id) + 1]
        elif pad_id is not None:
            while row and row[-1] == pad_id:
                row.pop()
        out.append(row)
    return out
