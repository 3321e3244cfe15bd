"""benchmarks/time_to_bleu.py: its smoke test runs both recipes end to end and writes its record."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import time_to_bleu as script
import torch

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data" / "multi30k"
DATA = os.environ.get("MULTI30K_DIR") or (str(SHARED) if SHARED.is_dir() else None)


def test_fast_recipe_is_the_cpu_presets_with_its_changes():
    from transformer_book.config import TrainConfig, TransformerConfig

    fast = script.RECIPES["fast"]
    model, train = TransformerConfig.cpu(), TrainConfig.cpu()
    assert (fast.d_model, fast.d_ff, fast.embed_init, fast.dropout) == (
        model.d_model, model.d_ff, model.embed_init, model.dropout)
    assert (fast.max_tokens, fast.warmup_steps, fast.lr_factor, fast.schedule) == (
        train.max_tokens, train.warmup_steps, train.lr_factor, train.schedule)
    assert (fast.num_layers, model.num_layers) == (2, 3)  # 2 + 2 layers instead of 3 + 3
    assert (fast.bf16, fast.time_budget, fast.flush_denormal) == (True, 270.0, False)


@pytest.mark.skipif(DATA is None, reason="no local Multi30k copy (set MULTI30K_DIR)")
def test_tutorial_recipe_is_the_pytorch_tutorials():
    tutorial = script.RECIPES["tutorial"]
    assert (tutorial.model, tutorial.d_model, tutorial.num_heads, tutorial.num_layers,
            tutorial.d_ff, tutorial.dropout) == ("nn.Transformer", 512, 8, 3, 512, 0.1)
    assert (tutorial.schedule, tutorial.lr, tutorial.label_smoothing) == ("constant", 1e-4, 0.0)
    assert tutorial.embed_init == "xavier"


def _small_run(script, name, eval_every, budget, pairs=300):
    """What run() needs for a tiny recipe `name` on the first `pairs` training pairs."""
    from transformer_book.data import load_multi30k
    from transformer_book.tokenizer import load_or_train_tokenizer

    args = script.argparse.Namespace(device="cpu", eval_every=eval_every,
                                     reference_eval_every=eval_every, val_target=100.0,
                                     target=30.0, no_test=True)
    recipe = script.dataclasses.replace(script.RECIPES[name], time_budget=budget, d_model=64,
                                        d_ff=64, num_layers=1, num_heads=4)
    data = {k: load_multi30k(n, DATA) for k, n in (("train", "train"), ("val", "val"))}
    data["train"] = script.dataclasses.replace(data["train"], src=data["train"].src[:pairs],
                                               tgt=data["train"].tgt[:pairs])
    data["val"] = script.dataclasses.replace(data["val"], src=data["val"].src[:3],
                                             tgt=data["val"].tgt[:3])
    tokenizer = load_or_train_tokenizer(load_multi30k("train", DATA), vocab_size=8000)
    return args, recipe, data, tokenizer


@pytest.mark.skipif(DATA is None, reason="no local Multi30k copy (set MULTI30K_DIR)")
def test_evaluations_pause_the_epoch_instead_of_restarting_it():
    """The batches trained on are epoch 0's in order, then epoch 1's, ...: an evaluation in the
    middle of an epoch resumes it where it stopped (the script's own loop once restarted it)."""
    from transformer_book.step import TrainStep

    args, recipe, data, tokenizer = _small_run(script, "fast", eval_every=0.3, budget=3.0,
                                               pairs=600)
    corpora, seen = [], []
    real_prepare, real_step = script.prepare_run_data, TrainStep.accumulate

    def prepare(*a, **k):
        prepared = real_prepare(*a, **k)
        corpora.append(prepared.train)
        return prepared

    def spy(self, parts, world_size=1):
        seen.extend(batch.src.clone() for batch, _ in parts)
        return real_step(self, parts, world_size)

    script.prepare_run_data, TrainStep.accumulate = prepare, spy
    try:
        result = script.run(recipe, args, data, tokenizer)
    finally:
        script.prepare_run_data, TrainStep.accumulate = real_prepare, real_step
    (train,) = corpora
    per_epoch = train.num_batches(0)
    assert len(result["evaluations"]) >= 3 and len(seen) == result["steps"]
    # evaluations fell inside an epoch
    assert any(e["step"] % per_epoch for e in result["evaluations"][:-1])
    expected, done = [], 0
    while len(expected) < len(seen):
        expected += [b.src for b in train.batches(done)]
        done += len(expected) <= len(seen)  # epochs completed within the run
    assert all(torch.equal(a, b) for a, b in zip(seen, expected, strict=False))
    assert int(result["epochs"]) == done


@pytest.mark.skipif(DATA is None, reason="no local Multi30k copy (set MULTI30K_DIR)")
def test_budget_becomes_steps():
    """The time budget is planned once as a number of steps (the Trainer's TimePlan); the run
    takes exactly those steps, and the evaluations do not count."""
    args, recipe, data, tokenizer = _small_run(script, "fast", eval_every=0.5, budget=4.0)
    result = script.run(recipe, args, data, tokenizer)
    plan = result["time_plan"]
    assert plan["budget"] == 4.0 and plan["steps"] == result["steps"] > 20
    assert abs(result["train_seconds"] - 4.0) < 2.0  # the planned pace held roughly


@pytest.mark.skipif(DATA is None, reason="no local Multi30k copy (set MULTI30K_DIR)")
def test_constant_schedule_keeps_the_rate(tmp_path):
    """The tutorial's Adam runs at 1e-4 from the first step to the last."""
    from transformer_book.step import TrainStep

    args, recipe, data, tokenizer = _small_run(script, "tutorial", eval_every=1e9, budget=2.0)
    rates = []
    real_step = TrainStep.accumulate

    def spy(self, parts, world_size=1):
        rates.append(self.optimizer.param_groups[0]["lr"])
        return real_step(self, parts, world_size)

    TrainStep.accumulate = spy
    try:
        result = script.run(recipe, args, data, tokenizer)
    finally:
        TrainStep.accumulate = real_step
    assert result["steps"] == len(rates) > 1
    assert all(r == pytest.approx(1e-4, rel=1e-12) for r in rates)


def test_quick_run_writes_every_recipe(tmp_path):
    out = tmp_path / "time_to_bleu.json"
    script.main(["--quick", "--threads", "1", "--device", "cpu", "--data-dir", DATA,
                    "--out", str(out)])
    record = json.loads(out.read_text())
    assert [r["recipe"]["name"] for r in record["results"]] == ["fast", "standard", "tutorial"]
    for r in record["results"]:
        assert r["steps"] > 0 and r["train_seconds"] > 0 and r["evaluations"]
        assert 0 <= r["test2016_bleu_beam4"] <= 100
        assert r["sacrebleu_signature"].startswith("nrefs:1|case:mixed")
    assert "--quick" in record["command"]
    assert record["cpu"] == script.cpu_identity()  # the CPU generation: budgets are in seconds


def test_benchmarks_readme_states_the_stored_speed_runs():
    """The speed-run tables of benchmarks/README.md are the stored records' figures."""
    import json
    import re

    folder = ROOT / "benchmarks" / "results" / "cpu-2026-11-24"
    readme = (ROOT / "benchmarks" / "README.md").read_text()

    def row(name):  # the table row that names the record or the recipe
        line = next(line for line in readme.splitlines() if line.startswith(f"| {name}"))
        return [cell.strip() for cell in line.strip("|").split("|")]

    for file in ("time_to_bleu.json", "time_to_bleu_fast.json", "time_to_bleu_seed1.json"):
        record = json.loads((folder / file).read_text())
        fast = record["results"][0]
        assert fast["recipe"]["name"] == "fast" and fast["reached_target"]
        cells = row(f"`{file}`")
        assert cells[1:] == [str(fast["recipe"]["seed"]), f"{fast['train_seconds']:.0f} s",
                             f"{fast['steps']:,}", f"{fast['epochs']:.2f}",
                             f"{fast['tokens_per_second']:,}",
                             f"{fast['evaluations'][-1]['val_bleu_greedy']:.2f}",
                             f"{fast['test2016_bleu_beam4']:.2f}"], file
        assert fast["train_seconds"] <= 600
    references = json.loads((folder / "time_to_bleu.json").read_text())["results"][1:]
    assert [r["recipe"]["name"] for r in references] == ["standard", "tutorial"]
    for ref in references:
        cells = row(f"`{ref['recipe']['name']}`")
        assert cells[1:] == [f"{ref['parameters']:,}", f"{ref['steps']:,}",
                             f"{ref['tokens_per_second']:,}",
                             f"{ref['evaluations'][-1]['val_bleu_greedy']:.2f}",
                             f"{ref['test2016_bleu_beam4']:.2f}"], ref["recipe"]["name"]
    dropout = json.loads((folder / "speedrun" / "7_fixed_loop_dropout0.1.json").read_text())
    scores = {round(e["train_seconds"]): e["val_bleu_greedy"]
              for e in dropout["results"][0]["evaluations"]}
    assert dropout["results"][0]["recipe"]["dropout"] == 0.1
    assert re.search(rf"{scores[360]:.2f} at 360 s and {scores[600]:.2f} at 600 s", readme)


def test_benchmarks_readme_states_the_five_minute_runs():
    """The five-minute recipe's table in benchmarks/README.md is the stored records' figures, and
    every run of it met the goal: test 2016 BLEU >= 30, its steps within 300 s (240 s on the
    215-s budget)."""
    import json

    folder = ROOT / "benchmarks" / "results" / "cpu-2026-11-27"
    readme = (ROOT / "benchmarks" / "README.md").read_text()
    section = readme[readme.index("(2026-11-27): the five-minute recipe"):]
    labels = {"time_to_bleu.json": "0", "time_to_bleu_seed1.json": "1",
              "time_to_bleu_float32.json": "0, float32",
              "time_to_bleu_stretch.json": "0, 215-s budget",
              "time_to_bleu_stretch_seed1.json": "1, 215-s budget"}
    for file, label in labels.items():
        fast = json.loads((folder / file).read_text())["results"][0]
        line = next(line for line in section.splitlines() if line.startswith(f"| `{file}`"))
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        assert cells[1:] == [label, f"{fast['time_plan']['budget']:.0f} s",
                             f"{fast['train_seconds']:.0f} s", f"{fast['steps']:,}",
                             f"{fast['epochs']:.2f}", f"{fast['tokens_per_second']:,}",
                             f"{fast['evaluations'][-1]['val_bleu_greedy']:.2f}",
                             f"{fast['test2016_bleu_beam4']:.2f}"], file
        limit = 240 if "stretch" in file else 300
        assert fast["test2016_bleu_beam4"] >= 30 and fast["train_seconds"] <= limit, file
        assert fast["recipe"]["num_layers"] == 2 and fast["recipe"]["bf16"] == ("float32" not in file)


def test_benchmarks_readme_states_the_settled_plan_runs():
    """The settled time plan's figures in benchmarks/README.md are the stored records' (the CPU
    rerun of seed 0, and chapter 8's full configuration on an H200 with both plans)."""
    import json

    results = ROOT / "benchmarks" / "results"
    readme = " ".join((ROOT / "benchmarks" / "README.md").read_text().split())
    cpu = json.loads((results / "cpu-2026-11-27" / "time_to_bleu_settled.json").read_text())
    run = cpu["results"][0]
    assert run["recipe"]["seed"] == 0 and run["recipe"]["num_layers"] == 2
    assert (f"{run['steps']:,} steps planned at {run['time_plan']['pace']:.3f} s a step, which "
            f"took {run['train_seconds']:.1f} s") in readme
    assert f"test 2016 {run['test2016_bleu_beam4']:.2f}" in readme
    final = json.loads((results / "cpu-2026-11-27" / "time_to_bleu_settled_final.json").read_text())
    run = final["results"][0]
    assert run["recipe"] == cpu["results"][0]["recipe"]
    assert (f"planned at step {run['time_plan']['at']}, {run['steps']:,} steps at "
            f"{run['time_plan']['pace']:.3f} s a step, which took {run['train_seconds']:.1f} s "
            f"({round(100 * (run['train_seconds'] / 270 - 1))}% over), test 2016 "
            f"{run['test2016_bleu_beam4']:.2f}") in readme
    gpu = results / "h200-2026-11-27"
    early = json.loads((gpu / "time_to_bleu_full180_plan_steps5to20.json").read_text())["results"][0]
    settled = json.loads((gpu / "time_to_bleu_full180.json").read_text())["results"][0]
    assert early["time_plan"]["budget"] == settled["time_plan"]["budget"] == 180
    assert f"stopped after {early['train_seconds']:.0f} s of its 180" in readme
    assert (f"{settled['steps']:,} steps at {settled['time_plan']['pace']:.3f} s a step in "
            f"{settled['train_seconds']:.0f} s") in readme
    first40 = next(e for e in settled["evaluations"] if e["val_bleu_greedy"] >= 40)
    assert f"after {first40['train_seconds']:.0f} s of training" in readme
    assert f"{settled['test2016_bleu_beam4']:.2f} on test 2016" in readme
