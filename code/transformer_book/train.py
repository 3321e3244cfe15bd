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


def make_optimizer(
    model: nn.Module, d_model: int, warmup_steps: int = 4000, factor: float = 1.0,
    *, fused: bool = False,
) -> tuple[torch.optim.Adam, torch.optim.lr_scheduler.LambdaLR]:
    """Sec. 5.3: Adam(beta1=0.9, beta2=0.98, eps=1e-9) driven by :func:`noam_lr`.

    The optimiser's base rate is 1.0 and ``LambdaLR`` multiplies it by ``noam_lr``. Call
    ``scheduler.step()`` after every ``optimizer.step()``: the k-th update (k = 1, 2, ...)
    then uses ``noam_lr(k)``. ``fused=True`` updates all parameters in a few fused kernels
    instead of several small ones per parameter tensor (the same update, up to rounding).

    Returns:
        ``(optimizer, scheduler)``.
    """
    optimizer = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9,
                                 **({"fused": True} if fused else {}))
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda i: noam_lr(i + 1, d_model, warmup_steps, factor)
    )
    return optimizer, scheduler


# --------------------------------------------------------------------------- training loop


@dataclass(frozen=True)
class TrainConfig:
    """Settings of a training run (the model's own settings live in ``TransformerConfig``)."""

    max_tokens: int = 4096  # padded tokens per batch (the paper: ~25k src + 25k tgt, Sec. 5.1)
    epochs: int = 10  # passes over the training data (stops earlier if max_steps is reached)
    max_steps: int | None = None  # optimiser steps in total; None = no limit
    warmup_steps: int = 4000  # Eq. (3), Sec. 5.3
    lr_factor: float = 1.0  # multiplier on Eq. (3); 1.0 = the paper
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
        self.model.train()
        if self.cuda_graphs:  # a new iteration: outputs of the previous replay may be reused
            torch.compiler.cudagraph_mark_step_begin()
        loss = self.loss(batch.src, batch.tgt_in, batch.tgt_out)
        self.optimizer.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()  # a no-op scaling unless fp16
        if self.clip_grad_norm is not None:
            self.scaler.unscale_(self.optimizer)
            nn.utils.clip_grad_norm_(self.model.parameters(), self.clip_grad_norm)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        if self.scheduler is not None:
            self.scheduler.step()
        # CUDA graphs overwrite their outputs at the next replay: keep a copy
        return loss.detach().clone() if self.cuda_graphs else loss.detach()


def _diverged(value: float, step: int) -> FloatingPointError:
    return FloatingPointError(
        f"training loss is {value} at step {step}: the run diverged. "
        "Lower the learning rate (lr_factor), lengthen the warm-up or clip gradients "
        "(clip_grad_norm), then resume from the last checkpoint."
    )


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
    ):
        self.config = config
        self.device = get_device(config.device)
        self.model = model.to(self.device)
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
        self.optimizer, self.scheduler = make_optimizer(
            self.model, d_model, config.warmup_steps, config.lr_factor,
            fused=cuda if config.fused_adam is None else config.fused_adam,
        )
        self.sync_every = config.sync_every or (50 if cuda else 1)
        self.prefetch = cuda if config.prefetch is None else config.prefetch
        self.step = 0  # optimiser steps done
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
        self._step = TrainStep(
            self.model, self.optimizer, self.scheduler,
            label_smoothing=config.label_smoothing, pad_id=self.pad_id,
            amp_dtype=self.amp_dtype, scaler=self.scaler, clip_grad_norm=config.clip_grad_norm,
            compile=config.compile, compile_mode=config.compile_mode,
        )
        torch.manual_seed(config.seed)  # dropout masks

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
        values = torch.stack([loss for _, loss in pending]).tolist()  # the one host sync
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
        """Append to metrics.jsonl beside the checkpoints (transformer_book.runlog)."""
        if self.config.checkpoint_dir:
            append_metrics(Path(self.config.checkpoint_dir) / METRICS_FILE, records)

    def _batches(self, data: BatchedCorpus, epoch: int, start: int = 0):
        """``(host batch, device batch)`` pairs; with ``prefetch``, ids are checked on the host
        and copies start ahead (:func:`~transformer_book.batching.to_device_ahead`)."""
        batches = data.batches(epoch, start=start)
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
        """Mean cross-entropy (no smoothing, nats per target token) over ``data`` (default: val)."""
        data = self.val_data if data is None else data
        if data is None:
            raise ValueError("no validation data: pass val_data to Trainer or data here")
        self.model.eval()
        # The sum stays on the device, in float64 as a Python float would hold it (not on MPS)
        wide = torch.float32 if self.device.type == "mps" else torch.float64
        total, count = torch.zeros((), dtype=wide, device=self.device), 0
        for host, batch in self._batches(data, 0):
            with self._autocast():
                logits = self.model(batch.src, batch.tgt_in)
            total += label_smoothing_loss(logits, batch.tgt_out, 0.0, self.pad_id, "sum").to(wide)
            count += host.num_tgt_tokens  # counted on the host copy: no sync
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
        run_start = time.perf_counter()
        while not self._done() and not self.stop_requested:
            num_batches = self.train_data.num_batches(self.epoch)
            bar = tqdm(
                total=num_batches,
                initial=self.batch_in_epoch,
                disable=not cfg.progress,
                desc=f"epoch {self.epoch + 1}/{cfg.epochs}",
            )
            tokens, t0, losses = 0, time.perf_counter(), []
            pending: list[tuple[int, Tensor]] = []  # (step, loss on the device), not yet read
            for host, batch in self._batches(self.train_data, self.epoch, self.batch_in_epoch):
                pending.append((self.step + 1, self._step(batch)))
                self.step += 1
                tokens += host.num_tgt_tokens  # counted on the host copy: no sync
                self.history.lr.append((self.step, self.scheduler.get_last_lr()[0]))
                bar.update(1)
                self.batch_in_epoch += 1
                end_of_epoch = self.batch_in_epoch == num_batches
                if (len(pending) >= self.sync_every or end_of_epoch or self._done()
                        or self.stop_requested or self.step % cfg.checkpoint_every == 0
                        or (cfg.eval_every and self.step % cfg.eval_every == 0)):
                    losses += self._read_losses(pending)  # read before eval / checkpoints
                    bar.set_postfix(loss=f"{losses[-1]:.3f}", step=self.step)
                if end_of_epoch:  # move on before saving, so a resume starts the next epoch
                    self.epoch, self.batch_in_epoch = self.epoch + 1, 0
                    if cfg.average_last > 1:
                        self._snapshot()
                if self.val_data is not None and (
                    (cfg.eval_every and self.step % cfg.eval_every == 0)
                    or (not cfg.eval_every and end_of_epoch)
                ):
                    self.history.val_loss.append((self.step, self.evaluate()))
                    self._log_metrics([{"step": self.step, "epoch": self.epoch,
                                        "val_loss": self.history.val_loss[-1][1]}])
                    if cfg.progress:
                        bar.write(f"step {self.step}: val loss {self.history.val_loss[-1][1]:.4f}")
                done = self._done()
                if cfg.checkpoint_dir and (
                    self.step % cfg.checkpoint_every == 0 or done or end_of_epoch
                    or self.stop_requested
                ):
                    self.save_checkpoint(Path(cfg.checkpoint_dir) / "last.pt")
                if done or self.stop_requested:
                    break
            bar.close()
            if tokens:
                rate = tokens / (time.perf_counter() - t0)
                self.history.tokens_per_second.append((self.step, rate))
                self._log_metrics([{"step": self.step, "epoch": self.epoch,
                                    "tokens_per_second": rate}])
                if cfg.log_epochs:
                    val = self.history.val_loss[-1][1] if self.history.val_loss else float("nan")
                    print(f"epoch {self.epoch:3}/{cfg.epochs}  step {self.step:6}  "
                          f"train loss {sum(losses) / len(losses):.3f}  val loss {val:.3f}  "
                          f"{rate:9,.0f} tok/s  {time.perf_counter() - run_start:6.0f} s",
                          flush=True)
        return self.history

    # ------------------------------------------------------------------ averaging (Sec. 6.1)
    def _snapshot(self) -> None:
        """Keep this epoch's weights (on the CPU; and on disk, so a resumed run has them too)."""
        state = {k: v.detach().to("cpu", copy=True) for k, v in self.model.state_dict().items()}
        self.snapshots.append((self.epoch, state))
        if self.config.checkpoint_dir:
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

    def _done(self) -> bool:
        cfg = self.config
        return self.epoch >= cfg.epochs or (
            cfg.max_steps is not None and self.step >= cfg.max_steps
        )

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
        }

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
        self.step, self.epoch = state["step"], state["epoch"]
        self.batch_in_epoch = state["batch_in_epoch"]
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
