"""The compact tokenised corpus: token ids in one flat array (2 bytes per token) instead of Python
lists (about 36), tokenised by streaming, and batched exactly as the list version is."""

from __future__ import annotations

import gc
import itertools
import os
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from transformer_book.batching import BatchedCorpus
from transformer_book.corpus import (
    CompactBatchedCorpus,
    CorpusError,
    PairStream,
    TokenIds,
    encode_pairs,
    id_dtype,
)
from transformer_book.data import ParallelCorpus
from transformer_book.tokenizer import SubwordTokenizer
from transformer_book.train import prepare_corpus

DE = ["Ein Hund läuft im Schnee.", "Zwei Kinder spielen im Park mit einem roten Ball.",
      "Eine Frau liest ein Buch.", "Ein Mann fährt Fahrrad."]
EN = ["A dog runs in the snow.", "Two children play in the park with a red ball.",
      "A woman reads a book.", "A man rides a bike."]
SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k"


@pytest.fixture(scope="module")
def tok():
    return SubwordTokenizer.train(DE + EN, vocab_size=150, min_frequency=1)


def corpus(n=40):
    return ParallelCorpus("train", "de", "en", (DE * n)[: 4 * n - 3], (EN * n)[: 4 * n - 3])


def batches(data, epoch=0):
    return [(b.src.tolist(), b.tgt_in.tolist(), b.tgt_out.tolist()) for b in data.batches(epoch)]


def test_token_ids_index_sentences():
    seqs = [[5, 6, 7], [], [70000 - 1], [8]]
    ids = TokenIds(np.array([5, 6, 7, 70000 - 1, 8], dtype=id_dtype(70000)),
                   np.array([0, 3, 3, 4, 5]))
    assert ids.flat.dtype == np.int32 and len(ids) == 4  # more than 65,536 ids: int32
    assert [ids[i] for i in range(4)] == seqs and ids[-1] == [8]
    assert ids.lengths.tolist() == [3, 0, 1, 1]
    assert id_dtype(8000) == np.uint16
    with pytest.raises(IndexError):
        ids[4]
    with pytest.raises(ValueError, match="offsets"):
        TokenIds(np.arange(3), np.array([0, 2]))


def test_encode_pairs_streams_in_chunks(tok):
    data = corpus()
    listed = (tok.encode_batch(data.src), tok.encode_batch(data.tgt))
    for chunk in (1, 7, 10_000):  # chunk boundaries change nothing
        src, tgt = encode_pairs(tok, iter(data), chunk_size=chunk)
        assert [src[i] for i in range(len(src))] == listed[0]
        assert [tgt[i] for i in range(len(tgt))] == listed[1]
    src, _ = encode_pairs(tok, data, limit=5, max_len=8)
    assert len(src) == sum(len(x) <= 8 and len(y) <= 8
                           for x, y in zip(listed[0][:5], listed[1][:5], strict=True))
    assert 0 < len(src) < 5  # the limit, and the long pair dropped


def listed(tok, data, max_tokens, max_len, **kwargs) -> BatchedCorpus:
    """The corpus as lists of ids (the plain way: encode everything, drop the long pairs)."""
    pairs = [(x, y) for x, y in zip(tok.encode_batch(data.src), tok.encode_batch(data.tgt),
                                    strict=True) if len(x) <= max_len and len(y) <= max_len]
    return BatchedCorpus([x for x, _ in pairs], [y for _, y in pairs], max_tokens, **kwargs)


@pytest.mark.parametrize("widths", [None, (8, 16, 32)])
def test_compact_corpus_batches_exactly_like_the_lists(tok, widths):
    data = corpus()
    full = listed(tok, data, 96, 12, seed=3, widths=widths)
    compact = prepare_corpus(tok, data, 96, seed=3, max_len=12, widths=widths)
    assert isinstance(compact, BatchedCorpus) and len(compact) == len(full) < len(data)
    for epoch in (0, 1):
        assert batches(compact, epoch) == batches(full, epoch)
        assert compact.target_tokens(epoch) == full.target_tokens(epoch)
    # train --train-limit: the first pairs, then the long ones dropped
    first = ParallelCorpus("train", "de", "en", data.src[:9], data.tgt[:9])
    assert batches(prepare_corpus(tok, data, 96, max_len=12, limit=9)) == \
        batches(listed(tok, first, 96, 12))
    src, tgt = encode_pairs(tok, data)
    lists = BatchedCorpus([src[i] for i in range(len(src))], [tgt[i] for i in range(len(tgt))],
                          64, widths=widths, shuffle=False)
    assert batches(CompactBatchedCorpus(src, tgt, 64, widths=widths, shuffle=False)) == \
        batches(lists)


def test_empty_stream_and_all_too_long_are_one_line_errors(tok):
    with pytest.raises(CorpusError, match="toy: no sentence pairs"):
        prepare_corpus(tok, PairStream(lambda: iter(()), name="toy"), 64)
    with pytest.raises(CorpusError, match="longer than 1 subwords"):
        prepare_corpus(tok, corpus(2), 64, max_len=1)
    # a stream is read afresh on every pass
    stream = PairStream(lambda: zip(DE, EN, strict=True), name="toy")
    assert list(stream) == list(stream) == list(zip(DE, EN, strict=True))


def _traced_bytes(build):
    """Bytes still allocated (tracemalloc: Python objects and NumPy buffers) by what build() keeps."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = build()
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    return kept, after - before


def test_multi30k_compact_ids_take_under_a_quarter_of_the_lists_memory(monkeypatch, tmp_path):
    from transformer_book.data import load_multi30k
    from transformer_book.tokenizer import load_or_train_tokenizer

    folder = os.environ.get("MULTI30K_DIR") or (str(SHARED) if SHARED.is_dir() else None)
    if folder is None:
        pytest.skip("no local Multi30k copy (set MULTI30K_DIR)")
    monkeypatch.setenv("TRANSFORMER_BOOK_CACHE", str(tmp_path))
    train = load_multi30k("train", folder)
    tok = load_or_train_tokenizer(train, vocab_size=8000, cache_dir=tmp_path)
    lists, list_bytes = _traced_bytes(lambda: (tok.encode_batch(train.src),
                                               tok.encode_batch(train.tgt)))
    compact, compact_bytes = _traced_bytes(lambda: encode_pairs(tok, train))
    tokens = sum(len(ids) for ids in itertools.chain(*lists))
    assert tokens == len(compact[0].flat) + len(compact[1].flat)
    assert compact_bytes >= compact[0].nbytes + compact[1].nbytes  # the arrays are all it keeps
    per_list, per_compact = list_bytes / tokens, compact_bytes / tokens
    print(f"Multi30k train, {tokens:,} tokens: lists {per_list:.1f} bytes/token, "
          f"compact {per_compact:.2f} bytes/token ({list_bytes / compact_bytes:.1f}x less)")
    assert compact_bytes < list_bytes / 4
    assert per_compact < 3  # 2 bytes of uint16 + 8 bytes of offset per sentence (~13 tokens)
    assert 20 < per_list < 40  # the README's "about 30": 8-byte pointers, 28-byte ints above 256
