"""Run records: training appends metrics.jsonl beside its checkpoints, a resume repeats no step
in what readers see, `bleu` adds its score, and `plot RUN_DIR` draws the curves."""

from __future__ import annotations

import json

import pytest
import torch
from transformer_book.runlog import append_metrics, plot_run, read_metrics

from tests.test_corpus import DE, EN, write


def test_read_keeps_the_last_line_per_step_and_skips_a_torn_line(tmp_path):
    log = tmp_path / "metrics.jsonl"
    append_metrics(log, [{"step": 1, "loss": 5.0, "lr": 1e-4}, {"step": 2, "loss": 4.0, "lr": 2e-4}])
    append_metrics(log, [{"step": 2, "loss": 3.9, "lr": 2e-4}, {"step": 2, "epoch": 1, "val_loss": 4.5}])
    with open(log, "a") as f:
        f.write('{"step": 3, "lo')  # killed mid-write
    series = read_metrics(tmp_path)
    assert series["loss"] == [(1, 5.0), (2, 3.9)]
    assert series["val_loss"] == [(2, 4.5)]
    with pytest.raises(FileNotFoundError, match="metrics.jsonl"):
        read_metrics(tmp_path / "nothing")


def test_training_writes_metrics_and_plot_draws_them(tmp_path, monkeypatch, capsys):
    from transformer_book.__main__ import main

    monkeypatch.setenv("TRANSFORMER_BOOK_CACHE", str(tmp_path / "cache"))
    torch.set_num_threads(1)
    files = []
    for split, reps in (("train", 30), ("valid", 2)):
        files += [f"--{split}-src", str(write(tmp_path, f"{split}.de", DE * reps)),
                  f"--{split}-tgt", str(write(tmp_path, f"{split}.en", EN * reps))]
    run = tmp_path / "run"
    args = ["train", "--preset", "tiny", "--epochs", "2", "--vocab-size", "120", "--max-tokens", "128",
            "--warmup-steps", "10", "--checkpoint-dir", str(run), "--no-progress", *files]
    assert main(args) == 0
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    state = torch.load(run / "last.pt", map_location="cpu", weights_only=True)
    steps = [r["step"] for r in lines if "loss" in r]
    assert steps == list(range(1, state["step"] + 1))  # every step, once, in order
    assert [r["epoch"] for r in lines if "val_loss" in r] == [1, 2]
    assert all(r["lr"] > 0 for r in lines if "loss" in r)
    assert sum("tokens_per_second" in r for r in lines) == 2
    # the logged losses are the history the checkpoint keeps
    assert [v for _, v in read_metrics(run)["loss"]] == [v for _, v in state["history"]["train_loss"]]

    assert main(["plot", str(run)]) == 0
    assert (run / "curves.png").stat().st_size > 10_000
    assert capsys.readouterr().out.strip().endswith("curves.png")
    fig = plot_run(run)
    assert fig.axes[0].get_xlabel() == "step"
    assert main(["plot", str(tmp_path / "missing")]) == 2

    # --overwrite starts a new record
    assert main(args + ["--overwrite", "--epochs", "1"]) == 0
    assert max(r["step"] for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())) \
        == torch.load(run / "last.pt", map_location="cpu", weights_only=True)["step"]
