"""Shared machinery of the experiment scripts (table3.py, depth_norm_sweep.py): run one training
configuration through train_bleu.py, keep one JSON file per run, and aggregate the runs.

One file per run means a sweep can be split over several commands (a GPU lease allows 10 minutes
per command) or several processes sharing one GPU, then aggregated; a run whose file exists is
not run again unless --rerun is given. Model choice uses the validation set only: of the two
weight sets train_bleu.py scores (the last epoch's, the mean of the last epochs'), the one with
the higher validation BLEU (beam 4) is reported, with its test 2016 BLEU.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from pathlib import Path

import train_bleu
from transformer_book.files import write_json


def choose_on_val(bleu_rows: list[dict], beam: int = 4) -> dict:
    """The weights whose validation BLEU (beam ``beam``) is highest, with their test 2016 BLEU.

    Never looks at test scores to choose. Returns {"weights", "val_bleu", "test2016_bleu"}.
    """
    decoding = "greedy" if beam == 1 else f"beam {beam}"
    val = {r["weights"]: r["bleu"] for r in bleu_rows if r["split"] == "val" and r["decoding"] == decoding}
    test = {r["weights"]: r["bleu"] for r in bleu_rows
            if r["split"] == "test_2016_flickr" and r["decoding"] == decoding}
    if not val:
        raise ValueError(f"no validation BLEU with {decoding} among the rows")
    best = max(val, key=lambda w: (val[w], w == "last"))  # ties: the simpler choice, last weights
    return {"weights": best, "val_bleu": val[best], "test2016_bleu": test.get(best)}


def run_one(argv: list[str], out: Path, rerun: bool = False) -> dict:
    """Train and score one configuration (train_bleu.py's arguments); write and return its record.

    A run whose loss diverges (train_bleu raises FloatingPointError) is recorded as diverged,
    with no BLEU, rather than stopping the sweep.
    """
    if out.exists() and not rerun:
        print(f"{out} exists: skipped (use --rerun to train again)")
        return json.loads(out.read_text())
    start = time.perf_counter()
    try:
        result = train_bleu.main(argv)
        chosen = choose_on_val(result["bleu"])
        record = {"argv": argv, "diverged": False, **chosen,
                  "best_val_loss": result["best_val_loss"],
                  "val_ppl": round(math.exp(result["best_val_loss"]), 3),
                  "params": result["parameters"], "steps": result["steps"],
                  "epochs_run": result["epochs_run"], "train_seconds": result["train_seconds"],
                  "hardware": result["hardware"], "signature": result["signature"],
                  "model_config": result["model_config"], "train_config": result["train_config"],
                  "bleu": result["bleu"]}
    except FloatingPointError as err:
        record = {"argv": argv, "diverged": True, "error": str(err), "weights": None,
                  "val_bleu": None, "test2016_bleu": None, "best_val_loss": None, "val_ppl": None,
                  "train_seconds": round(time.perf_counter() - start, 1)}
    write_json(out, record)
    return record


def mean_and_spread(values: list[float | None]) -> dict:
    """Mean, min, max and (with 2+ values) sample standard deviation of the non-missing values."""
    xs = [v for v in values if v is not None]
    if not xs:
        return {"mean": None, "min": None, "max": None, "std": None, "n": 0}
    return {"mean": round(statistics.fmean(xs), 3), "min": min(xs), "max": max(xs),
            "std": round(statistics.stdev(xs), 3) if len(xs) > 1 else None, "n": len(xs)}
