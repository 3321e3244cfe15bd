"""Where a training run stands, and what it has measured: what a checkpoint must hold, beside
the weights and the optimiser, for a resumed run to continue exactly (not in the paper).

:class:`RunState` is the position (optimiser steps done, the epoch, the batches of that epoch
already trained on), the :class:`History` of losses, learning rates and throughput, and, in its
state dict, the states of the random number generators (dropout and the batch order must
continue as if the run had never stopped).
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass, field

import torch

from transformer_book.checkpoint import _as_tuple


@dataclass
class History:
    """What a run measured: (step, value) pairs, plus throughput."""

    train_loss: list[tuple[int, float]] = field(default_factory=list)  # smoothed, per target token
    val_loss: list[tuple[int, float]] = field(default_factory=list)  # unsmoothed NLL per token
    lr: list[tuple[int, float]] = field(default_factory=list)
    tokens_per_second: list[tuple[int, float]] = field(default_factory=list)  # target tokens

    def as_dict(self) -> dict:
        return {k: [list(p) for p in v] for k, v in dataclasses.asdict(self).items()}

    @classmethod
    def from_dict(cls, d: dict) -> History:
        return cls(**{k: [tuple(p) for p in v] for k, v in d.items()})


@dataclass
class RunState:
    """The position of a run in its data, and its history.

    ``batch_in_epoch`` counts the batches of the current epoch over all processes (the global
    batch index, see :func:`~transformer_book.distributed.shard_steps`), so a run can resume
    with another number of processes.
    """

    step: int = 0  # optimiser steps done
    epoch: int = 0  # the current epoch (= epochs complete)
    batch_in_epoch: int = 0  # batches of the current epoch already trained on
    history: History = field(default_factory=History)

    def state_dict(self) -> dict:
        """The position, the history and the RNG states (torch, Python's, every CUDA device's),
        as plain data that ``torch.load(weights_only=True)`` reads."""
        rng = {"torch": torch.get_rng_state(), "python": random.getstate()}
        if torch.cuda.is_available():
            rng["cuda"] = torch.cuda.get_rng_state_all()
        return {"step": self.step, "epoch": self.epoch, "batch_in_epoch": self.batch_in_epoch,
                "rng": rng, "history": self.history.as_dict()}

    def load_state_dict(self, state: dict) -> None:
        """Continue from :meth:`state_dict` (a checkpoint holds its entries): the position, the
        history, and the RNG states (CUDA's where this machine has CUDA)."""
        self.step, self.epoch = state["step"], state["epoch"]
        self.batch_in_epoch = state["batch_in_epoch"]
        self.history = History.from_dict(state["history"])
        rng = state["rng"]
        torch.set_rng_state(rng["torch"].cpu())
        random.setstate(_as_tuple(rng["python"]))
        if "cuda" in rng and torch.cuda.is_available():
            torch.cuda.set_rng_state_all([s.cpu() for s in rng["cuda"]])
