"""Run records: what a training run measures, in its history and appended to ``metrics.jsonl``
beside its checkpoints, one JSON object a line (:class:`RunLog`); :func:`plot_run` draws them.

A line holds ``step`` and one or more of: ``loss`` (label-smoothed training loss per target
token) with ``lr``, ``val_loss`` (plain cross-entropy per target token) with ``epoch``,
``tokens_per_second`` (target tokens, whole epoch) with ``epoch``, ``bleu`` with ``split`` and
``beam_size`` (written by ``python -m transformer_book bleu``). A resumed run repeats the steps
after its last checkpoint; readers keep the last line for each step and quantity.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import torch

from transformer_book.files import utf8_lines

__all__ = ["METRICS_FILE", "RunLog", "append_metrics", "plot_run", "read_metrics"]

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


class RunLog:
    """What a training run measures, as it goes: (step, value) pairs in the run's
    :class:`~transformer_book.train.History`, and lines of ``metrics.jsonl``. Each step's loss
    stays on the device until :meth:`read_losses` reads several in one transfer (on a GPU
    every read makes the host wait for the device; chapter 11).

    Args:
        run: the :class:`~transformer_book.train.Trainer` (its ``history``, read anew each time).
        folder: where ``metrics.jsonl`` goes, or None (no file).
        ranks: a :class:`~transformer_book.distributed.Context`, whose ranks' losses are summed.
    """

    def __init__(self, run, folder: str | os.PathLike | None, ranks):
        self.run, self.ranks = run, ranks
        self.path = None if folder is None else Path(folder) / METRICS_FILE
        self._pending: list[tuple[int, torch.Tensor]] = []  # (step, loss on the device)

    def write(self, records: list[dict]) -> None:
        if self.path is not None:
            append_metrics(self.path, records)

    def step(self, step: int, loss: torch.Tensor, lr: float) -> None:
        """Step ``step`` trained with learning rate ``lr``; its loss is read later."""
        self._pending.append((step, loss))
        self.run.history.lr.append((step, lr))

    @property
    def unread(self) -> int:
        """Steps whose loss has not been read yet."""
        return len(self._pending)

    def read_losses(self) -> list[float]:
        """Read the losses of the unread steps, in one transfer, into the history and the file.

        Raises:
            FloatingPointError: a loss is not finite (the run diverged).
        """
        pending, history, self._pending = self._pending, self.run.history, []
        if not pending:
            return []
        values = self.ranks.sum(torch.stack([loss for _, loss in pending])).tolist()
        lrs = dict(history.lr[-len(pending):])  # appended once per step, in step order
        for (step, _), value in zip(pending, values, strict=True):
            if not math.isfinite(value):
                raise FloatingPointError(
                    f"training loss is {value} at step {step}: the run diverged. Lower the "
                    "learning rate (lr_factor), lengthen the warm-up or clip gradients "
                    "(clip_grad_norm), then resume from the last checkpoint.")
            history.train_loss.append((step, value))
        self.write([{"step": step, "loss": value, "lr": lrs.get(step)}
                    for (step, _), value in zip(pending, values, strict=True)])
        return values

    def drop_unread(self) -> None:
        """Forget the losses not read yet (those of a loop that was interrupted)."""
        self._pending = []

    def validation(self, step: int, epoch: int, loss: float) -> None:
        self.run.history.val_loss.append((step, loss))
        self.write([{"step": step, "epoch": epoch, "val_loss": loss}])

    def epoch_end(self, step: int, passes: float, tokens_per_second: float, losses: list[float],
                  seconds: float, epochs: int, say: bool) -> None:
        """An epoch ended (or the run stopped inside one, ``passes`` epochs in): record its
        throughput; if ``say``, print one line with the mean training loss of its steps."""
        epoch = int(passes)
        self.run.history.tokens_per_second.append((step, tokens_per_second))
        self.write([{"step": step, "epoch": epoch, "tokens_per_second": tokens_per_second}])
        if say:
            val = self.run.history.val_loss[-1][1] if self.run.history.val_loss else float("nan")
            at = f"{epoch:3}" if passes == epoch else f"{passes:5.1f}"
            train = sum(losses) / len(losses) if losses else float("nan")
            print(f"epoch {at}/{epochs}  step {step:6}  train loss {train:.3f}  val loss "
                  f"{val:.3f}  {tokens_per_second:9,.0f} tok/s  {seconds:6.0f} s", flush=True)


def read_metrics(path: str | os.PathLike) -> dict[str, list[tuple[int, float]]]:
    """{quantity: [(step, value), ...]} sorted by step; for a step logged twice (a resumed run)
    the later line wins. A truncated last line (a run killed mid-write) is skipped."""
    path = Path(path)
    if path.is_dir():
        path = path / METRICS_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file; a training run writes {METRICS_FILE} "
                                "into its checkpoint folder")
    series: dict[str, dict[int, float]] = {}
    with open(path, "rb") as f:
        # a line torn mid-character by a killed run is skipped below, as any torn line
        for number, line in enumerate(utf8_lines(f, errors="replace"), start=1):
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
