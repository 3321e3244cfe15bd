"""Everything a training run holds, and what its checkpoint keeps (Sec. 5; checkpoints are not
in the paper): the model (and its DDP replica over several processes), Adam and the schedule of
Eq. (3) (Sec. 5.3), the training step with its precision, the run's position and history, its
clock and time budget, the weights kept for averaging (Sec. 6.1).

:class:`TrainingRun` builds these from a :class:`~transformer_book.config.TrainConfig` and turns
them into a checkpoint and back (:meth:`~TrainingRun.state_dict`,
:meth:`~TrainingRun.load_checkpoint`); :class:`~transformer_book.trainer.Trainer` adds the loop
that trains it.
"""

from __future__ import annotations

import dataclasses
import os

import torch
from torch import nn

from transformer_book.batching import BatchedCorpus
from transformer_book.budget import Budget, Clock
from transformer_book.checkpoint import (
    CHECKPOINT_FORMAT,
    TRAINING_KEYS,
    EpochWeights,
    _config_dict,
    atomic_torch_save,
    check_keys,
    load_checkpoint,
    load_weights_into,
)
from transformer_book.config import TrainConfig
from transformer_book.distributed import Context, data_parallel, rank_seed
from transformer_book.distributed import current as distributed_current
from transformer_book.run_state import RunState
from transformer_book.runlog import RunLog
from transformer_book.schedule import make_optimizer
from transformer_book.step import TrainStep, autocast_dtype
from transformer_book.utils import get_device


def _in_run_state(name: str) -> property:
    """``self.<name>`` reads and sets ``self.run.<name>`` (the run's :class:`RunState`)."""
    return property(lambda self: getattr(self.run, name),
                    lambda self, value: setattr(self.run, name, value))


class TrainingRun:
    """A model, its optimiser and schedule, its training step, and where its training stands.

    Args:
        model: maps ``(src (B, S), tgt_in (B, T))`` to logits (B, T, V), like
            :class:`transformer_book.model.Transformer`.
        train_data: training batches (:class:`~transformer_book.batching.BatchedCorpus`).
        config: the run's settings (default: ``TrainConfig()``).
        d_model: for Eq. (3); defaults to ``model_config.d_model``.
        val_data: validation batches (unshuffled), or None.
        model_config: the model's config (a dataclass or dict), stored in checkpoints as a
            plain dict so a checkpoint can rebuild its model.
        extra: more plain data to store in checkpoints (e.g. ``{"tokenizer": tok.to_str()}``).
        distributed: this process's place in a multi-process run (default: the process group
            joined with :func:`~transformer_book.distributed.init`, if any). Each step then
            takes ``world_size * accumulate`` consecutive batches; rank 0 alone writes
            checkpoints, metrics and progress.
    """

    step, epoch, batch_in_epoch, history = map(_in_run_state, ("step", "epoch", "batch_in_epoch",
                                                               "history"))

    def __init__(self, model: nn.Module, train_data: BatchedCorpus,
                 config: TrainConfig | None = None, *, d_model: int | None = None,
                 val_data: BatchedCorpus | None = None, model_config=None,
                 extra: dict | None = None, distributed: Context | None = None):
        config = TrainConfig() if config is None else config
        self.device = get_device(config.device)
        self.model = model.to(self.device)
        self.dist = distributed_current() if distributed is None else distributed
        if config.accumulate < 1:
            raise ValueError(f"accumulate must be >= 1, got {config.accumulate}")
        self.train_data, self.val_data = train_data, val_data
        self.model_config, self.extra = _config_dict(model_config), dict(extra or {})
        if d_model is None and "d_model" not in (self.model_config or {}):
            raise ValueError("pass d_model= or a model_config with a d_model field")
        self.d_model = self.model_config["d_model"] if d_model is None else d_model
        self.pad_id = train_data.pad_id
        self.run, self.clock = RunState(), Clock()  # where the run stands; its training time
        self.budget = Budget(config, train_data, self.dist.world_size * config.accumulate,
                             elapsed=lambda: self.elapsed())
        self.config = config
        cuda = self.device.type == "cuda"  # the speed flags left at None switch on there
        self.optimizer, self.scheduler = make_optimizer(
            self.model, self.d_model, config.warmup_steps, config.lr_factor,
            fused=cuda if config.fused_adam is None else config.fused_adam,
            schedule=config.schedule, progress=self.budget.progress)
        self.sync_every = config.sync_every or (50 if cuda else 1)
        self.prefetch = cuda if config.prefetch is None else config.prefetch
        self.stop_requested = False  # set (e.g. on SIGINT) to stop after this step, saved
        self.snapshots = EpochWeights(config.average_last, config.checkpoint_dir,
                                      write=self.dist.is_main)
        self.log = RunLog(self.run, config.checkpoint_dir if self.dist.is_main else None,
                          self.dist)
        self.amp_dtype = autocast_dtype(self.device, cuda=config.amp, cpu=config.cpu_amp)
        # fp16 has a narrow exponent range: small gradients underflow unless the loss is scaled
        self.scaler = torch.amp.GradScaler("cuda", enabled=self.amp_dtype == torch.float16)
        self.replica = data_parallel(self.model, self.dist, self.device)  # DDP, if several
        self.train_step = TrainStep(
            self.replica, self.optimizer, self.scheduler, label_smoothing=config.label_smoothing,
            pad_id=self.pad_id, amp_dtype=self.amp_dtype, scaler=self.scaler,
            clip_grad_norm=config.clip_grad_norm, compile=config.compile,
            compile_mode=config.compile_mode)
        torch.manual_seed(rank_seed(config.seed, self.dist.rank))  # each rank its own dropout

    @property
    def config(self) -> TrainConfig:
        return self._config

    @config.setter
    def config(self, config: TrainConfig) -> None:  # e.g. more epochs between fit() calls
        self._config = self.budget.config = config

    # ------------------------------------------------------------------ time and progress
    def elapsed(self) -> float:
        """Seconds of training so far: every :meth:`fit` call, and those before a resume (over
        several processes, during :meth:`fit`: the slowest rank's, as of the last step)."""
        if self.dist.enabled and self.clock.agreed is not None:
            return self.clock.agreed
        return self._local_elapsed()

    def _local_elapsed(self) -> float:
        return self.clock.read()

    @property
    def train_seconds(self) -> float:
        """Seconds of training of the finished :meth:`fit` calls (and before a resume)."""
        return self.clock.seconds

    def total_steps(self) -> int:
        """:meth:`Budget.total_steps <transformer_book.budget.Budget.total_steps>`."""
        return self.budget.total_steps()

    def progress(self, steps_done: int | None = None) -> float:
        """Fraction of the run done, in [0, 1] (drives ``schedule="linear"``; see
        :meth:`Budget.progress <transformer_book.budget.Budget.progress>`)."""
        return self.budget.progress(self.step if steps_done is None else steps_done)

    # ------------------------------------------------------------------ checkpoints (Sec. 6.1)
    def averaged_state_dict(self) -> dict:
        """Sec. 6.1: the mean of the weights kept at the end of the last ``average_last``
        epochs (fewer if fewer epochs ran); load it with ``model.load_state_dict``."""
        return self.snapshots.average()

    def state_dict(self) -> dict:
        """Everything needed to continue exactly: weights, Adam moments, schedule, position in
        the data, RNG states, and the configs as plain dicts (loadable with weights_only=True)."""
        from transformer_book import __version__

        return {"format": CHECKPOINT_FORMAT,
                "transformer_book_version": __version__,  # named in errors about other formats
                "model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(), **self.run.state_dict(),
                "model_config": self.model_config, "train_config": dataclasses.asdict(self.config),
                "extra": self.extra, "scaler": self.scaler.state_dict(),
                "train_seconds": self.elapsed(),
                "world_size": self.dist.world_size}  # processes that wrote it (may differ later)

    def save_checkpoint(self, path: str | os.PathLike) -> None:
        """Write :meth:`state_dict` atomically to ``path``."""
        atomic_torch_save(self.state_dict(), path)

    def load_checkpoint(self, path: str | os.PathLike) -> None:
        """Restore a checkpoint written by :meth:`save_checkpoint` to continue training."""
        state = load_checkpoint(path, map_location=self.device)
        check_keys(state, TRAINING_KEYS, path)
        load_weights_into(self.model, state["model"], path)
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.clock.seconds = float(state.get("train_seconds", 0.0))  # absent before 0.2.0
        self.extra.update(state.get("extra") or {})
        if state.get("scaler") and self.scaler.is_enabled():  # empty unless it ran in fp16
            self.scaler.load_state_dict(state["scaler"])
        self.run.load_state_dict(state)  # position, history, RNG states
        self.snapshots.load(up_to_epoch=self.epoch)
        if self.dist.rank > 0:  # the file holds rank 0's RNG state; the others draw their own
            torch.manual_seed(rank_seed(self.config.seed, self.dist.rank, self.step))
