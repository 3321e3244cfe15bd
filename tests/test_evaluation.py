"""transformer_book.evaluation: translate() splits batches that exceed a memory budget, and the
split batches give the same translations as one batch (greedy and beam search)."""

import copy

import pytest
from conftest import VOCAB
from transformer_book import decode
from transformer_book.evaluation import decode_memory_bytes, translate

LETTERS = "abcdefg"  # the copy task's symbols 3..9


class Letters:
    """A tokenizer for the copy task of conftest.py: one letter per symbol."""

    pad_id, bos_id, eos_id = 0, 1, 2

    def encode_batch(self, texts):
        return [[3 + LETTERS.index(c) for c in t.replace(" ", "")] for t in texts]

    def decode_batch(self, batch):
        out = []
        for ids in batch:
            ids = list(ids)
            ids = ids[:ids.index(self.eos_id)] if self.eos_id in ids else ids
            out.append("".join(LETTERS[i - 3] for i in ids if i >= 3))
        return out


SENTENCES = ["abcdef", "gfedcb", "ddeeff", "aabbcc", "cdefga", "gggaaa", "bacdge", "fgabcd",
             "eeffgg", "abgfce", "dcbagf", "cafebe"]  # the copy task's length, 6


@pytest.mark.parametrize("beam_size", [1, 3])
def test_memory_budget_splits_batches_and_changes_no_translation(copy_task, beam_size, device,
                                                                 monkeypatch):
    """The claim holds on any device (``device``: the CPU, or CUDA under ``make gpu-check``).
    How well the fixture copies is not this test's claim (test_model's, on the CPU): the number
    of these sentences it copies moves with the CPU's arithmetic (10 of 12 on one CPU, 8 on
    another). Twelve different outputs are enough: a split that mixed sentences up would show."""
    model, tok = copy.deepcopy(copy_task.model).to(device), Letters()
    assert model.config.tgt_vocab_size == VOCAB
    sizes = []
    name = "greedy_decode" if beam_size == 1 else "beam_search"
    real = getattr(decode, name)

    def counting(model, src, *args, **kwargs):
        sizes.append(src.shape[0])
        return real(model, src, *args, **kwargs)

    monkeypatch.setattr(decode, name, counting)
    whole = translate(model, tok, SENTENCES, beam_size=beam_size)
    assert sizes == [len(SENTENCES)]  # one batch without a budget
    assert len(set(whole)) == len(SENTENCES)  # one output per sentence, all different

    sizes.clear()
    budget = 2 * decode_memory_bytes(model.config, 7, beam_size)  # 2 sentences of 6 + <eos>
    split = translate(model, tok, SENTENCES, beam_size=beam_size, memory_budget=budget)
    assert len(sizes) > 1 and max(sizes) <= 2 and sum(sizes) == len(SENTENCES)
    assert split == whole
