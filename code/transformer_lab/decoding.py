"""Decoding speed: greedy and beam search, with and without the key/value cache."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from transformer_lab.timing import sync

# ---------------------------------------------------------------------------------------------
# Decoding speed: greedy and beam search, with and without the key/value cache
# ---------------------------------------------------------------------------------------------

def source_batches(sources: Sequence[Sequence[int]], batch_size: int, *, pad_id: int,
                   eos_id: int) -> list[tuple[list[int], Tensor]]:
    """Sentences sorted by length and cut into batches, each padded as the model reads it.

    Grouping similar lengths keeps padding (wasted work) small. Each source gets ``eos_id``
    appended, as :func:`transformer_book.batching.collate` does in training.

    Returns:
        ``(indices, src)`` pairs: the positions of the batch's sentences in ``sources`` and the
        (B, S) tensor of ids.
    """
    from transformer_book.batching import pad_sequences

    if batch_size < 1:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    out = []
    for start in range(0, len(order), batch_size):
        idx = order[start:start + batch_size]
        out.append((idx, pad_sequences([list(sources[i]) + [eos_id] for i in idx], pad_id)))
    return out


def make_eos_unreachable(model: nn.Module, eos_id: int) -> None:
    """Zero the output-layer row of ``eos_id``, so an untrained model never chooses it.

    Its logit is then exactly 0 while the best of thousands of random logits is positive, so
    greedy and beam search (beam sizes far below the vocabulary) run to their length limit.
    With tied weights (Sec. 3.4) the embedding row of ``eos_id`` is zeroed too, which does not
    matter since EOS is never fed back. Used to time decoding of a fixed length.
    """
    with torch.no_grad():
        model.generator.weight[eos_id].zero_()


def measure_decoding(
    model: nn.Module,
    batches: Sequence[tuple[list[int], Tensor]],
    methods: dict[str, dict],
    *,
    bos_id: int,
    eos_id: int,
    max_new_tokens: int | None = None,
    device: torch.device | str | None = None,
) -> dict[str, dict]:
    """Decode every batch with every method, timing each; methods take turns batch by batch.

    Args:
        model: a :class:`transformer_book.model.Transformer`.
        batches: from :func:`source_batches`.
        methods: name -> keyword arguments: ``beam_size`` (1 = greedy decoding with
            :func:`transformer_book.decode.greedy_decode`, more = beam search with
            :func:`transformer_book.decode.beam_search`), ``use_cache``, ``length_penalty``.
        bos_id, eos_id: the special tokens.
        max_new_tokens: length limit (None = the decoder's default: source length + 50).
        device: where to decode (default: the model's device).

    Returns:
        name -> ``{"seconds", "sentences", "sentences_per_second", "tokens" (generated, BOS and
        padding not counted), "outputs" (one id list per sentence, in the input order)}``. The
        first batch is decoded once by every method before timing starts (warm-up).
    """
    from transformer_book import decode

    device = torch.device(device) if device is not None else next(model.parameters()).device
    model.eval()
    total = sum(len(idx) for idx, _ in batches)
    results = {name: {"seconds": 0.0, "sentences": total, "tokens": 0,
                      "outputs": [None] * total} for name in methods}
    pad = model.config.pad_id

    def run(src: Tensor, beam_size: int = 1, use_cache: bool = True,
            length_penalty: float = 0.6) -> list[list[int]]:
        kwargs = {} if max_new_tokens is None else {"max_new_tokens": max_new_tokens}
        if beam_size == 1:
            ids = decode.greedy_decode(model, src, bos_id, eos_id, use_cache=use_cache, **kwargs)
            return [[t for t in row if t != pad] for row in ids.tolist()]
        return decode.beam_search(model, src, bos_id, eos_id, beam_size=beam_size,
                                  length_penalty=length_penalty, use_cache=use_cache, **kwargs)

    if batches:
        for options in methods.values():  # warm-up: allocator, kernel choice
            run(batches[0][1][:2].to(device), **options)
    for idx, src in batches:
        src = src.to(device)
        for name, options in methods.items():
            sync(device)
            start = time.perf_counter()
            outputs = run(src, **options)
            sync(device)
            results[name]["seconds"] += time.perf_counter() - start
            for i, out in zip(idx, outputs, strict=True):
                results[name]["outputs"][i] = out
                results[name]["tokens"] += len(out) - 1  # without BOS
    for r in results.values():
        r["sentences_per_second"] = r["sentences"] / r["seconds"] if r["seconds"] else math.nan
    return results

