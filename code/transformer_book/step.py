"""Sec. 5: one training step (:class:`TrainStep`), chapter 8's plain step and chapter 11's
opt-in speed features, which change how the step runs, never what it computes."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from transformer_book.loss import label_smoothing_loss
from transformer_book.precision import autocast, autocast_dtype, native_cpu_bf16

# autocast_dtype and native_cpu_bf16 are precision's, importable from here too (chapters do)
__all__ = ["TrainStep", "autocast", "autocast_dtype", "native_cpu_bf16"]


class TrainStep:
    """One optimiser step of Sec. 5: forward, label-smoothed loss (Sec. 5.4), backward,
    (clipping,) Adam, schedule (Sec. 5.3).

    Called on one batch (:meth:`__call__`) with no speed feature on, it is chapter 8's plain
    step. :meth:`accumulate` is the general step (several batches, fp16 loss scaling,
    torch.compile, CUDA graphs, DDP); on one batch without those it computes exactly what the
    plain step computes (tests/test_step.py keeps the two paths alike). Both return the loss
    detached on the device, for the caller to read every few steps (a read makes the host wait
    for the GPU).

    Args:
        model: maps ``(src, tgt_in)`` to logits (B, T, V).
        optimizer, scheduler: from :func:`~transformer_book.schedule.make_optimizer`.
        label_smoothing, pad_id: of the loss (:func:`~transformer_book.loss.label_smoothing_loss`).
        amp_dtype: autocast dtype of the forward pass (:func:`autocast_dtype`; None: float32).
        clip_grad_norm: max gradient norm, or None.
        scaler, compile, compile_mode: (speed) a ``torch.amp.GradScaler`` for fp16; forward +
            loss (and so backward) through ``torch.compile(fullgraph=True)``, in that mode
            (``"reduce-overhead"``: CUDA graphs).
    """

    def __init__(self, model: nn.Module, optimizer, scheduler=None, *, label_smoothing: float,
                 pad_id: int | None, amp_dtype: torch.dtype | None = None, scaler=None,
                 clip_grad_norm: float | None = None, compile: bool = False,
                 compile_mode: str | None = None):
        self.model, self.optimizer, self.scheduler = model, optimizer, scheduler
        self.label_smoothing, self.pad_id = label_smoothing, pad_id
        self.amp_dtype, self.clip_grad_norm = amp_dtype, clip_grad_norm
        self.scaler = scaler or torch.amp.GradScaler("cuda", enabled=False)  # fp16 only
        self.cuda_graphs = compile and compile_mode in ("reduce-overhead", "max-autotune")
        self.loss = (torch.compile(self._loss, fullgraph=True, mode=compile_mode) if compile
                     else self._loss)

    @property
    def plain(self) -> bool:
        """Whether no speed feature is on (no compiled loss, no loss scaling)."""
        return self.loss == self._loss and not self.scaler.is_enabled()

    def __call__(self, batch) -> Tensor:
        """Train on ``batch`` (already on the model's device); returns its loss, detached."""
        if not self.plain:
            return self.accumulate([(batch, 1.0)])
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        with autocast(batch.src.device.type, self.amp_dtype):  # no-op in full precision
            logits = self.model(batch.src, batch.tgt_in)  # (B, T, V)
        loss = label_smoothing_loss(logits, batch.tgt_out, self.label_smoothing, self.pad_id)
        loss.backward()
        if self.clip_grad_norm is not None:
            nn.utils.clip_grad_norm_(self.model.parameters(), self.clip_grad_norm)
        self.optimizer.step()
        if self.scheduler is not None:
            self.scheduler.step()
        return loss.detach()

    # ------------------------------------------------------------------ the opt-in layer
    def _loss(self, src: Tensor, tgt_in: Tensor, tgt_out: Tensor) -> Tensor:
        """Forward and loss as one function of tensors, the part ``torch.compile`` takes."""
        with autocast(src.device.type, self.amp_dtype):
            logits = self.model(src, tgt_in)  # (B, T, V)
        return label_smoothing_loss(logits, tgt_out, self.label_smoothing, self.pad_id)

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
            # CUDA graphs overwrite their outputs at the next replay: copy the loss
            part = loss.detach().clone() if self.cuda_graphs else loss.detach()
            total = part if total is None else total + part
        if self.clip_grad_norm is not None:
            self.scaler.unscale_(self.optimizer)
            nn.utils.clip_grad_norm_(self.model.parameters(), self.clip_grad_norm)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        if self.scheduler is not None:
            self.scheduler.step()
        return total if world_size == 1 else total / world_size
