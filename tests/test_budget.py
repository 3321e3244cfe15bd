"""The short-budget recipe's pieces: the linear schedule, the time budget, the embedding scale."""

import math
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformer_book.batching import BatchedCorpus
from transformer_book.checkpoint import load_checkpoint
from transformer_book.config import TransformerConfig
from transformer_book.model import Transformer
from transformer_book.positional import PositionalEncoding
from transformer_book.train import (
    TrainConfig,
    Trainer,
    linear_lr,
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
    assert steps[-1] == total == trainer.step
    peak = noam_lr(5, 64, 5)
    assert max(rates) <= peak and max(rates) > 0.7 * peak
    # the rate logged at step s is the one step s used: linear_lr with the progress before it
    for s, rate in trainer.history.lr:
        assert rate == pytest.approx(linear_lr(s, 64, 5, progress=(s - 1) / total), rel=1e-12)
    # after the warm-up the rate falls every step, and the rate set after the last step is 0
    after = rates[5:]
    assert all(b < a for a, b in zip(after, after[1:], strict=False))
    assert trainer.scheduler.get_last_lr()[0] == pytest.approx(0.0, abs=1e-12)


def test_a_resume_with_other_batches_per_step_counts_the_steps_left(tmp_path):
    """Resumed after epoch 1 with another accumulate (or another number of processes), the run
    takes the steps done plus the steps left at its batches per step, and its linear rate still
    ends at 0 on its last step."""
    first = _trainer(tmp_path, epochs=1, schedule="linear")
    first.fit()
    shutil.copy(tmp_path / "last.pt", tmp_path / "epoch1.pt")
    done, batches = first.step, first.train_data.num_batches(1)
    for accumulate in (2, 1, 3):
        resumed = _trainer(tmp_path, epochs=2, schedule="linear", accumulate=accumulate)
        resumed.load_checkpoint(tmp_path / "epoch1.pt")
        steps = done + -(-batches // accumulate)
        assert resumed.epoch == 1 and resumed.total_steps() == steps
        resumed.fit()
        assert resumed.epoch == 2 and resumed.step == steps, accumulate
        assert resumed.scheduler.get_last_lr()[0] == pytest.approx(0.0, abs=1e-12)


def test_constant_schedule_warms_up_then_holds_the_peak():
    trainer = _trainer(schedule="constant", epochs=2)
    trainer.fit()
    rates = [rate for _, rate in trainer.history.lr]
    peak = noam_lr(5, 64, 5)
    assert rates[:5] == pytest.approx([peak * s / 5 for s in range(1, 6)], rel=1e-12)
    assert len(rates) > 10 and rates[5:] == pytest.approx([peak] * (len(rates) - 5), rel=1e-12)


class FakeTime:
    """A clock for the trainer: every training step takes ``per_step`` seconds."""

    def __init__(self, trainer, per_step):
        self.t, self.per_step = 0.0, per_step
        trainer.clock.now = lambda: self.t
        trainer.after_step = self.tick

    def tick(self):
        self.t += self.per_step


def _timed(tmp_path=None, per_step=1.0, **overrides):
    settings = dict(epochs=50, schedule="linear", time_budget=60.0, checkpoint_every=10)
    trainer = _trainer(tmp_path, **{**settings, **overrides})
    FakeTime(trainer, per_step)
    return trainer


def test_time_budget_becomes_steps_once_and_the_rate_never_reads_the_clock(tmp_path):
    slow = _timed(per_step=1.0)
    slow.fit()
    # planned once the pace settled (1 s a step: after two 10-s half-windows): 60 s, 60 steps
    at = slow.plan.at
    assert slow.plan.steps == 60 == slow.step and slow.epoch < 50 and 20 <= at <= 22
    assert slow.history.val_loss[-1][0] == 60  # validated where the run ended
    assert slow.scheduler.get_last_lr()[0] == pytest.approx(0.0, abs=1e-12)  # decayed to 0
    # the rate used at step s: progress 0 until the plan exists (it is made at the end of step
    # `at`, after the rate of step at + 1 was set), then the share of the steps from `at` to
    # the plan's end: no jump when the plan is made
    for s, rate in slow.history.lr:
        progress = 0.0 if s <= at + 1 else (s - 1 - at) / (60 - at)
        assert rate == pytest.approx(linear_lr(s, 64, 5, progress=progress), rel=1e-12), s
    # a machine twice as fast plans twice the steps ...
    fast = _timed(per_step=0.5)
    fast.fit()
    assert fast.plan.steps == 120 == fast.step
    # ... and given the same plan (max_steps), the rates do not depend on the pace at all
    a, b = (_trainer(epochs=50, schedule="linear", max_steps=40) for _ in range(2))
    FakeTime(a, 1.0), FakeTime(b, 0.5)
    a.fit(), b.fit()
    assert a.history.lr == b.history.lr and len(a.history.lr) == 40
    # a run stopped and resumed (on a machine twice as fast) gets the rates of the whole run
    first = _timed(tmp_path, per_step=1.0)
    clock = FakeTime(first, 1.0)
    first.after_step = lambda: (clock.tick(), setattr(first, "stop_requested", first.step == 30))
    first.fit()
    assert first.step == 30 and first.plan.steps == 60 and first.plan.at == at
    shutil.copy(tmp_path / "last.pt", tmp_path / "step30.pt")
    resumed = _timed(tmp_path, per_step=0.5)
    resumed.load_checkpoint(tmp_path / "last.pt")
    assert resumed.plan.steps == 60 and resumed.clock.read() == 30.0
    resumed.fit()
    assert resumed.step == 60
    assert resumed.history.lr == slow.history.lr  # the same rate at every step
    state = load_checkpoint(tmp_path / "last.pt")
    assert state["step"] == 60 and state["time_plan"] == {"budget": 60.0, "steps": 60, "pace": 1.0,
                                                          "at": at}
    # resumed with another budget: replanned at once, at the stored pace (90 s: 90 steps)
    longer = _timed(tmp_path / "longer", time_budget=90.0)
    longer.load_checkpoint(tmp_path / "step30.pt")
    assert longer.plan.steps == 90
    short = _timed(time_budget=3.0)  # spent before the plan would be made: ends at once
    short.fit()
    assert short.step == short.plan.steps == 3
    again = _timed(tmp_path)
    again.load_checkpoint(tmp_path / "last.pt")
    again.fit()  # the plan is spent: nothing more to do
    assert again.step == 60
    with pytest.raises(ValueError, match="time_budget must be a positive number"):
        _trainer(time_budget=0)


def test_time_plan_waits_for_the_pace_to_settle():
    """A GPU's first steps are slow (each new batch shape); the plan's pace must not be theirs."""
    from transformer_book.distributed import Context
    from transformer_book.schedule import MIN_HALF, PLAN_LATEST, PLAN_SHARE, TimePlan

    def plan(budget, seconds_of_step):
        p, t, step = TimePlan(budget), 0.0, 0
        while p.waiting():
            step += 1
            t += seconds_of_step(step, t)
            p.update(step, t, Context())
        return p, step, t

    # 10 steps of 2 s, then 0.5 s a step: 600 s hold 10 + 580 / 0.5 = 1,170 steps
    p, step, t = plan(600.0, lambda s, t: 2.0 if s <= 10 else 0.5)
    assert p.pace == pytest.approx(0.5) and p.steps == 1170
    assert t >= PLAN_SHARE * 600 and step > 20  # not before a tenth of the budget
    # a start that speeds up for 20 s, as chapter 8's full configuration did on an H200 (13
    # steps in the first 10 s, 80 in the next 10, then 0.031 s a step): planned after it
    p, step, t = plan(180.0, lambda s, t: 0.77 if s <= 13 else 0.125 if s <= 93 else 0.031)
    assert p.pace == pytest.approx(0.031) and 20 < t < 90
    assert p.steps == pytest.approx(93 + (180 - 13 * 0.77 - 80 * 0.125) / 0.031, abs=2)
    # ... on a short budget too: the half-windows last MIN_HALF seconds at least, longer than
    # the 10 s plateau at 0.125 s a step (planned at the latest, at half the budget)
    p, step, t = plan(60.0, lambda s, t: 0.77 if s <= 13 else 0.125 if s <= 93 else 0.031)
    assert MIN_HALF >= 10 and p.pace == pytest.approx(0.031) and t == pytest.approx(30, abs=0.1)
    # no slow start: the budget over the pace, whatever the budget
    for budget in (60.0, 270.0, 3000.0):
        p, _, _ = plan(budget, lambda s, t: 0.25)
        assert p.steps == pytest.approx(budget / 0.25, abs=1)
    # a pace that never settles (0.7 times the seconds a step every 5 s) is planned at half
    # the budget, at the pace of its last 5 s
    p, step, t = plan(100.0, lambda s, t: 0.1 * 0.7 ** (t // 5))
    assert PLAN_LATEST * 100 <= t < PLAN_LATEST * 100 + 0.1
    assert p.pace < 0.1 * 0.7**7
    # half the budget counts the run's seconds: resumed at 40 s of 100 before the plan was made,
    # it plans at 50 s; resumed at 95 s, within a window of the end, after 20 steps
    for resumed_at, planned_by in ((40.0, 50.1), (95.0, 97.1)):
        p, t = TimePlan(100.0), resumed_at
        step = 0
        while p.waiting():
            step, t = step + 1, t + 0.1 * 0.7 ** (t // 5)
            p.update(step, t, Context())
        assert t < planned_by and p.steps > step, resumed_at


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


@pytest.mark.parametrize("setting, message", [
    (dict(checkpoint_every=0), r"checkpoint_every must be in \[1, inf\), got 0"),
    (dict(eval_every=0), r"eval_every must be in \[1, inf\), got 0"),
    (dict(sync_every=0), r"sync_every must be in \[1, inf\), got 0"),
    (dict(label_smoothing=1.0), r"label_smoothing must be in \[0, 1\), got 1.0"),
    (dict(schedule="cosine"), r"schedule must be one of \('noam', 'linear', 'constant'\)"),
])
def test_train_config_checks_each_setting_against_its_valid_values(setting, message):
    """Not only the command line: a TrainConfig built in Python refuses what the flags refuse
    (checkpoint_every=0 once divided by zero in the loop)."""
    with pytest.raises(ValueError, match=message):
        TrainConfig(**setting)
