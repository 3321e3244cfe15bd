"""Evaluation (Sec. 6.1 of the paper): translating raw sentences and scoring them with BLEU.

- :func:`translate`: tokenise, batch by length, greedy or beam search (beam 4, length penalty
  alpha = 0.6 in the paper), detokenise.
- :func:`corpus_bleu`: sacreBLEU's corpus BLEU, with the signature that says how it was computed.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from transformer_book.batching import BatchedCorpus, collate


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
) -> list[str]:
    """Translate raw sentences: tokenise, batch by length, decode, detokenise (Sec. 6.1).

    Args:
        model: a trained :class:`~transformer_book.model.Transformer`.
        tokenizer: the :class:`~transformer_book.tokenizer.SubwordTokenizer` it was trained with.
        sentences: source sentences (raw text).
        beam_size: 1 = greedy decoding; >1 = beam search (the paper: 4).
        length_penalty: alpha of the beam search length penalty (the paper: 0.6).
        max_tokens: padded source tokens per batch.
        max_new_tokens: cap on output length (None = the decoder's default).
        device: where to run (default: the model's device).
        progress: show a tqdm bar over batches.

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
    src_ids = tokenizer.encode_batch(list(sentences))
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
        if sentences
        else []
    )
    out: list[str] = [""] * len(sentences)
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
            out[i] = text
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
