"""Tests of transformer_book.batching: token budget, length grouping, layout, determinism."""

import random

import pytest
import torch
from transformer_book.batching import BatchedCorpus, batch_cost, collate, token_budget_batches


def _lengths(n=500, seed=0):
    rng = random.Random(seed)
    src = [rng.randint(1, 40) for _ in range(n)]
    tgt = [max(1, s + rng.randint(-5, 5)) for s in src]
    return src, tgt


def test_budget_is_respected_and_every_example_used_once():
    src, tgt = _lengths()
    batches = token_budget_batches(src, tgt, max_tokens=300, seed=1)
    assert sorted(i for b in batches for i in b) == list(range(len(src)))
    for b in batches:
        assert batch_cost([src[i] for i in b], [tgt[i] for i in b]) <= 300


def test_lengths_are_grouped():
    src, tgt = _lengths()
    batches = token_budget_batches(src, tgt, max_tokens=300, seed=1)
    spread = [max(max(src[i], tgt[i]) for i in b) - min(max(src[i], tgt[i]) for i in b)
              for b in batches]
    assert max(spread) <= 5  # sorted packing: neighbours have nearly equal lengths
    # padding is small: far less than random batches of the same sizes would need
    used = sum(src[i] + 1 for b in batches for i in b)
    padded = sum(len(b) * (max(src[i] for i in b) + 1) for b in batches)
    assert used / padded > 0.8


def test_shuffling_is_seeded():
    src, tgt = _lengths()
    a = token_budget_batches(src, tgt, 300, seed=3)
    assert a == token_budget_batches(src, tgt, 300, seed=3)
    assert a != token_budget_batches(src, tgt, 300, seed=4)
    fixed = token_budget_batches(src, tgt, 300, shuffle=False)
    firsts = [max(src[b[0]], tgt[b[0]]) for b in fixed]
    assert firsts == sorted(firsts)


def test_too_long_example_raises():
    with pytest.raises(ValueError, match="more than max_tokens"):
        token_budget_batches([10, 50], [10, 50], max_tokens=40)


def test_collate_layout():
    batch = collate([[5, 6, 7], [8]], [[9, 10], [11, 12, 13]], pad_id=0, bos_id=1, eos_id=2)
    torch.testing.assert_close(batch.src, torch.tensor([[5, 6, 7, 2], [8, 2, 0, 0]]))
    torch.testing.assert_close(batch.tgt_in, torch.tensor([[1, 9, 10, 0], [1, 11, 12, 13]]))
    torch.testing.assert_close(batch.tgt_out, torch.tensor([[9, 10, 2, 0], [11, 12, 13, 2]]))
    assert batch.num_tgt_tokens == 7 and batch.num_src_tokens == 6
    # tgt_in is tgt_out shifted right by one, starting with <bos>
    words = (batch.tgt_out[:, :-1] != 0) & (batch.tgt_out[:, :-1] != 2)
    torch.testing.assert_close(batch.tgt_in[:, 1:][words], batch.tgt_out[:, :-1][words])


def test_batched_corpus_epochs_and_resume():
    src, tgt = _lengths(100)
    src_ids = [[4] * n for n in src]
    tgt_ids = [[5] * n for n in tgt]
    corpus = BatchedCorpus(src_ids, tgt_ids, max_tokens=200, seed=7)
    e0 = [b.src.tolist() for b in corpus.batches(epoch=0)]
    assert [b.src.tolist() for b in corpus.batches(epoch=0, start=3)] == e0[3:]
    assert corpus.batch_indices(0) != corpus.batch_indices(1)
    assert corpus.num_batches(0) == len(e0)
    for b in corpus.batches(epoch=1):
        assert b.src.numel() <= 200 and b.tgt_in.numel() <= 200
