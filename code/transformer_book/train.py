"""Sec. 5: the training loop. Epochs of token-budget batches (Sec. 5.1), one optimiser step per
batch (:class:`~transformer_book.step.TrainStep`: label-smoothed loss, Adam, the schedule of
Eq. (3)), validation, checkpoints.

:meth:`Trainer.fit` is the loop chapter 8 writes, with four optional pieces, each marked where it
acts:

- *processes* (``torchrun``, :mod:`~transformer_book.distributed`): each step takes
  ``world_size * accumulate`` batches, weighted by their target tokens; the ranks agree on when
  to stop; rank 0 alone writes.
- *resume*: :meth:`Trainer.save_checkpoint` writes everything a run needs to continue exactly
  (weights, Adam's moments, the schedule, the position in the data, the RNG states),
  :meth:`Trainer.load_checkpoint` reads it back, mid-epoch included.
- *weight averaging* (Sec. 6.1): the weights at the end of the last ``average_last`` epochs.
- *a time budget* (:class:`TimePlan`): turned once into a number of steps, from the pace of the
  run's steps once it has settled, and kept in the checkpoint. The learning rate is a function
  of the step and that plan, never of the clock: a resumed run gets the same rate at the same
  step.

Chapter 8 imports the other names of ``__all__`` from here too (from their own modules).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import random
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from transformer_book.batching import BatchedCorpus, device_batches
from transformer_book.checkpoint import (
    CHECKPOINT_FORMAT,
    TRAINING_KEYS,
    EpochWeights,
    as_tuple,
    atomic_torch_save,
    check_keys,
    config_dict,
    load_checkpoint,
    load_weights_into,
)
from transformer_book.config import TrainConfig
from transformer_book.corpus import prepare_corpus
from transformer_book.distributed import (
    Context,
    data_parallel,
    eval_positions,
    plan_steps,
    rank_seed,
)
from transformer_book.distributed import current as distributed_current
from transformer_book.evaluation import corpus_bleu, mean_loss, translate
from transformer_book.loss import label_smoothing_loss, smoothed_loss_floor
from transformer_book.precision import autocast_dtype
from transformer_book.runlog import RunLog
from transformer_book.schedule import (
    TimePlan,
    linear_lr,
    make_optimizer,
    noam_lr,
    steps_within,
)
from transformer_book.step import TrainStep
from transformer_book.utils import get_device

__all__ = [  # the loop's own names, then those chapter 8 imports from here
    "Clock", "History", "TimePlan", "Trainer", "step_parts", "steps_within", "training_state",
    "write_training_state", "restore_training_state",
    "TrainConfig", "TrainStep", "corpus_bleu", "label_smoothing_loss", "linear_lr",
    "make_optimizer", "noam_lr", "prepare_corpus", "smoothed_loss_floor", "translate",
]

@dataclass
class History:
    """What a run measured, as (step, value) pairs."""

    train_loss: list[tuple[int, float]] = field(default_factory=list)  # label-smoothed, per token
    val_loss: list[tuple[int, float]] = field(default_factory=list)  # plain cross-entropy
    lr: list[tuple[int, float]] = field(default_factory=list)
    tokens_per_second: list[tuple[int, float]] = field(default_factory=list)  # target tokens

    def as_dict(self) -> dict:
        return {k: [list(p) for p in v] for k, v in dataclasses.asdict(self).items()}

    @classmethod
    def from_dict(cls, d: dict) -> History:
        return cls(**{k: [tuple(p) for p in v] for k, v in d.items()})


class Clock:
    """Seconds of training: every ``fit`` call, and those before a resume. ``now`` is the time
    source (a test can replace it)."""

    def __init__(self, seconds: float = 0.0, now=time.perf_counter):
        self.seconds, self.now, self.started = seconds, now, None

    def start(self) -> None:
        self.started = self.now()

    def stop(self) -> None:
        self.seconds, self.started = self.read(), None

    def read(self) -> float:
        return self.seconds + (0.0 if self.started is None else self.now() - self.started)

    @contextlib.contextmanager
    def paused(self):
        self.stop()
        try:
            yield
        finally:
            self.start()


@functools.lru_cache(maxsize=4096)  # (counting an epoch's batches shuffles it)
def epoch_batches(data: BatchedCorpus, epoch: int) -> int:
    return data.num_batches(epoch)


def steps_in(data: BatchedCorpus, epochs: range, per_step: int, bound: int | None = None) -> int:
    """Optimiser steps of ``per_step`` batches in the ``epochs`` of ``data``, or ``bound`` if
    fewer (then the epochs past it are not counted)."""
    total = 0
    for epoch in epochs:
        total += -(-epoch_batches(data, epoch) // per_step)
        if bound is not None and total >= bound:
            return bound
    return total


def run_steps(data: BatchedCorpus, epochs: int, position: tuple[int, int, int], per_step: int,
              cap: int | None) -> int:
    """The optimiser steps of a run of ``epochs`` epochs of ``data`` that stands at ``position``
    (steps done, epoch, its batches done), at ``per_step`` batches a step from there on (a
    resumed run may have other processes or another ``accumulate``), at most ``cap``."""
    step, epoch, batch = position
    total = step
    if epoch < epochs:
        total += -(-(epoch_batches(data, epoch) - batch) // per_step)  # (the epoch's rest)
        room = None if cap is None else max(0, cap - total)
        total += steps_in(data, range(epoch + 1, epochs), per_step, room)
    return total if cap is None else min(total, cap)


def step_parts(model: nn.Module, device: torch.device, cfg: TrainConfig, d_model: int,
               pad_id: int, dist: Context, progress) -> tuple:
    """What one optimiser step needs (Sec. 5.3-5.4): Adam and its schedule (``progress(steps
    done)`` drives the linear one), the fp16 loss scaler (off unless fp16), the model's DDP
    replica (the model itself for one process) and the :class:`TrainStep` that uses them."""
    cuda = device.type == "cuda"
    optimizer, scheduler = make_optimizer(
        model, d_model, cfg.warmup_steps, cfg.lr_factor, schedule=cfg.schedule, progress=progress,
        fused=cuda if cfg.fused_adam is None else cfg.fused_adam)
    amp_dtype = autocast_dtype(device, cuda=cfg.amp, cpu=cfg.cpu_amp)
    # fp16 has a narrow exponent range: small gradients underflow unless the loss is scaled
    scaler = torch.amp.GradScaler("cuda", enabled=amp_dtype == torch.float16)
    replica = data_parallel(model, dist, device)  # DDP, if several processes
    step = TrainStep(replica, optimizer, scheduler, label_smoothing=cfg.label_smoothing,
                     pad_id=pad_id, amp_dtype=amp_dtype, scaler=scaler,
                     clip_grad_norm=cfg.clip_grad_norm, compile=cfg.compile,
                     compile_mode=cfg.compile_mode)
    return optimizer, scheduler, scaler, replica, step


class Trainer:
    """The training loop of Sec. 5, and everything a run holds: the model (and its DDP replica),
    Adam and its schedule, the step, the run's position and history. ``model`` maps
    ``(src (B, S), tgt_in (B, T))`` to logits (B, T, V); ``train_data`` and
    ``val_data`` (or None) are :class:`~transformer_book.batching.BatchedCorpus`; ``d_model``
    (for Eq. (3)) defaults to ``model_config.d_model``; ``model_config`` and ``extra`` (plain
    data, e.g. the tokenizer) go into checkpoints. ``distributed``: this process's place in a
    ``torchrun`` launch (default: the process group joined, if any); every rank must then call
    :meth:`fit` and :meth:`evaluate` alike.
    """

    def __init__(self, model: nn.Module, train_data: BatchedCorpus,
                 config: TrainConfig | None = None, *, d_model: int | None = None,
                 val_data: BatchedCorpus | None = None, model_config=None,
                 extra: dict | None = None, distributed: Context | None = None):
        self.config = cfg = TrainConfig() if config is None else config
        self.device, self.dist = get_device(cfg.device), distributed or distributed_current()
        self.model = model.to(self.device)
        self.train_data, self.val_data, self.pad_id = train_data, val_data, train_data.pad_id
        self.model_config, self.extra = config_dict(model_config), dict(extra or {})
        if d_model is None and "d_model" not in (self.model_config or {}):
            raise ValueError("pass d_model= or a model_config with a d_model field")
        self.d_model = self.model_config["d_model"] if d_model is None else d_model
        # where the run stands: plain fields, all of them in the checkpoint
        self.step = self.epoch = self.batch_in_epoch = 0  # steps done; epoch; its batches done
        self.history, self.clock = History(), Clock()
        self.plan = TimePlan(cfg.time_budget)  # the time budget as a number of steps
        self.stop_requested = False  # set (e.g. on Ctrl-C) to stop after this step, saved
        cuda = self.device.type == "cuda"  # the speed settings left at None switch on there
        self.optimizer, self.scheduler, self.scaler, self.replica, self.train_step = step_parts(
            self.model, self.device, cfg, self.d_model, self.pad_id, self.dist,
            progress=lambda done: self.plan.progress(done, self.total_steps))
        self.amp_dtype = self.train_step.amp_dtype
        self.sync_every = cfg.sync_every or (50 if cuda else 1)  # losses read every n steps
        self.prefetch = cuda if cfg.prefetch is None else cfg.prefetch
        self.snapshots = EpochWeights(cfg.average_last, cfg.checkpoint_dir, write=self.dist.is_main)
        self.log = RunLog(self, cfg.checkpoint_dir if self.dist.is_main else None, self.dist)
        torch.manual_seed(rank_seed(cfg.seed, self.dist.rank))  # each rank its own dropout

    def fit(self) -> History:
        """Train from where the trainer stands until :meth:`done` or a stop request; writes
        ``last.pt`` every ``checkpoint_every`` steps, at each epoch end and at the stop."""
        from tqdm import tqdm  # the plain bar: works in terminals and notebooks alike

        cfg = self.config
        self.clock.start()
        self.log.drop_unread()  # (those of an interrupted call)
        try:
            while not (self.done() or self.stop_requested):
                # one epoch: the steps left, this rank's batches (host, device) and loss shares
                targets = self.train_data.target_tokens(self.epoch)
                steps = plan_steps(targets, self.batch_in_epoch, cfg.accumulate, self.dist)
                mine = [p for s in steps for p in s.positions]
                batches = device_batches(self.train_data.batches(self.epoch, positions=mine),
                                         self.device, ahead=self.prefetch, model=self.model)
                bar = tqdm(total=len(targets), initial=self.batch_in_epoch,
                           disable=not (cfg.progress and self.dist.is_main),
                           desc=f"epoch {self.epoch + 1}/{cfg.epochs}")
                tokens, started, losses = 0, self.clock.read(), []
                try:
                    for planned in steps:
                        parts = [(next(batches)[1], share) for share in planned.shares]
                        lr = self.scheduler.get_last_lr()[0]  # (set by LambdaLR)
                        # token_shares / world_size, summed over ranks when read: mean per token
                        loss = self.train_step.accumulate(parts, self.dist.world_size)
                        self.step += 1
                        self.batch_in_epoch += len(planned.group)
                        tokens += planned.tokens
                        self.log.step(self.step, loss, lr)
                        bar.update(len(planned.group))
                        epoch_over = self.batch_in_epoch == len(targets)
                        if epoch_over:  # move on before saving: a resume starts the next epoch
                            self.epoch, self.batch_in_epoch = self.epoch + 1, 0
                            if cfg.average_last > 1:  # Sec. 6.1
                                keep_epoch_weights(self)
                        self.after_step()
                        self.plan.update(self.step, self.clock.read(), self.dist)
                        finished = self.done()
                        stop = self.agreed_stop() or finished
                        validate = self.val_data is not None and (finished or (
                            self.step % cfg.eval_every == 0 if cfg.eval_every else epoch_over))
                        save = bool(cfg.checkpoint_dir) and (  # decided alike on every rank
                            self.step % cfg.checkpoint_every == 0 or epoch_over or stop)
                        if (self.log.unread >= self.sync_every or epoch_over or validate or save
                                or stop):
                            losses += self.log.read_losses()  # (processes: summed over ranks)
                            bar.set_postfix(loss=f"{losses[-1]:.3f}", step=self.step)
                        if validate or save:
                            with self.clock.paused():  # budgets count training steps alone
                                if validate:
                                    self.log.validation(self.step, self.epoch, self.evaluate())
                                if save:
                                    self.save_checkpoint(Path(cfg.checkpoint_dir) / "last.pt")
                        if stop:
                            break
                finally:  # (also after a non-finite loss or a second Ctrl-C)
                    batches.close()
                    bar.close()
                if tokens:  # throughput of the steps (the clock); with log_epochs a line
                    self.log.epoch_end(self.step, self.epoch + self.batch_in_epoch / len(targets),
                                       tokens / (self.clock.read() - started),
                                       losses, self.clock.read(), cfg.epochs,
                                       cfg.log_epochs and self.dist.is_main)
        finally:
            self.clock.stop()
        return self.history

    def total_steps(self, bound: int | None = None) -> int:
        """The run's steps (:func:`run_steps`), capped at ``max_steps``, the plan and ``bound``."""
        cfg = self.config
        caps = [c for c in (cfg.max_steps, self.plan.steps, bound) if c is not None]
        return run_steps(self.train_data, cfg.epochs, (self.step, self.epoch, self.batch_in_epoch),
                         self.dist.world_size * cfg.accumulate, min(caps, default=None))

    def done(self) -> bool:  # (epochs past the next step are not counted)
        return self.epoch >= self.config.epochs or self.step >= self.total_steps(self.step + 1)

    def agreed_stop(self) -> bool:
        """*Processes*: whether any rank was asked to stop (they must stop at the same step)."""
        if self.dist.enabled:
            self.stop_requested = bool(self.dist.max(self.stop_requested)[0])
        return self.stop_requested

    def after_step(self) -> None:
        """Called after every step, before the time plan, stop, validation and checkpoint
        decisions; a subclass can watch the run here (the benchmarks keep weights on the way)."""

    def evaluate(self, data: BatchedCorpus | None = None) -> float:
        """Mean cross-entropy (no smoothing, nats per target token) over ``data`` (default: val).
        *Processes*: each rank evaluates every ``world_size``-th batch; all return the sum's mean."""
        data = self.val_data if data is None else data
        if data is None:
            raise ValueError("no validation data: pass val_data to Trainer or data here")
        mine = eval_positions(data.num_batches(0), self.dist)
        batches = device_batches(data.batches(0, positions=mine), self.device,
                                 ahead=self.prefetch, model=self.model)
        return mean_loss(self.model, batches, pad_id=self.pad_id, amp_dtype=self.amp_dtype,
                         ranks=self.dist)

    def averaged_state_dict(self) -> dict:
        """Sec. 6.1: the mean of the weights kept at the end of the last ``average_last`` epochs."""
        return self.snapshots.average()

    def save_checkpoint(self, path: str | os.PathLike) -> None:
        """*Resume*: :func:`write_training_state` (every rank calls it; rank 0 writes)."""
        write_training_state(self, path)

    def load_checkpoint(self, path: str | os.PathLike) -> None:
        """*Resume*: continue from a checkpoint written by :meth:`save_checkpoint`."""
        restore_training_state(self, load_checkpoint(path, map_location=self.device), path)


def training_state(t: Trainer) -> dict:
    """Everything a run needs to continue exactly, as plain data (``weights_only=True`` reads
    it): weights, Adam's moments, the schedule, the position in the data, the time plan, the
    history, the RNG states (dropout and the batch order continue as if nothing had stopped)."""
    from transformer_book import __version__

    rng = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        rng["cuda"] = torch.cuda.get_rng_state_all()
    return {"format": CHECKPOINT_FORMAT, "transformer_book_version": __version__,
            "model": t.model.state_dict(), "optimizer": t.optimizer.state_dict(),
            "scheduler": t.scheduler.state_dict(), "scaler": t.scaler.state_dict(),
            "step": t.step, "epoch": t.epoch, "batch_in_epoch": t.batch_in_epoch,
            "time_plan": t.plan.state(), "rng": rng, "history": t.history.as_dict(),
            "model_config": t.model_config, "train_config": dataclasses.asdict(t.config),
            "extra": t.extra, "train_seconds": t.clock.read(),
            "world_size": t.dist.world_size}  # processes that wrote it (may differ later)


def agreed(dist: Context, action, what: str) -> None:
    """Run ``action`` (on every rank; it writes on rank 0 only). *Processes*: if it failed on rank
    0 (an OSError), every rank raises, rather than wait for rank 0 at the next collective."""
    error = None
    try:
        action()
    except OSError as e:
        error = e
    if dist.enabled and dist.max(float(error is not None))[0] and error is None:
        raise RuntimeError(f"rank 0 could not {what}: see its error")
    if error is not None:
        raise error


def keep_epoch_weights(t: Trainer) -> None:
    """Sec. 6.1: keep the weights at the end of an epoch, for averaging (rank 0 writes them to
    the checkpoint folder); the clock stopped, since this is no training step."""
    with t.clock.paused():
        agreed(t.dist, lambda: t.snapshots.add(t.epoch, t.model),
               f"save the weights of epoch {t.epoch}")


def write_training_state(t: Trainer, path: str | os.PathLike) -> None:
    """Rank 0 writes :func:`training_state` atomically to ``path`` (the replicas are identical).
    *Processes*: every rank calls it, and every rank raises if the write failed."""
    agreed(t.dist, lambda: atomic_torch_save(training_state(t), path) if t.dist.is_main else None,
           f"write the checkpoint {path}")


def restore_training_state(t: Trainer, state: dict, path) -> None:
    """Load :func:`training_state`'s ``state`` (read from ``path``) into trainer ``t``."""
    check_keys(state, TRAINING_KEYS, path)
    load_weights_into(t.model, state["model"], path)
    t.optimizer.load_state_dict(state["optimizer"])
    t.scheduler.load_state_dict(state["scheduler"])
    if state.get("scaler") and t.scaler.is_enabled():  # empty unless it ran in fp16
        t.scaler.load_state_dict(state["scaler"])
    t.step, t.epoch, t.batch_in_epoch = state["step"], state["epoch"], state["batch_in_epoch"]
    t.history = History.from_dict(state["history"])
    t.clock.seconds = float(state.get("train_seconds", 0.0))
    t.plan = TimePlan.resumed(t.config.time_budget, state.get("time_plan"), t.step, t.clock.seconds)
    t.extra.update(state.get("extra") or {})
    rng = state["rng"]
    torch.set_rng_state(rng["torch"].cpu())
    random.setstate(as_tuple(rng["python"]))
    for i, cuda_state in enumerate(rng.get("cuda", [])[:torch.cuda.device_count()]):
        torch.cuda.set_rng_state(cuda_state.cpu(), i)  # (those of the GPUs this machine has)
    t.snapshots.load(up_to_epoch=t.epoch)
    if t.dist.rank > 0:  # the file holds rank 0's RNG state; the others draw their own
        torch.manual_seed(rank_seed(t.config.seed, t.dist.rank, t.step))
