"""Run records: every training run appends what it measures to ``metrics.jsonl`` beside its
checkpoints, one JSON object a line, and :func:`plot_run` draws the curves chapter 8 draws.

A line holds ``step`` and one or more of: ``loss`` (label-smoothed training loss per target
token) with ``lr``, ``val_loss`` (plain cross-entropy per target token) with ``epoch``,
``tokens_per_second`` (target tokens, whole epoch) with ``epoch``, ``bleu`` with ``split`` and
``beam_size`` (written by ``python -m transformer_book bleu``). A resumed run repeats the steps
after its last checkpoint; readers keep the last line for each step and quantity.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

__all__ = ["METRICS_FILE", "append_metrics", "plot_run", "read_metrics"]

METRICS_FILE = "metrics.jsonl"


def append_metrics(path: str | os.PathLike, records: list[dict]) -> None:
    """Append ``records`` to the JSONL file at ``path`` (created with its folder if missing)."""
    if not records:
        return
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = "".join(json.dumps(r, allow_nan=True) + "\n" for r in records)
    with open(path, "a", encoding="utf-8") as f:  # one write: lines from one call stay together
        f.write(lines)


def read_metrics(path: str | os.PathLike) -> dict[str, list[tuple[int, float]]]:
    """{quantity: [(step, value), ...]} sorted by step; for a step logged twice (a resumed run)
    the later line wins. A truncated last line (a run killed mid-write) is skipped."""
    path = Path(path)
    if path.is_dir():
        path = path / METRICS_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file; a training run with --checkpoint-dir "
                                f"writes {METRICS_FILE} there")
    series: dict[str, dict[int, float]] = {}
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue  # an interrupted write; the rest of the file is still good
            step = record.get("step")
            if not isinstance(step, int):
                raise ValueError(f"{path}, line {number}: no integer 'step' field")
            for key, value in record.items():
                if key != "step" and isinstance(value, int | float) and not isinstance(value, bool):
                    suffix = f"[{record['split']}]" if key == "bleu" and "split" in record else ""
                    series.setdefault(key + suffix, {})[step] = float(value)
    return {k: sorted(v.items()) for k, v in series.items()}


def plot_run(run_dir: str | os.PathLike, out: str | os.PathLike | None = None, window: int = 20):
    """Chapter 8's curves for a run folder: training loss (raw and running mean) and validation
    loss against step, and the learning rate. Saves to ``out`` if given; returns the figure."""
    import matplotlib.pyplot as plt
    import numpy as np

    series = read_metrics(run_dir)
    if "loss" not in series:
        raise ValueError(f"{run_dir}: {METRICS_FILE} holds no training loss yet")
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.8))
    steps, losses = zip(*series["loss"], strict=True)
    ax1.plot(steps, losses, alpha=0.3, label="training batch (label-smoothed)")
    w = max(1, min(window, len(losses)))
    running = np.convolve(losses, np.ones(w) / w, mode="valid")
    ax1.plot(steps[w - 1:], running, label=f"running mean of {w}")
    if "val_loss" in series:
        vs, vl = zip(*series["val_loss"], strict=True)
        ax1.plot(vs, vl, "o-", label="validation (cross-entropy)")
    ax1.set(xlabel="step", ylabel="loss (nats per target token)", title=f"{Path(run_dir).name}: loss")
    ax1.legend()
    if "lr" in series:
        ls, lr = zip(*series["lr"], strict=True)
        ax2.plot(ls, lr)
        ax2.set(xlabel="step", ylabel="learning rate", title="Eq. (3) schedule")
    else:
        ax2.set_axis_off()
    fig.tight_layout()
    if out is not None:
        fig.savefig(out, dpi=110)
    return fig
