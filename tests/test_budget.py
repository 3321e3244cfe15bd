"""The short-budget recipe's pieces: the linear schedule, the time budget, the embedding scale."""

import dataclasses
import math
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformer_book.batching import BatchedCorpus
from transformer_book.config import TransformerConfig
from transformer_book.model import Transformer
from transformer_book.positional import PositionalEncoding
from transformer_book.train import (
    TrainConfig,
    Trainer,
    linear_lr,
    load_checkpoint,
    make_optimizer,
    noam_lr,
)

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def _data(n=48, vocab=20, seed=0, shuffle=True):
    rng = random.Random(seed)
    src = [[rng.randrange(4, vocab) for _ in range(rng.randint(2, 9))] for _ in range(n)]
    return BatchedCorpus(src, [x[::-1] for x in src], max_tokens=60, shuffle=shuffle, seed=seed)


def _trainer(tmp_path=None, **overrides):
    torch.manual_seed(0)
    cfg = TransformerConfig.tiny(src_vocab_size=20, tgt_vocab_size=20, max_len=32)
    settings = dict(max_tokens=60, epochs=3, warmup_steps=5, seed=0, device="cpu",
                    progress=False, checkpoint_dir=str(tmp_path) if tmp_path else None)
    settings.update(overrides)
    return Trainer(Transformer(cfg), _data(), TrainConfig(**settings), model_config=cfg,
                   val_data=_data(16, seed=1, shuffle=False))


def test_linear_lr_peaks_where_noam_does_and_ends_at_zero():
    d, w = 256, 400
    assert linear_lr(w, d, w, 2.0) == pytest.approx(noam_lr(w, d, w, 2.0))  # same peak
    assert linear_lr(w // 2, d, w) == pytest.approx(noam_lr(w // 2, d, w))  # same warm-up
    assert linear_lr(w, d, w, progress=0.5) == pytest.approx(noam_lr(w, d, w) / 2)
    assert linear_lr(5 * w, d, w, progress=1.0) == 0.0
    assert linear_lr(5 * w, d, w, progress=1.3) == 0.0  # never negative
    with pytest.raises(ValueError, match="step counts from 1"):
        linear_lr(0, d, w)
    with pytest.raises(ValueError, match="schedule must be one of"):
        make_optimizer(torch.nn.Linear(2, 2), 8, schedule="cosine")
    with pytest.raises(ValueError, match="needs progress="):
        make_optimizer(torch.nn.Linear(2, 2), 8, schedule="linear")


def test_linear_schedule_reaches_zero_at_the_last_step():
    trainer = _trainer(schedule="linear")
    total = trainer.total_steps()
    assert total == sum(trainer.train_data.num_batches(e) for e in range(3)) > 10
    trainer.fit()
    steps, rates = zip(*trainer.history.lr, strict=True)
    assert steps[-1] == total
    peak = noam_lr(5, 64, 5)
    assert max(rates) <= peak and max(rates) > 0.7 * peak
    # after the warm-up the rate falls every step, and the rate set after the last step is 0
    after = rates[5:]
    assert all(b < a for a, b in zip(after, after[1:], strict=False))
    assert rates[-1] == pytest.approx(0.0, abs=1e-12)
    assert trainer.progress() == 1.0


def test_time_budget_stops_mid_epoch_validates_and_resumes(tmp_path):
    clock = [0.0]
    trainer = _trainer(tmp_path, epochs=50, schedule="linear", time_budget=10.0)
    # a fake clock: every call of elapsed() after the first 7 steps says the budget is spent
    real_elapsed = trainer.elapsed
    trainer.elapsed = lambda: real_elapsed() + (100.0 if trainer.step >= 7 else clock[0])
    trainer.fit()
    assert trainer.step == 7 and trainer.epoch < 50
    assert trainer.history.val_loss[-1][0] == 7  # validated where the budget stopped it
    assert trainer.progress() == 1.0  # so the linear schedule's rate is 0 from here on
    state = load_checkpoint(tmp_path / "last.pt")
    assert state["step"] == 7 and state["train_seconds"] >= 100.0
    resumed = _trainer(tmp_path, epochs=50, schedule="linear", time_budget=10.0)
    resumed.load_checkpoint(tmp_path / "last.pt")
    assert resumed.train_seconds == state["train_seconds"]
    resumed.fit()  # the budget is spent: nothing more to do
    assert resumed.step == 7
    with pytest.raises(ValueError, match="time_budget must be a positive number"):
        _trainer(time_budget=0)


def test_embed_init_normal_gives_unit_scale_embeddings():
    d, V = 256, 8000
    xavier = Transformer(TransformerConfig.small(src_vocab_size=V, tgt_vocab_size=V))
    normal = Transformer(TransformerConfig.small(src_vocab_size=V, tgt_vocab_size=V,
                                                 embed_init="normal"))

    def rms(model):
        return float((model.src_embed.weight.detach() * math.sqrt(d)).pow(2).mean().sqrt())

    sinusoids = float(PositionalEncoding(d, 512, 0.0).pe.pow(2).mean().sqrt())
    assert abs(rms(xavier) - math.sqrt(2 / (V + d)) * math.sqrt(d)) < 0.01  # ~0.25
    assert abs(rms(normal) - 1.0) < 0.01
    assert rms(xavier) < sinusoids < rms(normal)  # ~0.25 < ~0.71 < 1.0
    # shared and tied: one matrix, drawn once
    assert normal.generator.weight is normal.src_embed.weight is normal.tgt_embed.weight
    with pytest.raises(ValueError, match="embed_init must be"):
        TransformerConfig.tiny(embed_init="uniform")


SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k"
DATA = os.environ.get("MULTI30K_DIR") or (str(SHARED) if SHARED.is_dir() else None)


@pytest.mark.skipif(DATA is None, reason="no local Multi30k copy (set MULTI30K_DIR)")
def test_cli_preset_cpu_sets_the_recipe(tmp_path):
    """`train --preset cpu` trains TransformerConfig.cpu() with TrainConfig.cpu()'s recipe, and a
    flag given beside it still wins."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MULTI30K_DIR": DATA,
           "TRANSFORMER_BOOK_CACHE": str(tmp_path / "cache")}
    run = subprocess.run(
        [sys.executable, "-m", "transformer_book", "train", "--preset", "cpu", "--vocab-size",
         "500", "--train-limit", "64", "--max-steps", "2", "--warmup-steps", "50",
         "--checkpoint-dir", str(tmp_path / "run"), "--device", "cpu", "--no-progress"],
        capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr
    state = load_checkpoint(tmp_path / "run" / "last.pt")
    recipe, given = TrainConfig.cpu(), state["train_config"]
    for name in ("max_tokens", "lr_factor", "schedule", "time_budget", "epochs"):
        assert given[name] == getattr(recipe, name), name
    assert given["warmup_steps"] == 50 and state["step"] == 2
    assert state["model_config"]["embed_init"] == "normal"
    assert state["model_config"]["d_model"] == TransformerConfig.cpu().d_model
    assert 0 < state["train_seconds"] < recipe.time_budget


def test_recipe_fields_are_what_cpu_changes():
    """TrainConfig.RECIPE_FIELDS (what `--preset cpu` fills in) lists exactly the fields that
    TrainConfig.cpu() sets away from the defaults."""
    changed = {f.name for f in dataclasses.fields(TrainConfig)
               if getattr(TrainConfig.cpu(), f.name) != getattr(TrainConfig(), f.name)}
    assert changed == set(TrainConfig.RECIPE_FIELDS)
