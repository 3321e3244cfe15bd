"""Tests of transformer_book.recurrent: the recurrent translator behind the Transformer's
interface. Shapes, padded sources, incremental decoding, beam search over the recurrent state,
one training step, checkpoints and the command line (``train --model rnn``)."""

import io
import os
import sys
from pathlib import Path

import pytest
import torch
from transformer_book.__main__ import main
from transformer_book.batching import BatchedCorpus, collate
from transformer_book.checkpoint import (
    CheckpointError,
    atomic_torch_save,
    load_checkpoint,
    model_from_checkpoint,
)
from transformer_book.config import (
    RecurrentConfig,
    TrainConfig,
    TransformerConfig,
    model_config_from_dict,
)
from transformer_book.decode import beam_search, greedy_decode, to_lists
from transformer_book.evaluation import translate
from transformer_book.loss import label_smoothing_loss
from transformer_book.model import Transformer
from transformer_book.recurrent import RecurrentCache, RecurrentTranslator
from transformer_book.step import TrainStep
from transformer_book.tokenizer import SubwordTokenizer
from transformer_book.train import Trainer

# Tiny models: one thread is as fast, and does not fight other processes for the cores.
pytestmark = pytest.mark.usefixtures("one_thread")
# Copy task vocabulary, as conftest's: 0 = pad, 1 = BOS, 2 = EOS, 3..11 = symbols.
PAD, BOS, EOS, VOCAB = 0, 1, 2, 12
VARIANTS = [(True, "additive"), (False, "additive"), (True, "general"), (False, "general")]
SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k"
DATA = os.environ.get("MULTI30K_DIR") or (str(SHARED) if SHARED.is_dir() else None)


def tiny(seed: int = 0, **overrides) -> RecurrentTranslator:
    torch.manual_seed(seed)
    config = RecurrentConfig.tiny(src_vocab_size=VOCAB, tgt_vocab_size=VOCAB, max_len=24,
                                  **overrides)
    return RecurrentTranslator(config).eval()


def pairs(n: int, seed: int = 0, lengths=(2, 7)):
    """n random (source, target) id lists of different lengths; target = source reversed."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        length = int(torch.randint(lengths[0], lengths[1] + 1, (1,), generator=g))
        src = torch.randint(3, VOCAB, (length,), generator=g).tolist()
        out.append((src, src[::-1]))
    return out


def batch_of(ps):
    return collate([s for s, _ in ps], [t for _, t in ps], pad_id=PAD, bos_id=BOS, eos_id=EOS)


# --------------------------------------------------------------------------- size and config


def test_cpu_preset_is_about_as_large_as_the_transformer_cpu_preset():
    rnn = RecurrentTranslator(RecurrentConfig.cpu(src_vocab_size=8000, tgt_vocab_size=8000))
    transformer = Transformer(TransformerConfig.cpu(src_vocab_size=8000, tgt_vocab_size=8000))
    n_rnn, n_transformer = rnn.num_parameters(), transformer.num_parameters()
    print(f"\nparameters, shared vocabulary of 8,000: RecurrentConfig.cpu() {n_rnn:,}, "
          f"TransformerConfig.cpu() {n_transformer:,} (ratio {n_rnn / n_transformer:.3f})")
    assert abs(n_rnn / n_transformer - 1) < 0.05
    # one embedding matrix, shared by source, target and output layer
    assert rnn.src_embed.weight is rnn.tgt_embed.weight is rnn.generator.weight


def test_config_checks_and_kind():
    for bad, match in [({"hidden_size": 63}, "even"), ({"attention": "dot"}, "attention"),
                       ({"dropout": 1.0}, "dropout"), ({"num_layers": 0}, "num_layers"),
                       ({"tgt_vocab_size": 9000}, "shared vocabulary")]:
        with pytest.raises(ValueError, match=match):
            RecurrentConfig(**bad)
    config = RecurrentConfig.tiny(dropout=0.1)
    assert config.kind == "rnn" and config.to_dict()["kind"] == "rnn"
    assert model_config_from_dict(config.to_dict()) == config
    with pytest.raises(TypeError):
        RecurrentConfig(kind="transformer")  # not settable: it names the class
    # a model_config without a kind (every checkpoint before the recurrent model) is a Transformer's
    old = TransformerConfig.tiny().to_dict()
    assert model_config_from_dict(old) == TransformerConfig.tiny()
    with pytest.raises(ValueError, match="unknown model kind"):
        model_config_from_dict({**old, "kind": "cnn"})
    with pytest.raises(TypeError, match="RecurrentConfig"):
        RecurrentTranslator(TransformerConfig.tiny())


# --------------------------------------------------------------------------- the interface


@pytest.mark.parametrize("feeding, score", VARIANTS)
def test_shapes_and_attention_weights(feeding, score):
    model = tiny(input_feeding=feeding, attention=score)
    b = batch_of(pairs(3))
    B, S = b.src.shape
    T = b.tgt_in.shape[1]
    logits, weights = model(b.src, b.tgt_in, need_weights=True)
    assert logits.shape == (B, T, VOCAB)
    memory, src_mask = model.encode(b.src)
    assert memory.shape == (B, S, model.config.hidden_size)
    assert src_mask.shape == (B, 1, 1, S) and src_mask.dtype == torch.bool
    torch.testing.assert_close(model.decode(b.tgt_in, memory, src_mask), logits)
    (cross,) = weights["decoder_cross"]
    assert cross.shape == (B, 1, T, S) and weights["encoder"] == weights["decoder_self"] == []
    torch.testing.assert_close(cross.sum(-1), torch.ones(B, 1, T))
    assert float(cross.detach().masked_select(~src_mask.expand_as(cross)).abs().max()) == 0.0
    cache = model.new_cache()
    assert isinstance(cache, RecurrentCache) and len(cache) == 0
    model.decode(b.tgt_in[:, :2], memory, src_mask, cache)
    assert len(cache) == 2


@pytest.mark.parametrize("feeding, score", VARIANTS)
def test_a_padded_batch_gives_each_sentence_its_logits_alone(feeding, score):
    """Packing keeps the padding out of both encoder directions, the mask out of attention."""
    model = tiny(input_feeding=feeding, attention=score)
    ps = [([3, 4], [5, 6, 7, 8, 9, 10]), ([4, 5, 6, 7, 8, 9, 10], [3]), ([11, 3, 5, 7], [8, 9])]
    b = batch_of(ps)
    assert (b.src == PAD).any() and (b.tgt_in == PAD).any()
    together = model(b.src, b.tgt_in)  # (3, T, V)
    for i, p in enumerate(ps):
        alone = batch_of([p])
        T = alone.tgt_in.shape[1]
        torch.testing.assert_close(together[i, :T], model(alone.src, alone.tgt_in)[0],
                                   rtol=1e-5, atol=1e-5)


def test_sources_must_be_right_padded():
    model = tiny()
    with pytest.raises(ValueError, match="right-padded"):
        model.encode(torch.tensor([[PAD, 3, 4, EOS]]))


@pytest.mark.parametrize("feeding, score", VARIANTS)
def test_decoding_with_the_cache_equals_decoding_the_whole_prefix(feeding, score):
    model = tiny(input_feeding=feeding, attention=score)
    b = batch_of(pairs(4, seed=1))
    memory, src_mask = model.encode(b.src)
    whole = model.decode(b.tgt_in, memory, src_mask)  # (B, T, V)
    cache = model.new_cache()
    T = b.tgt_in.shape[1]
    parts = [model.decode(b.tgt_in[:, :2], memory, src_mask, cache)]  # two tokens, then one by one
    parts += [model.decode(b.tgt_in[:, t : t + 1], memory, src_mask, cache) for t in range(2, T)]
    assert len(cache) == T
    torch.testing.assert_close(torch.cat(parts, dim=1), whole, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("feeding", [True, False])
def test_reordered_cache_continues_the_chosen_rows(feeding):
    model = tiny(input_feeding=feeding)
    b = batch_of(pairs(3, seed=2, lengths=(4, 6)))
    memory, src_mask = model.encode(b.src)
    cache = model.new_cache()
    model.decode(b.tgt_in[:, :3], memory, src_mask, cache)
    index = torch.tensor([2, 0, 0, 1])  # as beam search does: rows may repeat or vanish
    cache.reorder(index)
    step = model.decode(b.tgt_in[index, 3:4], memory[index], src_mask[index], cache)
    whole = model.decode(b.tgt_in[index, :4], memory[index], src_mask[index])
    torch.testing.assert_close(step[:, 0], whole[:, 3], rtol=1e-5, atol=1e-5)


def test_bad_cache_and_memory_are_refused():
    model = tiny()
    b = batch_of(pairs(2))
    memory, src_mask = model.encode(b.src)
    with pytest.raises(ValueError, match="RecurrentCache"):
        model.decode(b.tgt_in, memory, src_mask, Transformer(TransformerConfig.tiny(
            src_vocab_size=VOCAB, tgt_vocab_size=VOCAB)).new_cache())
    with pytest.raises(ValueError, match="memory must have shape"):
        model.decode(b.tgt_in, memory[:, :, :5], src_mask)
    cache = model.new_cache()
    model.decode(b.tgt_in[:, :1], memory, src_mask, cache)
    with pytest.raises(ValueError, match="batch size"):
        model.decode(b.tgt_in[:1, 1:2], memory[:1], src_mask[:1], cache)


# --------------------------------------------------------------------------- training, decoding


def test_one_training_step_lowers_the_loss():
    model = tiny(dropout=0.1)
    b = batch_of(pairs(16, seed=3))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2, betas=(0.9, 0.98), eps=1e-9)
    step = TrainStep(model, optimizer, label_smoothing=0.1, pad_id=PAD)

    def loss() -> float:
        model.eval()
        with torch.no_grad():
            return float(label_smoothing_loss(model(b.src, b.tgt_in), b.tgt_out, 0.1, PAD))

    before = loss()
    step(b)
    assert loss() < before - 0.01


@pytest.fixture(scope="module")
def reverser() -> RecurrentTranslator:
    """The tiny model (input feeding, additive scores) trained to reverse 2 to 7 symbols with the
    book's training step: 300 Adam steps, about 5 s on one thread."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model = tiny(seed=0)
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-2, betas=(0.9, 0.98), eps=1e-9)
        step = TrainStep(model, optimizer, label_smoothing=0.0, pad_id=PAD)
        for i in range(300):
            step(batch_of(pairs(48, seed=100 + i)))
        return model.eval()
    finally:
        torch.set_num_threads(threads)


def test_the_trained_model_reverses_unseen_sequences(reverser):
    ps = pairs(32, seed=7)
    b = batch_of(ps)
    out = to_lists(greedy_decode(reverser, b.src, BOS, EOS), EOS, PAD)
    right = sum(ids == [BOS, *t, EOS] for ids, (_, t) in zip(out, ps, strict=True))
    assert right >= 26, out[:4]  # 29 of 32 when written


def test_beam_search_over_the_recurrent_state(reverser):
    b = batch_of(pairs(8, seed=8))
    greedy = greedy_decode(reverser, b.src, BOS, EOS)
    assert torch.equal(greedy, greedy_decode(reverser, b.src, BOS, EOS, use_cache=False))
    one = beam_search(reverser, b.src, BOS, EOS, beam_size=1, length_penalty=0.0)
    assert one == to_lists(greedy, EOS, PAD)  # beam 1 without length penalty is greedy
    four = beam_search(reverser, b.src, BOS, EOS, beam_size=4)
    assert four == beam_search(reverser, b.src, BOS, EOS, beam_size=4, use_cache=False)


# --------------------------------------------------------------------------- checkpoints, CLI

DE = ["Ein Hund läuft über die Wiese.", "Zwei Männer spielen Fußball.", "Eine Frau liest."]
EN = ["A dog runs across the meadow.", "Two men play soccer.", "A woman reads."]


def test_checkpoint_round_trip(tmp_path):
    tok = SubwordTokenizer.train(DE * 3 + EN * 3, vocab_size=120, min_frequency=1)
    src, tgt = tok.encode_batch(DE * 4), tok.encode_batch(EN * 4)
    config = RecurrentConfig.tiny(src_vocab_size=tok.vocab_size, tgt_vocab_size=tok.vocab_size)
    torch.manual_seed(0)
    trainer = Trainer(RecurrentTranslator(config), BatchedCorpus(src, tgt, max_tokens=200),
                      TrainConfig(max_steps=2, warmup_steps=2, device="cpu", progress=False,
                                  checkpoint_dir=str(tmp_path)),
                      model_config=config, extra={"tokenizer": tok.to_str()})
    trainer.fit()
    state = load_checkpoint(tmp_path / "last.pt")
    assert state["step"] == 2 and state["model_config"]["kind"] == "rnn"
    model, tokenizer, _ = model_from_checkpoint(tmp_path / "last.pt", "cpu")
    assert isinstance(model, RecurrentTranslator) and model.config == config
    for name, value in trainer.model.state_dict().items():
        torch.testing.assert_close(model.state_dict()[name], value)
    out = translate(model, tokenizer, DE + [""], beam_size=2, max_new_tokens=5)
    assert len(out) == 4 and out[-1] == ""
    state["model_config"]["kind"] = "cnn"
    atomic_torch_save(state, tmp_path / "other.pt")
    with pytest.raises(CheckpointError, match="kind 'cnn'"):
        model_from_checkpoint(tmp_path / "other.pt", "cpu")


def _main(*args, stdin: str = "") -> int:
    before = sys.stdin
    sys.stdin = io.StringIO(stdin)
    try:
        return main([str(a) for a in args])
    except SystemExit as e:  # argparse
        return e.code
    finally:
        sys.stdin = before


@pytest.mark.skipif(DATA is None, reason="no local Multi30k copy (set MULTI30K_DIR)")
def test_cli_trains_resumes_and_translates_the_recurrent_model(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TRANSFORMER_BOOK_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("MULTI30K_DIR", DATA)
    monkeypatch.delenv("TRANSFORMER_BOOK_DEBUG", raising=False)
    run = tmp_path / "rnn"
    common = ["--model", "rnn", "--preset", "tiny", "--vocab-size", "500", "--train-limit", "64",
              "--max-tokens", "400", "--device", "cpu", "--no-progress", "--checkpoint-dir", run]
    assert _main("train", *common, "--max-steps", 2) == 0, capsys.readouterr().err
    assert _main("train", *common, "--resume", "--max-steps", 3) == 0, capsys.readouterr().err
    state = load_checkpoint(run / "last.pt")
    assert state["step"] == 3 and state["model_config"]["kind"] == "rnn"
    capsys.readouterr()
    lines = "Ein Hund läuft.\nZwei Männer spielen Fußball im Park.\n"
    assert _main("translate", "--checkpoint", run / "last.pt", "--beam-size", 2, "--device",
                 "cpu", stdin=lines) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2
    # --preset cpu: the cpu recipe with the recurrent model's own learning rate
    assert _main("train", "--model", "rnn", "--preset", "cpu", *common[4:-2], "--max-steps", 1,
                 "--checkpoint-dir", tmp_path / "cpu") == 0, capsys.readouterr().err
    given = load_checkpoint(tmp_path / "cpu" / "last.pt")["train_config"]
    assert given["lr_factor"] == TrainConfig.cpu_rnn().lr_factor == 1.8
    assert given["max_tokens"] == 400 and given["time_budget"] == TrainConfig.cpu().time_budget
    capsys.readouterr()
    for folder, flags, words in [("new", ["--preset", "small"], "presets tiny and cpu"),
                                 ("new", ["--norm-first"], "no sub-layers"),
                                 (run, ["--resume", "--model", "transformer"],
                                  "--model transformer (the run has rnn)")]:
        assert _main("train", "--model", "rnn", "--checkpoint-dir", tmp_path / folder, *flags) == 2
        assert words in capsys.readouterr().err
