"""The experiment scripts' own logic (benchmarks/table3.py, depth_norm_sweep.py, experiments.py):
rows as the paper gives them, model choice on validation only, aggregation with spread."""

from __future__ import annotations

import json
import math

import depth_norm_sweep
import pytest
import table3
from experiments import choose_on_val, mean_and_spread
from transformer_book.train import noam_lr


def bleu_rows(val_last, val_mean, test_last, test_mean):
    rows = []
    for weights, val, test in [("last", val_last, test_last), ("mean of last 5", val_mean, test_mean)]:
        rows += [{"weights": weights, "split": "val", "decoding": "beam 4", "bleu": val},
                 {"weights": weights, "split": "test_2016_flickr", "decoding": "beam 4", "bleu": test}]
    return rows


def test_choice_uses_validation_only():
    # the averaged weights are better on val, worse on test: the choice must still be "mean"
    chosen = choose_on_val(bleu_rows(30.0, 31.0, 35.0, 33.0))
    assert chosen == {"weights": "mean of last 5", "val_bleu": 31.0, "test2016_bleu": 33.0}
    assert choose_on_val(bleu_rows(31.0, 31.0, 1.0, 2.0))["weights"] == "last"  # tie: simpler


def test_mean_and_spread():
    assert mean_and_spread([1.0, 3.0, None]) == {"mean": 2.0, "min": 1.0, "max": 3.0,
                                                 "std": round(math.sqrt(2), 3), "n": 2}
    assert mean_and_spread([None])["n"] == 0


def test_table3_rows_match_the_paper():
    assert len(table3.PAPER_TABLE3) == 19
    assert table3.PAPER_TABLE3["base"][1:] == (4.92, 25.8, 65)
    assert table3.PAPER_TABLE3["C1"] == ({"num_layers": 2}, 6.11, 23.7, 36)
    assert table3.PAPER_TABLE3["D3"][0] == {"label_smoothing": 0.0}
    assert table3.select_rows("base,A,C3") == ["base", "A1", "A2", "A3", "A4", "C3"]
    with pytest.raises(SystemExit, match="unknown row"):
        table3.select_rows("Z9")


def test_table3_argv_and_unsupported_rows():
    argv = table3.row_argv("E", ["--preset", "base"], seed=1)
    assert argv[-1] == "--learned-positions" and "--seed" in argv and argv[argv.index("--seed") + 1] == "1"
    assert table3.row_argv("A1", [], 0)[-2:] == ["--num-heads", "1"]
    assert table3.row_argv("B1", [], 0)[-2:] == ["--d-key", "16"]  # d_k alone (Table 3 B)
    assert all(table3.row_argv(row, [], 0) is not None for row in table3.PAPER_TABLE3)


def test_table3_aggregate(tmp_path):
    for seed, (ppl, bleu) in enumerate([(5.0, 30.0), (6.0, 32.0)]):
        (tmp_path / f"base-s{seed}.json").write_text(json.dumps(
            {"val_ppl": ppl, "test2016_bleu": bleu, "diverged": False, "train_seconds": 10.0,
             "params": 1000}))
    base = next(r for r in table3.aggregate(tmp_path) if r["row"] == "base")
    assert base["seeds"] == [0, 1] and base["params"] == 1000
    assert base["test2016_bleu"]["mean"] == 31.0 and base["test2016_bleu"]["per_seed"] == {0: 30.0, 1: 32.0}
    assert base["paper_bleu"] == 25.8


def test_sweep_lr_factor_gives_the_requested_peak():
    for peak, warmup in [(7e-4, 4000), (3.5e-4, 1000)]:
        factor = depth_norm_sweep.lr_factor(peak, warmup)
        assert noam_lr(warmup, 512, warmup, factor) == pytest.approx(peak)
