"""Tests for transformer_book.decode (Sec. 3.1, 6.1): cached == uncached, greedy == beam of
size 1, beam search == exhaustive search on a tiny vocabulary, the trained copy model, errors."""

import itertools

import pytest
import torch
import torch.nn.functional as F
from conftest import BOS, EOS, LENGTH, copy_batch
from transformer_book.config import TransformerConfig
from transformer_book.decode import beam_search, greedy_decode, length_penalty_gnmt, to_lists
from transformer_book.model import Transformer


def _random_model(vocab=20, max_len=24, seed=0) -> Transformer:
    torch.manual_seed(seed)
    config = TransformerConfig.tiny(src_vocab_size=vocab, tgt_vocab_size=vocab, max_len=max_len)
    return Transformer(config).eval()


def _src(vocab=20):
    torch.manual_seed(1)
    src = torch.randint(3, vocab, (3, 7))
    src[1, 4:] = 0  # padding
    return src


def test_greedy_cached_equals_uncached():
    model = _random_model()
    src = _src()
    cached = greedy_decode(model, src, BOS, EOS, max_new_tokens=12)
    uncached = greedy_decode(model, src, BOS, EOS, max_new_tokens=12, use_cache=False)
    assert torch.equal(cached, uncached)
    assert cached.shape[0] == 3 and torch.all(cached[:, 0] == BOS)


def test_greedy_default_length_and_mode_restored():
    model = _random_model(max_len=16).train()
    out = greedy_decode(model, _src(), BOS, EOS)
    assert model.training  # restored
    assert out.shape[1] <= 16  # never past the positional table (source + 50 capped)


def test_greedy_pads_after_eos():
    model = _random_model()
    out = greedy_decode(model, _src(), BOS, EOS, max_new_tokens=12)
    for row in out.tolist():
        if EOS in row:
            assert all(t == model.config.pad_id for t in row[row.index(EOS) + 1 :])


def test_beam_of_one_without_length_penalty_is_greedy():
    for seed in range(3):
        model = _random_model(seed=seed)
        src = _src()
        greedy = to_lists(greedy_decode(model, src, BOS, EOS, max_new_tokens=10), EOS, pad_id=0)
        beam = beam_search(model, src, BOS, EOS, beam_size=1, length_penalty=0.0, max_new_tokens=10)
        assert beam == greedy


def test_beam_cached_equals_uncached():
    model = _random_model()
    src = _src()
    a = beam_search(model, src, BOS, EOS, beam_size=3, max_new_tokens=8)
    b = beam_search(model, src, BOS, EOS, beam_size=3, max_new_tokens=8, use_cache=False)
    assert a == b


def _exhaustive_best(model, src, max_new, alpha):
    """Score every possible output (ends with EOS, or reaches max_new tokens) by brute force."""
    V = model.config.tgt_vocab_size
    memory, src_mask = model.encode(src)
    next_log_probs = {}  # prefix (tuple of ids) -> log-probabilities of the next token, (V,)

    def log_probs(prefix):
        if prefix not in next_log_probs:
            with torch.no_grad():
                logits = model.decode(torch.tensor([prefix]), memory, src_mask)  # (1, n, V)
            next_log_probs[prefix] = F.log_softmax(logits[0, -1], dim=-1)
        return next_log_probs[prefix]

    best = (float("-inf"), None)
    for n in range(1, max_new + 1):
        for body in itertools.product(range(V), repeat=n):
            if EOS in body[:-1] or (n < max_new and body[-1] != EOS):
                continue
            ids = (BOS, *body)
            logp = sum(float(log_probs(ids[:i])[ids[i]]) for i in range(1, n + 1))
            score = logp / length_penalty_gnmt(n, alpha)
            if score > best[0]:
                best = (score, list(ids))
    return best[1]


@pytest.mark.parametrize("seed", [0, 2])
def test_wide_beam_finds_the_exhaustive_best(seed):
    torch.manual_seed(seed)
    config = TransformerConfig.tiny(src_vocab_size=5, tgt_vocab_size=5, tie_output=False)
    model = Transformer(config).eval()
    with torch.no_grad():
        model.generator.weight.mul_(0.3)  # flatter distributions: the search matters
    src = torch.tensor([[3, 4, 3, 4]])
    answers = []
    for alpha in (0.0, 0.6, 2.0):
        expected = _exhaustive_best(model, src, max_new=3, alpha=alpha)
        # 25 beams hold every partial output of 2 tokens (5 x 5): the search is exact.
        got = beam_search(
            model, src, BOS, EOS, beam_size=25, length_penalty=alpha, max_new_tokens=3
        )
        assert got == [expected], alpha
        answers.append(expected)
    assert len({tuple(a) for a in answers}) > 1  # the length penalty changes the winner here


def test_copy_model_greedy_and_beam(copy_task):
    g = torch.Generator().manual_seed(7)
    src, _, _ = copy_batch(16, generator=g)
    expected = [[BOS, *row, EOS] for row in src.tolist()]
    greedy = greedy_decode(copy_task.model, src, BOS, EOS)  # default length: source + 50
    assert to_lists(greedy, EOS) == expected
    assert greedy.shape[1] == LENGTH + 2  # stopped as soon as every row emitted EOS
    assert beam_search(copy_task.model, src, BOS, EOS) == expected  # paper's beam 4, alpha 0.6


def test_errors():
    model = _random_model()
    src = _src()
    with pytest.raises(ValueError, match="beam_size"):
        beam_search(model, src, BOS, EOS, beam_size=0)
    with pytest.raises(ValueError, match="bos_id"):
        greedy_decode(model, src, 20, EOS)
    with pytest.raises(ValueError, match="max_new_tokens"):
        greedy_decode(model, src, BOS, EOS, max_new_tokens=0)
    with pytest.raises(ValueError, match="empty"):
        greedy_decode(model, src[:0], BOS, EOS)
    with pytest.raises(ValueError, match="length_penalty"):
        beam_search(model, src, BOS, EOS, length_penalty=-1.0)
    with pytest.raises(TypeError, match="Transformer"):
        greedy_decode(torch.nn.Linear(2, 2), src, BOS, EOS)


def test_gnmt_length_penalty_values():
    assert length_penalty_gnmt(1, 0.6) == pytest.approx(1.0)  # ((5 + 1) / 6)^alpha
    assert length_penalty_gnmt(10, 0.6) == pytest.approx(2.5**0.6)
    assert length_penalty_gnmt(10, 0.0) == 1.0


def test_any_encoder_decoder_decodes_and_use_cache_follows_the_model():
    """decode takes any model with encode/decode/config (here nn.Transformer's wrapper, which
    keeps no cache): use_cache=None decodes without one, use_cache=True says it cannot."""
    from transformer_book.config import TransformerConfig
    from transformer_book.decode import beam_search, greedy_decode
    from transformer_lab import TorchTransformerBaseline

    torch.manual_seed(0)
    model = TorchTransformerBaseline(TransformerConfig.tiny(src_vocab_size=20, tgt_vocab_size=20))
    src = torch.randint(3, 20, (2, 5))
    assert greedy_decode(model, src, 1, 2, max_new_tokens=4).shape == (2, 5)
    assert len(beam_search(model, src, 1, 2, beam_size=2, max_new_tokens=4)) == 2
    with pytest.raises(ValueError, match="keeps no cache"):
        greedy_decode(model, src, 1, 2, max_new_tokens=4, use_cache=True)
    with pytest.raises(TypeError, match="encoder-decoder"):
        greedy_decode(torch.nn.Linear(2, 2), src, 1, 2)
