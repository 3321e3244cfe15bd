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
    assert batch.num_tgt_tokens == 7
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


# --------------------------------------------------------------------------- fast path (ch. 11)


def _corpus(widths=None, n=300, seed=0):
    rng = random.Random(seed)
    src = [[rng.randint(3, 49) for _ in range(rng.randint(1, 30))] for _ in range(n)]
    tgt = [[rng.randint(3, 49) for _ in range(rng.randint(1, 30))] for _ in range(n)]
    return BatchedCorpus(src, tgt, 256, seed=1, widths=widths)


def test_fixed_width_batches_have_few_shapes_and_keep_every_pair():
    from transformer_book.batching import bucket_width

    plain, fixed = _corpus(), _corpus(widths=(8, 16, 32))
    shapes = set()
    seen = 0
    for batch in fixed.batches(0):
        W = batch.src.shape[1]
        assert W in (8, 16, 32) and batch.src.shape == batch.tgt_in.shape == batch.tgt_out.shape
        assert batch.src.shape[0] == 256 // W  # padded rows: the budget exactly
        real = (batch.tgt_out != 0).any(dim=1)
        assert bool((batch.src[~real] == 0).all())  # extra rows are all padding
        seen += int(real.sum())
        shapes.add(tuple(batch.src.shape))
    assert seen == len(fixed) and len(shapes) <= 3
    # the same tokens as the plain batches, only more padding
    tokens = sum(b.num_tgt_tokens for b in plain.batches(0))
    assert tokens == sum(b.num_tgt_tokens for b in fixed.batches(0))
    assert bucket_width(9, (8, 16)) == 16 and bucket_width(9, None) == 9
    with pytest.raises(ValueError, match="largest bucket"):
        bucket_width(40, (8, 16, 32))


def test_fixed_width_padding_leaves_the_loss_unchanged():
    """Extra padded rows and columns change no real position (eval mode, no dropout)."""
    from transformer_book.config import TransformerConfig
    from transformer_book.model import Transformer
    from transformer_book.train import label_smoothing_loss

    torch.manual_seed(0)
    model = Transformer(TransformerConfig.tiny(src_vocab_size=50, tgt_vocab_size=50)).eval()
    src = [[5, 6, 7], [8, 9]]
    tgt = [[3, 4], [5, 6, 7, 8]]
    tight = collate(src, tgt)
    wide = collate(src, tgt, width=8, rows=4)
    assert wide.src.shape == (4, 8)
    with torch.no_grad():
        a = label_smoothing_loss(model(tight.src, tight.tgt_in), tight.tgt_out)
        b = label_smoothing_loss(model(wide.src, wide.tgt_in), wide.tgt_out)
    torch.testing.assert_close(a, b)


def test_host_side_token_check_and_device_pairs():
    from transformer_book.batching import check_token_ids, to_device_ahead

    batch = collate([[5, 6, 7]], [[3, 4]])
    check_token_ids(batch, 10, 10)
    with pytest.raises(ValueError, match="src contains id 7, outside the vocabulary"):
        check_token_ids(batch, 7, 10)
    with pytest.raises(ValueError, match="tgt_in contains id 4"):
        check_token_ids(batch, 10, 4)
    pairs = list(to_device_ahead([batch, batch], "cpu"))
    assert len(pairs) == 2 and all(h is batch and torch.equal(d.src, batch.src) for h, d in pairs)
