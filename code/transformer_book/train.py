"""Training the Transformer (Sec. 5 of the paper): loss, optimiser, schedule, loop.

What the paper prescribes, and where it lives here:

- Sec. 5.3, Eq. (3): Adam with beta1 = 0.9, beta2 = 0.98, eps = 1e-9 and a learning rate that
  grows linearly for ``warmup_steps`` steps and then decays as the inverse square root of the
  step: :func:`noam_lr`, :func:`make_optimizer`.
- Sec. 5.4: residual dropout (``TransformerConfig.dropout``, applied inside the model) and label
  smoothing with eps_ls = 0.1: :func:`label_smoothing_loss`.
- Sec. 5.1: batches of about 25,000 source and 25,000 target tokens grouped by length:
  :mod:`transformer_book.batching` (our budget is smaller: Multi30k sentences are short and
  we train on one device).
- Sec. 6.1: beam search with beam size 4 and length penalty alpha = 0.6, BLEU: in
  :mod:`transformer_book.evaluation` (:func:`translate`, :func:`corpus_bleu`; both are
  re-exported here). Checkpoint files (writing, reading, rebuilding a model) live in
  :mod:`transformer_book.checkpoint`.

- Sec. 6.1: "we used a single model obtained by averaging the last 5 checkpoints":
  ``TrainConfig.average_last`` keeps the weights of the last epochs and
  :meth:`Trainer.averaged_state_dict` / :func:`average_state_dicts` average them.

Departures, all optional and off or at the paper's value by default: gradient clipping
(``TrainConfig.clip_grad_norm``), a multiplier on the learning-rate schedule
(``TrainConfig.lr_factor``, 1.0 = the paper), mixed precision on CUDA (``TrainConfig.amp``:
bf16 autocast where the GPU has bf16 units, else fp16 autocast with a gradient scaler, e.g. on
Colab's T4).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import random
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from transformer_book.batching import BatchedCorpus, check_token_ids, to_device_ahead
from transformer_book.checkpoint import (  # noqa: F401 (re-exported: older imports keep working)
    CHECKPOINT_FORMAT,
    TRAINING_KEYS,
    _as_tuple,
    _config_dict,
    atomic_torch_save,
    check_keys,
    load_checkpoint,
    load_weights_into,
    model_from_checkpoint,
    safe_torch_load,
)
from transformer_book.distributed import Context, shard_steps, token_shares
from transformer_book.distributed import current as distributed_current
from transformer_book.evaluation import corpus_bleu, translate  # noqa: F401 (re-exported)
from transformer_book.runlog import METRICS_FILE, append_metrics
from transformer_book.utils import get_device

# --------------------------------------------------------------------------- loss


def label_smoothing_loss(
    logits: Tensor,
    target: Tensor,
    smoothing: float = 0.1,
    pad_id: int | None = 0,
    reduction: str = "mean",
) -> Tensor:
    """Sec. 5.4: cross-entropy against a smoothed target distribution (Szegedy et al., 2016).

    Instead of the one-hot target, the model is trained towards

        q(k) = (1 - eps) * [k == y] + eps / V      for every class k of V,

    i.e. a mixture of the one-hot vector and the uniform distribution over *all* V classes
    (the true class included), exactly the definition of Szegedy et al. (2016) that the paper
    cites, and of ``nn.CrossEntropyLoss(label_smoothing=eps)``. The loss is the cross-entropy
    H(q, p) = -sum_k q(k) log p(k) = (1 - eps) * NLL + eps * mean_k(-log p(k)).
    It can never reach 0: its minimum is the entropy of q (see :func:`smoothed_loss_floor`);
    the model is pushed to be less confident, which "hurts perplexity ... but improves accuracy
    and BLEU score" (Sec. 5.4). (The Annotated Transformer spreads eps over the V - 2 classes
    that are neither the true one nor padding, a slightly different distribution.)

    Args:
        logits: unnormalised scores. Shape (..., V).
        target: class ids. Shape (...), matching ``logits`` without its last dimension.
        smoothing: eps_ls, in [0, 1); 0 gives the ordinary cross-entropy.
        pad_id: targets equal to this id do not count (None: every position counts).
        reduction: ``"mean"`` (over counted positions), ``"sum"`` or ``"none"`` (per position,
            zeros at padding).

    Returns:
        The loss, a scalar (mean/sum) or of ``target``'s shape (none). Computed in float32.
    """
    if not 0.0 <= smoothing < 1.0:
        raise ValueError(f"smoothing must be in [0, 1), got {smoothing}")
    if logits.shape[:-1] != target.shape:
        raise ValueError(
            f"logits {tuple(logits.shape)} and target {tuple(target.shape)} do not match: "
            "expected logits (..., V) and target (...)"
        )
    log_probs = F.log_softmax(logits.float(), dim=-1)  # (..., V), float32 even under autocast
    safe_target = target if pad_id is None else target.masked_fill(target == pad_id, 0)
    nll = -log_probs.gather(-1, safe_target.unsqueeze(-1)).squeeze(-1)  # (...)
    uniform = -log_probs.mean(dim=-1)  # (...), cross-entropy against the uniform distribution
    loss = (1.0 - smoothing) * nll + smoothing * uniform
    keep = torch.ones_like(target, dtype=torch.bool) if pad_id is None else target != pad_id
    loss = loss * keep
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    if reduction == "mean":
        return loss.sum() / keep.sum().clamp(min=1)
    raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def smoothed_loss_floor(vocab_size: int, smoothing: float = 0.1) -> float:
    """The smallest value :func:`label_smoothing_loss` can take: the entropy of q (in nats)."""
    if smoothing == 0:
        return 0.0
    top = 1.0 - smoothing + smoothing / vocab_size
    rest = smoothing / vocab_size
    return -(top * math.log(top) + (vocab_size - 1) * rest * math.log(rest))


# --------------------------------------------------------------------------- schedule


def noam_lr(step: int, d_model: int, warmup_steps: int = 4000, factor: float = 1.0) -> float:
    """Eq. (3), Sec. 5.3: lrate = d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5).

    The rate rises linearly for the first ``warmup_steps`` steps, peaks at step ``warmup_steps``
    with d_model^-0.5 * warmup_steps^-0.5 (7.0e-4 for d_model = 512, warmup 4000), then decays
    as step^-0.5.

    Args:
        step: the optimiser step, counted from 1.
        d_model: model width (512 in the base model).
        warmup_steps: 4000 in the paper.
        factor: multiplier on the whole curve (1.0 = the paper).
    """
    if step < 1:
        raise ValueError(f"step counts from 1, got {step}")
    if warmup_steps < 1:
        raise ValueError(f"warmup_steps must be >= 1, got {warmup_steps}")
    return factor * d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)


def linear_lr(step: int, d_model: int, warmup_steps: int, factor: float = 1.0,
              progress: float = 0.0) -> float:
    """Not in the paper: linear warm-up to the peak of Eq. (3), times a linear decay to zero.

    lrate = factor * d_model^-0.5 * warmup_steps^-0.5 * min(step / warmup_steps, 1) * (1 - progress)

    ``progress`` is the fraction of the run already done (0 at the start, 1 at the end), so the
    rate reaches 0 exactly when the run ends, however long it is. The factor applies from the
    first step, so the peak is reached only if no progress has been made by the end of the
    warm-up; in practice the highest rate is peak * (1 - progress at step warmup_steps). Li et
    al. (2020, "Budgeted training") found a decay to zero better than Eq. (3)'s inverse square
    root for short budgets; in chapter 8's CPU runs the two were within the seeds' spread.
    """
    if step < 1:
        raise ValueError(f"step counts from 1, got {step}")
    if warmup_steps < 1:
        raise ValueError(f"warmup_steps must be >= 1, got {warmup_steps}")
    peak = factor * d_model**-0.5 * warmup_steps**-0.5  # the peak of noam_lr
    return peak * min(step / warmup_steps, 1.0) * max(0.0, 1.0 - progress)


SCHEDULES = ("noam", "linear")


def make_optimizer(
    model: nn.Module, d_model: int, warmup_steps: int = 4000, factor: float = 1.0,
    *, fused: bool = False, schedule: str = "noam", progress=None,
) -> tuple[torch.optim.Adam, torch.optim.lr_scheduler.LambdaLR]:
    """Sec. 5.3: Adam(beta1=0.9, beta2=0.98, eps=1e-9) driven by :func:`noam_lr`.

    The optimiser's base rate is 1.0 and ``LambdaLR`` multiplies it by ``noam_lr``. Call
    ``scheduler.step()`` after every ``optimizer.step()``: the k-th update (k = 1, 2, ...)
    then uses ``noam_lr(k)``. ``fused=True`` updates all parameters in a few fused kernels
    (on CUDA the default is already the multi-tensor "foreach" path, which batches the
    parameters into a few kernels per operation; the update is the same, up to rounding).
    ``schedule="linear"`` uses :func:`linear_lr` instead, with ``progress(steps_done)`` (a
    callable returning the fraction of the run done, e.g. :meth:`Trainer.progress`) read at
    each step.

    Returns:
        ``(optimizer, scheduler)``.
    """
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
    if schedule == "linear" and progress is None:
        raise ValueError("schedule='linear' needs progress=, a callable giving the run's progress")
    optimizer = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9,
                                 **({"fused": True} if fused else {}))
    if schedule == "noam":
        rate = lambda i: noam_lr(i + 1, d_model, warmup_steps, factor)  # noqa: E731
    else:
        # after i steps the run is progress(i) done; the (i + 1)-th step uses this rate
        rate = lambda i: linear_lr(i + 1, d_model, warmup_steps, factor, progress(i))  # noqa: E731
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, rate)
    return optimizer, scheduler


# --------------------------------------------------------------------------- training loop


@dataclass(frozen=True)
class TrainConfig:
    """Settings of a training run (the model's own settings live in ``TransformerConfig``)."""

    max_tokens: int = 4096  # padded tokens per batch (the paper: ~25k src + 25k tgt, Sec. 5.1)
    # batches per optimiser step and process (gradient accumulation, weighted by target tokens);
    # a step over W processes (torchrun) takes W * accumulate consecutive batches
    accumulate: int = 1
    epochs: int = 10  # passes over the training data (stops earlier if max_steps is reached)
    max_steps: int | None = None  # optimiser steps in total; None = no limit
    warmup_steps: int = 4000  # Eq. (3), Sec. 5.3
    lr_factor: float = 1.0  # multiplier on Eq. (3); 1.0 = the paper
    # "noam" = Eq. (3); "linear" = the same warm-up and peak, then a linear decay that reaches 0
    # when the run ends (after `epochs`, `max_steps` or `time_budget`, whichever comes first)
    schedule: str = "noam"
    time_budget: float | None = None  # seconds of training (validation included); None = no limit
    label_smoothing: float = 0.1  # eps_ls, Sec. 5.4
    clip_grad_norm: float | None = None  # the paper does not clip; a max norm here enables it
    eval_every: int | None = None  # validation every n steps; None = at the end of each epoch
    checkpoint_every: int = 500  # steps between checkpoints (and one at each epoch end)
    checkpoint_dir: str | None = None  # where last.pt is written; None = no checkpoints
    seed: int = 0  # seeds the batch order (seed + epoch) and the model's dropout
    device: str | None = None  # None = transformer_book.get_device() (CUDA when available)
    amp: bool = True  # mixed precision on CUDA: bf16, or fp16 + loss scaling (ignored on CPU)
    progress: bool = True  # tqdm progress bar
    log_epochs: bool = False  # print one summary line per epoch (for notebooks: no bar)
    average_last: int = 1  # Sec. 6.1: keep the weights of the last n epochs to average (1 = off)
    # Speed (chapter 10). None = automatic: on for CUDA, off elsewhere. None of these changes
    # what is computed; the CPU default is the plain loop.
    sync_every: int | None = None  # read losses back to the host every n steps (None: CUDA 50, else 1)
    fused_adam: bool | None = None  # Adam's fused kernels (None: on CUDA)
    prefetch: bool | None = None  # check ids on the host, pin, copy batches ahead (None: CUDA)
    compile: bool = False  # torch.compile(fullgraph=True) of forward + loss
    compile_mode: str | None = None  # torch.compile mode; "reduce-overhead" = CUDA graphs

    #: The fields :meth:`cpu` sets: what ``--preset cpu`` changes in a command's defaults.
    RECIPE_FIELDS = ("epochs", "max_tokens", "warmup_steps", "lr_factor", "schedule", "time_budget")

    @classmethod
    def cpu(cls, **overrides) -> TrainConfig:
        """Not in the paper: the CPU reader's recipe, 20 minutes of training on 2 cores.

        Pair it with ``TransformerConfig.cpu()``. Chosen by the runs in
        ``benchmarks/results/cpu-2026-11-23/`` (chapter 8 tabulates them): batches of at most
        1,500 padded tokens (more, smaller steps), a 200-step warm-up towards the rate of Eq. (3)
        at 0.45 times its size (2.0e-3 for d_model 256) multiplied by (1 - progress), then a
        linear decay that reaches 0 when the time budget of 1,150 s (validation included) runs
        out; since progress has advanced during the warm-up, the rate reached is lower (about
        1.75e-3 on the 2-core AMD EPYC of chapter 8). ``epochs`` is only an upper bound: on that
        machine the budget stopped the run in its fifth epoch.
        """
        return cls(**{"max_tokens": 1500, "warmup_steps": 200, "lr_factor": 0.45,
                      "schedule": "linear", "time_budget": 1150.0, "epochs": 30, **overrides})


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


class TrainStep:
    """One optimiser step of Sec. 5 that never waits for the device: forward, label-smoothed
    loss, backward, (clipping,) Adam, schedule.

    It returns the loss as a tensor on the device; reading it (``float(loss)``) is left to the
    caller, who can do it every few steps: on a GPU each read makes the host wait until every
    queued kernel has run, and the next step's kernels cannot be queued meanwhile.

    Args:
        model: maps ``(src, tgt_in)`` to logits (B, T, V).
        optimizer, scheduler: from :func:`make_optimizer`.
        label_smoothing, pad_id: of the loss (:func:`label_smoothing_loss`).
        amp_dtype: autocast dtype, or None for full precision.
        scaler: a ``torch.amp.GradScaler`` (fp16), or None.
        clip_grad_norm: max gradient norm, or None.
        compile: run forward + loss through ``torch.compile(fullgraph=True)`` (one graph, no
            break; the backward pass is compiled with it).
        compile_mode: ``torch.compile``'s mode (``"reduce-overhead"``: CUDA graphs).
    """

    def __init__(self, model: nn.Module, optimizer, scheduler=None, *, label_smoothing: float,
                 pad_id: int | None, amp_dtype: torch.dtype | None = None, scaler=None,
                 clip_grad_norm: float | None = None, compile: bool = False,
                 compile_mode: str | None = None):
        self.model, self.optimizer, self.scheduler = model, optimizer, scheduler
        self.label_smoothing, self.pad_id = label_smoothing, pad_id
        self.amp_dtype, self.clip_grad_norm = amp_dtype, clip_grad_norm
        self.scaler = scaler or torch.amp.GradScaler("cuda", enabled=False)
        self.cuda_graphs = compile and compile_mode in ("reduce-overhead", "max-autotune")
        self.loss = (torch.compile(self._loss, fullgraph=True, mode=compile_mode) if compile
                     else self._loss)

    def _loss(self, src: Tensor, tgt_in: Tensor, tgt_out: Tensor) -> Tensor:
        device_type = src.device.type
        with torch.autocast(device_type, dtype=self.amp_dtype or torch.bfloat16,
                            enabled=self.amp_dtype is not None):
            logits = self.model(src, tgt_in)  # (B, T, V)
        return label_smoothing_loss(logits, tgt_out, self.label_smoothing, self.pad_id)

    def __call__(self, batch) -> Tensor:
        """Train on ``batch`` (already on the model's device); returns its loss, detached."""
        return self.accumulate([(batch, 1.0)])

    def accumulate(self, parts: Sequence[tuple], world_size: int = 1) -> Tensor:
        """One optimiser step on several batches: gradient accumulation, and this process's
        share of a multi-process step.

        Args:
            parts: ``(batch, share)`` pairs; the gradient is that of sum(share * loss(batch)).
                With shares from :func:`~transformer_book.distributed.token_shares` that is
                the mean loss per target token over all the step's batches (on all ranks).
            world_size: processes taking part; with ``self.model`` a
                ``DistributedDataParallel``, its gradients are averaged over them at the
                backward pass of the last part (the others run under ``no_sync``).

        Returns:
            sum(share * loss) / world_size, detached: this process's part of the step's loss
            (summed over processes, the step's mean loss per target token).
        """
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        total = None
        for i, (batch, share) in enumerate(parts):
            if self.cuda_graphs:  # a new iteration: outputs of the previous replay may be reused
                torch.compiler.cudagraph_mark_step_begin()
            last = i == len(parts) - 1
            no_sync = getattr(self.model, "no_sync", None)  # DDP: all-reduce at the last only
            with (no_sync() if no_sync is not None and not last else contextlib.nullcontext()):
                loss = self.loss(batch.src, batch.tgt_in, batch.tgt_out)
                if share != 1.0:  # one batch on one process: exactly the plain loss
                    loss = loss * share
                self.scaler.scale(loss).backward()  # a no-op scaling unless fp16
            part = loss.detach().clone() if self.cuda_graphs else loss.detach()
            total = part if total is None else total + part
        if self.clip_grad_norm is not None:
            self.scaler.unscale_(self.optimizer)
            nn.utils.clip_grad_norm_(self.model.parameters(), self.clip_grad_norm)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        if self.scheduler is not None:
            self.scheduler.step()
        # (CUDA graphs overwrite their outputs at the next replay: the parts were copied)
        return total if world_size == 1 else total / world_size


def _diverged(value: float, step: int) -> FloatingPointError:
    return FloatingPointError(
        f"training loss is {value} at step {step}: the run diverged. "
        "Lower the learning rate (lr_factor), lengthen the warm-up or clip gradients "
        "(clip_grad_norm), then resume from the last checkpoint."
    )


_RANK_SEED = 1_000_003  # rank r seeds its dropout with seed + r * this (a prime, far from seeds)


class Trainer:
    """The training loop of Sec. 5: batches, label-smoothed loss, Adam + warm-up, checkpoints.

    Args:
        model: maps ``(src (B, S), tgt_in (B, T))`` to logits (B, T, V), like
            :class:`transformer_book.model.Transformer`.
        train_data: training batches (:class:`~transformer_book.batching.BatchedCorpus`).
        config: the run's settings.
        d_model: for Eq. (3); defaults to ``model_config.d_model``.
        val_data: validation batches (unshuffled), or None.
        model_config: the model's config (a dataclass or dict), stored in checkpoints as a
            plain dict so a checkpoint can rebuild its model.
        extra: more plain data to store in checkpoints (e.g. ``{"tokenizer": tok.to_str()}``).
        distributed: this process's place in a multi-process run
            (:mod:`transformer_book.distributed`); default: the process group joined with
            :func:`~transformer_book.distributed.init`, if any, else a single process. Each step
            then takes ``world_size * accumulate`` consecutive batches, ``accumulate`` per rank;
            the model is wrapped in ``DistributedDataParallel``; rank 0 alone writes
            checkpoints, metrics and progress. Every rank must call :meth:`fit` (and
            :meth:`evaluate`) alike: they exchange losses and flags.
    """

    def __init__(
        self,
        model: nn.Module,
        train_data: BatchedCorpus,
        config: TrainConfig = TrainConfig(),
        *,
        d_model: int | None = None,
        val_data: BatchedCorpus | None = None,
        model_config=None,
        extra: dict | None = None,
        distributed: Context | None = None,
    ):
        self.config = config
        self.device = get_device(config.device)
        self.model = model.to(self.device)
        # the processes of a torchrun launch (transformer_book.distributed); rank 0 alone
        # writes checkpoints and metrics and shows progress
        self.dist = distributed_current() if distributed is None else distributed
        if config.accumulate < 1:
            raise ValueError(f"accumulate must be >= 1, got {config.accumulate}")
        self.train_data, self.val_data = train_data, val_data
        self.model_config = _config_dict(model_config)
        if d_model is None:
            if self.model_config is None or "d_model" not in self.model_config:
                raise ValueError("pass d_model= or a model_config with a d_model field")
            d_model = self.model_config["d_model"]
        self.d_model = d_model
        self.pad_id = train_data.pad_id
        self.extra = dict(extra or {})
        cuda = self.device.type == "cuda"  # the speed flags left at None switch on there
        if config.time_budget is not None and not config.time_budget > 0:
            raise ValueError(f"time_budget must be a positive number of seconds, got "
                             f"{config.time_budget!r}")
        self.step = 0  # optimiser steps done (set before the scheduler, which reads progress())
        self.train_seconds = 0.0  # time spent in fit() (all calls, and before a resume)
        self._fit_start: float | None = None  # perf_counter() when the running fit() began
        self._shared_elapsed: float | None = None  # elapsed() agreed by the ranks (in fit())
        self.optimizer, self.scheduler = make_optimizer(
            self.model, d_model, config.warmup_steps, config.lr_factor,
            fused=cuda if config.fused_adam is None else config.fused_adam,
            schedule=config.schedule, progress=self.progress,
        )
        self.sync_every = config.sync_every or (50 if cuda else 1)
        self.prefetch = cuda if config.prefetch is None else config.prefetch
        # set (e.g. by a SIGINT handler) to stop after the current step, with a checkpoint
        self.stop_requested = False
        self.epoch = 0  # current epoch
        self.batch_in_epoch = 0  # batches of the current epoch already trained on
        self.history = History()
        if config.average_last < 1:
            raise ValueError(f"average_last must be >= 1, got {config.average_last}")
        # weights at the end of the last `average_last` epochs, as (epoch, CPU state dict)
        self.snapshots: deque[tuple[int, dict]] = deque(maxlen=config.average_last)
        self.amp_dtype = autocast_dtype(self.device) if config.amp else None
        # fp16 has a narrow exponent range: small gradients underflow unless the loss is scaled
        self.scaler = torch.amp.GradScaler(
            "cuda", enabled=self.amp_dtype == torch.float16
        )
        # DDP averages the gradients of the replicas at each backward pass (the last of a step)
        self.replica = self.model
        if self.dist.enabled:
            from torch.nn.parallel import DistributedDataParallel

            cuda_index = [self.device.index] if cuda else None
            self.replica = DistributedDataParallel(self.model, device_ids=cuda_index)
        self._step = TrainStep(
            self.replica, self.optimizer, self.scheduler,
            label_smoothing=config.label_smoothing, pad_id=self.pad_id,
            amp_dtype=self.amp_dtype, scaler=self.scaler, clip_grad_norm=config.clip_grad_norm,
            compile=config.compile, compile_mode=config.compile_mode,
        )
        # dropout masks: rank r draws its own (the same seed on every rank would give batches of
        # one shape the same masks)
        torch.manual_seed(config.seed + _RANK_SEED * self.dist.rank)

    # ------------------------------------------------------------------ one step
    def _autocast(self):
        return torch.autocast(
            device_type=self.device.type,
            dtype=self.amp_dtype or torch.bfloat16,
            enabled=self.amp_dtype is not None,
        )

    def train_step(self, batch) -> float:
        """One optimiser step on ``batch``; returns its label-smoothed loss per target token.

        Reads the loss back at once (a host sync on a GPU); :meth:`fit` reads it only every
        ``sync_every`` steps."""
        loss = self._step(batch.to(self.device))
        self.step += 1
        value = float(loss)
        if not math.isfinite(value):
            raise _diverged(value, self.step)
        return value

    def _read_losses(self, pending: list[tuple[int, Tensor]]) -> list[float]:
        """Read the losses of the steps in ``pending`` in one transfer, into the history."""
        if not pending:
            return []
        # the one host sync; over several ranks, the sum of their parts of each step's loss
        values = self.dist.sum(torch.stack([loss for _, loss in pending])).tolist()
        lrs = dict(self.history.lr[-len(pending):])  # appended once per step, in step order
        for (step, _), value in zip(pending, values, strict=True):
            if not math.isfinite(value):
                raise _diverged(value, step)
            self.history.train_loss.append((step, value))
        self._log_metrics([{"step": step, "loss": value, "lr": lrs.get(step)}
                           for (step, _), value in zip(pending, values, strict=True)])
        pending.clear()
        return values

    def _log_metrics(self, records: list[dict]) -> None:
        """Append to metrics.jsonl beside the checkpoints (transformer_book.runlog); rank 0 only."""
        if self.config.checkpoint_dir and self.dist.is_main:
            append_metrics(Path(self.config.checkpoint_dir) / METRICS_FILE, records)

    def _batches(self, data: BatchedCorpus, epoch: int, start: int = 0, positions=None):
        """``(host batch, device batch)`` pairs; with ``prefetch``, ids are checked on the host
        and copies start ahead (:func:`~transformer_book.batching.to_device_ahead`).
        ``positions``: only those batches (see :meth:`BatchedCorpus.batches`)."""
        batches = data.batches(epoch, start=start, positions=positions)
        if not self.prefetch:
            for batch in batches:
                yield batch, batch.to(self.device)
            return
        vocab = getattr(getattr(self.model, "config", None), "src_vocab_size", None)

        def checked():
            for batch in batches:
                if vocab is not None:
                    check_token_ids(batch, self.model.config.src_vocab_size,
                                    self.model.config.tgt_vocab_size)
                yield batch

        before = getattr(self.model, "check_token_ids", None)
        if before is not None:
            self.model.check_token_ids = vocab is None  # checked here instead
        try:
            yield from to_device_ahead(checked(), self.device)
        finally:
            if before is not None:
                self.model.check_token_ids = before

    @torch.no_grad()
    def evaluate(self, data: BatchedCorpus | None = None) -> float:
        """Mean cross-entropy (no smoothing, nats per target token) over ``data`` (default: val).

        On several processes each rank evaluates every ``world_size``-th batch and the sums are
        added up across ranks (in float64): every rank returns the same number, that of the
        whole data, in a ``world_size``-th of the time. Every rank must call it.
        """
        data = self.val_data if data is None else data
        if data is None:
            raise ValueError("no validation data: pass val_data to Trainer or data here")
        self.model.eval()
        # The sum stays on the device, in float64 as a Python float would hold it (not on MPS)
        wide = torch.float32 if self.device.type == "mps" else torch.float64
        total, count = torch.zeros((), dtype=wide, device=self.device), 0
        positions = None
        if self.dist.enabled:
            positions = range(self.dist.rank, data.num_batches(0), self.dist.world_size)
        for host, batch in self._batches(data, 0, positions=positions):
            with self._autocast():
                logits = self.model(batch.src, batch.tgt_in)
            total += label_smoothing_loss(logits, batch.tgt_out, 0.0, self.pad_id, "sum").to(wide)
            count += host.num_tgt_tokens  # counted on the host copy: no sync
        if self.dist.enabled:
            total, count = self.dist.sum(torch.stack([total, torch.tensor(
                float(count), dtype=wide, device=self.device)])).tolist()
        return float(total) / count

    # ------------------------------------------------------------------ loop
    def fit(self) -> History:
        """Train until ``config.epochs`` epochs or ``config.max_steps`` steps are done.

        Resumes where the trainer stands (after :meth:`load_checkpoint`: mid-epoch). Writes
        ``last.pt`` every ``checkpoint_every`` steps and at each epoch end; an interrupted run
        loses at most the steps since the last checkpoint.
        """
        from tqdm import tqdm  # the plain bar: works in terminals and notebooks alike

        cfg = self.config
        run_start = self._fit_start = time.perf_counter()
        try:
            self._fit(cfg, run_start, tqdm)
        finally:
            self.train_seconds += time.perf_counter() - run_start
            self._fit_start = self._shared_elapsed = None
        return self.history

    def _flags(self) -> tuple[bool, bool]:
        """(out of time, stop requested), the same on every rank: each rank reads its own clock
        and signals, and they must stop at the same step. Over several ranks this also sets
        :meth:`elapsed` to the slowest rank's time, which the linear schedule reads."""
        if self.dist.enabled:
            stop, self._shared_elapsed = self.dist.max(self.stop_requested, self._local_elapsed())
            return self._out_of_time(), bool(stop)
        return self._out_of_time(), self.stop_requested

    def _fit(self, cfg: TrainConfig, run_start: float, tqdm) -> None:
        world = self.dist.world_size
        per_step = world * cfg.accumulate  # batches per optimiser step, over all ranks
        main = self.dist.is_main
        while True:
            out_of_time, stop = self._flags()
            if self._done(out_of_time) or stop:
                break
            num_batches = self.train_data.num_batches(self.epoch)
            targets = self.train_data.target_tokens(self.epoch)  # every rank knows every batch's
            # (group of batch positions, this rank's positions, whether it has any): a rank left
            # without a batch by a short last group trains on the group's first with weight 0,
            # since it must still take part in DDP's all-reduce
            plan = [(group, mine or [group[0]], bool(mine))
                    for group, mine in shard_steps(num_batches, self.batch_in_epoch, per_step,
                                                   self.dist)]
            stream = self._batches(self.train_data, self.epoch,
                                   positions=[p for _, mine, _ in plan for p in mine])
            bar = tqdm(
                total=num_batches,
                initial=self.batch_in_epoch,
                disable=not (cfg.progress and main),
                desc=f"epoch {self.epoch + 1}/{cfg.epochs}",
            )
            tokens, t0, losses = 0, time.perf_counter(), []
            pending: list[tuple[int, Tensor]] = []  # (step, loss on the device), not yet read
            for group, mine, real in plan:
                group_tokens = sum(targets[p] for p in group)  # over all ranks, on the host
                shares = (token_shares([targets[p] for p in mine], group_tokens, world) if real
                          else [0.0])
                parts = [(next(stream)[1], share) for share in shares]
                pending.append((self.step + 1, self._step.accumulate(parts, world)))
                self.step += 1
                tokens += group_tokens
                self.history.lr.append((self.step, self.scheduler.get_last_lr()[0]))
                bar.update(len(group))
                self.batch_in_epoch += len(group)
                end_of_epoch = self.batch_in_epoch == num_batches
                out_of_time, stop = self._flags()  # read once per step: they can change any time
                self.stop_requested = self.stop_requested or stop
                done = self._done(out_of_time)
                if (len(pending) >= self.sync_every or end_of_epoch or done or stop
                        or self.step % cfg.checkpoint_every == 0
                        or (cfg.eval_every and self.step % cfg.eval_every == 0)):
                    losses += self._read_losses(pending)  # read before eval / checkpoints
                    bar.set_postfix(loss=f"{losses[-1]:.3f}", step=self.step)
                if end_of_epoch:  # move on before saving, so a resume starts the next epoch
                    self.epoch, self.batch_in_epoch = self.epoch + 1, 0
                    if cfg.average_last > 1:
                        self._snapshot()
                if self.val_data is not None and (
                    (cfg.eval_every and self.step % cfg.eval_every == 0)
                    or (not cfg.eval_every and (end_of_epoch or out_of_time))
                ):
                    self.history.val_loss.append((self.step, self.evaluate()))
                    self._log_metrics([{"step": self.step, "epoch": self.epoch,
                                        "val_loss": self.history.val_loss[-1][1]}])
                    if cfg.progress and main:
                        bar.write(f"step {self.step}: val loss {self.history.val_loss[-1][1]:.4f}")
                if cfg.checkpoint_dir and main and (
                    self.step % cfg.checkpoint_every == 0 or done or end_of_epoch or stop
                ):
                    self.save_checkpoint(Path(cfg.checkpoint_dir) / "last.pt")
                if done or stop:
                    break
            stream.close()
            bar.close()
            if tokens:
                rate = tokens / (time.perf_counter() - t0)
                self.history.tokens_per_second.append((self.step, rate))
                self._log_metrics([{"step": self.step, "epoch": self.epoch,
                                    "tokens_per_second": rate}])
                if cfg.log_epochs and main:
                    val = self.history.val_loss[-1][1] if self.history.val_loss else float("nan")
                    # a run its time budget stopped inside an epoch: show how far it got
                    at = (f"{self.epoch:3}" if self.batch_in_epoch == 0
                          else f"{self.epoch + self.batch_in_epoch / num_batches:5.1f}")
                    print(f"epoch {at}/{cfg.epochs}  step {self.step:6}  "
                          f"train loss {sum(losses) / len(losses):.3f}  val loss {val:.3f}  "
                          f"{rate:9,.0f} tok/s  {time.perf_counter() - run_start:6.0f} s",
                          flush=True)

    # ------------------------------------------------------------------ averaging (Sec. 6.1)
    def _snapshot(self) -> None:
        """Keep this epoch's weights (on the CPU; and on disk, so a resumed run has them too)."""
        state = {k: v.detach().to("cpu", copy=True) for k, v in self.model.state_dict().items()}
        self.snapshots.append((self.epoch, state))
        if self.config.checkpoint_dir and self.dist.is_main:
            folder = Path(self.config.checkpoint_dir)
            atomic_torch_save(state, folder / f"weights_epoch{self.epoch:04d}.pt")
            kept = {f"weights_epoch{e:04d}.pt" for e, _ in self.snapshots}
            for old in folder.glob("weights_epoch*.pt"):
                if old.name not in kept:
                    old.unlink()

    def averaged_state_dict(self) -> dict:
        """Sec. 6.1: the mean of the weights kept at the end of the last ``average_last``
        epochs (fewer if fewer epochs ran). Load it with ``model.load_state_dict``.

        Raises:
            ValueError: nothing was kept (``average_last`` is 1, or no epoch has ended).
        """
        if not self.snapshots:
            raise ValueError(
                "no epoch weights kept: set TrainConfig(average_last=n) with n > 1 "
                "and train at least one whole epoch"
            )
        return average_state_dicts([state for _, state in self.snapshots])

    def elapsed(self) -> float:
        """Seconds of training so far: every :meth:`fit` call, and those before a resume.

        Over several processes, during :meth:`fit`: the slowest rank's, as of the last step, so
        that every rank reads the same time (for the time budget and the linear schedule)."""
        if self.dist.enabled and self._shared_elapsed is not None:
            return self._shared_elapsed
        return self._local_elapsed()

    def _local_elapsed(self) -> float:
        running = 0.0 if self._fit_start is None else time.perf_counter() - self._fit_start
        return self.train_seconds + running

    def total_steps(self) -> int:
        """Steps the run will take if no time budget stops it first: ``config.epochs`` epochs,
        capped at ``config.max_steps`` (a step takes ``world_size * accumulate`` batches)."""
        cfg = self.config
        per_step = self.dist.world_size * cfg.accumulate
        total = sum(-(-self.train_data.num_batches(e) // per_step) for e in range(cfg.epochs))
        return total if cfg.max_steps is None else min(total, cfg.max_steps)

    def progress(self, steps_done: int | None = None) -> float:
        """Fraction of the run done, in [0, 1]: steps (default: those done so far) over
        :meth:`total_steps`, or time over ``config.time_budget``, whichever is further along
        (drives ``schedule="linear"``)."""
        if not hasattr(self, "_total_steps"):  # the data and the config are fixed by now
            self._total_steps = max(1, self.total_steps())
        done = (self.step if steps_done is None else steps_done) / self._total_steps
        if self.config.time_budget is not None:
            done = max(done, self.elapsed() / self.config.time_budget)
        return min(1.0, done)

    def _out_of_time(self) -> bool:
        return self.config.time_budget is not None and self.elapsed() >= self.config.time_budget

    def _done(self, out_of_time: bool | None = None) -> bool:
        cfg = self.config
        if out_of_time is None:
            out_of_time = self._out_of_time()
        return self.epoch >= cfg.epochs or (
            cfg.max_steps is not None and self.step >= cfg.max_steps
        ) or out_of_time

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict:
        """Everything needed to continue exactly: weights, Adam moments, schedule, position in
        the data, RNG states, and the configs as plain dicts (loadable with weights_only=True)."""
        rng = {"torch": torch.get_rng_state(), "python": random.getstate()}
        if torch.cuda.is_available():
            rng["cuda"] = torch.cuda.get_rng_state_all()
        from transformer_book import __version__

        return {
            "format": CHECKPOINT_FORMAT,
            "transformer_book_version": __version__,  # named in errors about other formats
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "step": self.step,
            "epoch": self.epoch,
            "batch_in_epoch": self.batch_in_epoch,
            "rng": rng,
            "model_config": self.model_config,
            "train_config": dataclasses.asdict(self.config),
            "history": self.history.as_dict(),
            "extra": self.extra,
            "scaler": self.scaler.state_dict(),
            "train_seconds": self.elapsed(),
            "world_size": self.dist.world_size,  # processes that wrote it (a resume may differ)
        }

    def save_checkpoint(self, path: str | os.PathLike) -> None:
        """Write :meth:`state_dict` atomically to ``path`` (:meth:`fit` calls it on rank 0 only:
        the replicas are identical)."""
        atomic_torch_save(self.state_dict(), path)

    def load_checkpoint(self, path: str | os.PathLike) -> None:
        """Restore a checkpoint written by :meth:`save_checkpoint` to continue training."""
        state = load_checkpoint(path, map_location=self.device)
        check_keys(state, TRAINING_KEYS, path)
        load_weights_into(self.model, state["model"], path)
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.step, self.epoch = state["step"], state["epoch"]
        self.batch_in_epoch = state["batch_in_epoch"]
        self.train_seconds = float(state.get("train_seconds", 0.0))  # absent before 0.2.0
        self.history = History.from_dict(state["history"])
        self.extra.update(state.get("extra") or {})
        self.snapshots.clear()
        if self.config.average_last > 1 and self.config.checkpoint_dir:
            for f in sorted(Path(self.config.checkpoint_dir).glob("weights_epoch*.pt")):
                epoch = int(f.stem.removeprefix("weights_epoch"))
                if epoch <= self.epoch:  # files from a longer, abandoned run do not count
                    self.snapshots.append((epoch, safe_torch_load(f, map_location="cpu")))
        if state.get("scaler") and self.scaler.is_enabled():  # empty unless it ran in fp16
            self.scaler.load_state_dict(state["scaler"])
        rng = state["rng"]
        torch.set_rng_state(rng["torch"].cpu())
        random.setstate(_as_tuple(rng["python"]))
        if "cuda" in rng and torch.cuda.is_available():
            torch.cuda.set_rng_state_all([s.cpu() for s in rng["cuda"]])
        if self.dist.rank > 0:  # the file holds rank 0's state; the others draw their own
            torch.manual_seed(self.config.seed + _RANK_SEED * self.dist.rank + self.step)


def autocast_dtype(device: torch.device) -> torch.dtype | None:
    """The autocast dtype for training on ``device``: bf16 on GPUs with bf16 units (Ampere and
    later), fp16 on older CUDA GPUs such as Colab's T4, None (full precision) elsewhere."""
    if device.type != "cuda":
        return None
    return torch.bfloat16 if _native_bf16(device) else torch.float16


def _native_bf16(device: torch.device) -> bool:
    """Whether the GPU has bf16 units: compute capability 8.0 (Ampere) or later; ROCm GPUs do.

    Not ``torch.cuda.is_bf16_supported()``: it also answers True where bf16 is only emulated
    (Colab's T4), and torch 2.3, the oldest release the book supports, has no
    ``including_emulation=False`` to ask for native support only.
    """
    if torch.version.hip:
        return True
    return torch.cuda.get_device_capability(device)[0] >= 8


def average_state_dicts(states: Sequence[dict]) -> dict:
    """Sec. 6.1: the element-wise mean of several state dicts of the same model (floating
    tensors are averaged in float32 and cast back; integer buffers are taken from the last)."""
    if not states:
        raise ValueError("nothing to average: pass at least one state dict")
    keys = states[-1].keys()
    for i, state in enumerate(states):
        if state.keys() != keys:
            raise ValueError(f"state dict {i} has other keys than the last one: not one model")
    out = {}
    for k in keys:
        last = states[-1][k]
        if last.is_floating_point():
            out[k] = (sum(s[k].float() for s in states) / len(states)).to(last.dtype)
        else:
            out[k] = last.clone()
    return out


# --------------------------------------------------------------------------- data


def prepare_corpus(
    tokenizer,
    corpus,
    max_tokens: int,
    *,
    shuffle: bool = True,
    seed: int = 0,
    max_len: int | None = None,
) -> BatchedCorpus:
    """Tokenise a :class:`~transformer_book.data.ParallelCorpus` and batch it by token budget.

    Args:
        tokenizer: a :class:`~transformer_book.tokenizer.SubwordTokenizer`.
        corpus: raw sentence pairs.
        max_tokens: padded tokens per batch.
        shuffle, seed: see :class:`~transformer_book.batching.BatchedCorpus`.
        max_len: drop pairs whose source or target has more subwords (None keeps all).
    """
    src_ids = tokenizer.encode_batch(corpus.src)
    tgt_ids = tokenizer.encode_batch(corpus.tgt)
    if max_len is not None:
        pairs = [
            (x, y)
            for x, y in zip(src_ids, tgt_ids, strict=True)
            if len(x) <= max_len and len(y) <= max_len
        ]
        src_ids, tgt_ids = [p[0] for p in pairs], [p[1] for p in pairs]
    return BatchedCorpus(
        src_ids,
        tgt_ids,
        max_tokens,
        pad_id=tokenizer.pad_id,
        bos_id=tokenizer.bos_id,
        eos_id=tokenizer.eos_id,
        shuffle=shuffle,
        seed=seed,
    )
