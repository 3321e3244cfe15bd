"""Evaluation (Sec. 6.1 of the paper): translating raw sentences (:func:`translate`), scoring
them with BLEU (:func:`corpus_bleu`); and the validation loss (:func:`mean_loss`)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch
from torch import Tensor, nn

from transformer_book.batching import Batch, BatchedCorpus, collate
from transformer_book.loss import label_smoothing_loss
from transformer_book.precision import autocast


@torch.no_grad()
def mean_loss(model: nn.Module, batches: Iterable[tuple[Batch, Batch]], *, pad_id: int | None,
              amp_dtype: torch.dtype | None = None, ranks=None) -> float:
    """Mean cross-entropy (no label smoothing, nats per target token) of ``model`` over
    ``(host batch, device batch)`` pairs (e.g. from :func:`~transformer_book.batching.device_batches`).

    The sum stays on the device (float64; float32 on MPS), the tokens are counted on the host:
    one read at the end. ``ranks``: a :class:`~transformer_book.distributed.Context` whose ranks
    each evaluated a share; every rank must call it, and all return the same number.
    """
    device = next(model.parameters()).device
    model.eval()
    wide = torch.float32 if device.type == "mps" else torch.float64
    total, count = torch.zeros((), dtype=wide, device=device), 0
    for host, batch in batches:
        with autocast(device.type, amp_dtype):
            logits = model(batch.src, batch.tgt_in)
        total += label_smoothing_loss(logits, batch.tgt_out, 0.0, pad_id, "sum").to(wide)
        count += host.num_tgt_tokens  # counted on the host copy: no sync
    if ranks is not None and ranks.enabled:
        total, count = ranks.sum(torch.stack([total, torch.tensor(
            float(count), dtype=wide, device=device)])).tolist()
    return float(total) / count


def source_token_limit(model: nn.Module, max_tokens: int) -> int:
    """The most subword tokens a source sentence may have: ``<eos>`` is appended, and the
    result must fit the positional table (``max_len``) and one batch (``max_tokens``)."""
    return min(model.config.max_len, max_tokens) - 1


def decode_memory_bytes(config, src_len: int, beam_size: int, sentences: int = 1) -> int:
    """A rough upper estimate of the bytes decoding ``sentences`` sources of ``src_len`` tokens
    with ``beam_size`` beams needs (float32), for an output of up to ``src_len + 50`` tokens
    (Sec. 6.1) capped by ``max_len``. The cached keys and values count twice: reordering beams
    copies them."""
    out_len = min(src_len + 50, config.max_len - 1)
    per_beam = (
        config.d_model * src_len  # encoder output
        + 2 * config.num_layers * 2 * config.d_model * (out_len + src_len)  # caches, copied
        + 4 * config.tgt_vocab_size  # logits, log-probabilities, scores, top-k
    ) * 4 + 8 * out_len  # float32, and the int64 output tokens
    return per_beam * beam_size * sentences


@torch.no_grad()
def translate(
    model: nn.Module,
    tokenizer,
    sentences: Sequence[str],
    *,
    beam_size: int = 1,
    length_penalty: float = 0.6,
    max_tokens: int = 4096,
    max_new_tokens: int | None = None,
    device: torch.device | str | None = None,
    progress: bool = False,
    truncate: bool = False,
    memory_budget: int | None = None,
) -> list[str]:
    """Translate raw sentences: tokenise, batch by length, decode, detokenise (Sec. 6.1).

    Args:
        model: a trained :class:`~transformer_book.model.Transformer`.
        tokenizer: the :class:`~transformer_book.tokenizer.SubwordTokenizer` it was trained with.
        sentences: source sentences (raw text). An empty or whitespace-only sentence gives an
            empty translation (it is not decoded).
        beam_size: 1 = greedy decoding; >1 = beam search (the paper: 4).
        length_penalty: alpha of the beam search length penalty (the paper: 0.6).
        max_tokens: padded source tokens per batch.
        max_new_tokens: cap on output length (None = the decoder's default).
        device: where to run (default: the model's device).
        progress: show a tqdm bar over batches.
        truncate: translate only the first :func:`source_token_limit` tokens of a longer
            sentence (False: raise ValueError naming it).
        memory_budget: bytes one batch may use (:func:`decode_memory_bytes`); larger batches
            are split (None: no limit).

    Returns:
        One detokenised translation per sentence, in the input order.
    """
    from tqdm import tqdm

    from transformer_book import decode

    if beam_size < 1:
        raise ValueError(f"beam_size must be >= 1, got {beam_size}")
    if device is None:
        device = next(model.parameters()).device
    model.eval()
    out: list[str] = [""] * len(sentences)
    keep = [i for i, s in enumerate(sentences) if s.strip()]  # empty in, empty out
    src_ids = tokenizer.encode_batch([sentences[i] for i in keep])
    limit = source_token_limit(model, max_tokens)
    for j, ids in enumerate(src_ids):
        if len(ids) > limit:
            if not truncate:
                raise ValueError(
                    f"sentence {keep[j]} has {len(ids)} subword tokens, more than the "
                    f"{limit} that fit (max_len {model.config.max_len}, max_tokens "
                    f"{max_tokens}); shorten it or pass truncate=True"
                )
            src_ids[j] = ids[:limit]
    batches = (
        BatchedCorpus(
            src_ids,
            src_ids,
            max_tokens,
            pad_id=tokenizer.pad_id,
            bos_id=tokenizer.bos_id,
            eos_id=tokenizer.eos_id,
            shuffle=False,
        ).batch_indices()
        if src_ids
        else []
    )
    if memory_budget is not None:  # split batches that would need more memory than allowed
        split = []
        for idx in batches:
            longest = max(len(src_ids[i]) + 1 for i in idx)
            per_sentence = decode_memory_bytes(model.config, longest, beam_size)
            rows = max(1, memory_budget // per_sentence)
            split += [idx[k:k + rows] for k in range(0, len(idx), rows)]
        batches = split
    for idx in tqdm(batches, disable=not progress, desc="translating"):
        src = collate(
            [src_ids[i] for i in idx],
            [[]] * len(idx),
            pad_id=tokenizer.pad_id,
            bos_id=tokenizer.bos_id,
            eos_id=tokenizer.eos_id,
        ).src.to(device)
        kwargs = {} if max_new_tokens is None else {"max_new_tokens": max_new_tokens}
        if beam_size == 1:
            ids = decode.greedy_decode(model, src, tokenizer.bos_id, tokenizer.eos_id, **kwargs)
        else:
            ids = decode.beam_search(
                model,
                src,
                tokenizer.bos_id,
                tokenizer.eos_id,
                beam_size=beam_size,
                length_penalty=length_penalty,
                **kwargs,
            )
        if isinstance(ids, Tensor):  # greedy_decode returns (B, 1 + steps), padded after <eos>
            ids = ids.tolist()
        for i, text in zip(idx, tokenizer.decode_batch(ids), strict=True):
            out[keep[i]] = text
    return out


def corpus_bleu(hypotheses: Sequence[str], references: Sequence[str]):
    """sacreBLEU's corpus BLEU: cased, on detokenised text, its default 13a tokenisation.

    Args:
        hypotheses: detokenised system outputs.
        references: the raw reference lines (one reference per sentence).

    Returns:
        ``(score, signature)``: a ``sacrebleu`` ``BLEUScore`` (``score.score`` is the number)
        and the signature string that says how it was computed (print it beside the score).
    """
    from sacrebleu.metrics import BLEU

    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    bleu = BLEU()
    score = bleu.corpus_score(list(hypotheses), [list(references)])
    return score, str(bleu.get_signature())
