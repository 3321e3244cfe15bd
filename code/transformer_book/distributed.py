"""Training on several processes (one per GPU, or several CPU processes), launched by ``torchrun``.

Not in the paper (Sec. 5.2: "one machine with 8 NVIDIA P100 GPUs"): data parallelism with
``DistributedDataParallel`` (DDP); every rank holds the whole model, trains on its share of each
step's batches, and DDP averages the gradients. :func:`init` joins the process group (NCCL
between GPUs, gloo on the CPU) that ``torchrun`` describes (:func:`from_environment`).

A step takes ``world_size * accumulate`` consecutive batches of the epoch's seeded order,
shared between the ranks (:func:`shard_steps`), so the position in the data is one number,
``Trainer.batch_in_epoch``, and a run may resume with another number of processes. The ranks
agree through :meth:`Context.max` on what each reads alone (Ctrl-C, its clock for the time
budget), and draw different dropout masks (:func:`rank_seed`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

from transformer_book.utils import device_name


@dataclass(frozen=True)
class Context:
    """Where this process stands: its rank among ``world_size`` (``Context()``: one process)."""

    rank: int = 0  # global rank, 0 .. world_size - 1
    world_size: int = 1  # processes in the run (torchrun: nnodes * nproc_per_node)
    local_rank: int = 0  # rank on this machine (selects the GPU)

    @property
    def enabled(self) -> bool:
        """Whether there is more than one process (and so a process group to talk through)."""
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        """Rank 0: the one process that writes checkpoints and logs, and prints."""
        return self.rank == 0

    # ------------------------------------------------------------------ collectives
    def max(self, *values: float) -> list[float]:
        """Each value's maximum over the ranks (a CPU all-reduce in float64), for what each rank
        reads alone (its clock, Ctrl-C): all must take the same steps at the same learning
        rates, or the replicas would part, or one rank would wait for the others forever."""
        if not self.enabled:
            return [float(v) for v in values]
        tensor = torch.tensor(values, dtype=torch.float64)
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX, group=_control_group())
        return tensor.tolist()

    def sum(self, tensor: torch.Tensor) -> torch.Tensor:
        """The element-wise sum over ranks (the same result on every rank); ``tensor`` as is
        when single-process."""
        if not self.enabled:
            return tensor
        group = None if _backend_takes(tensor) else _control_group()
        out = tensor if group is None else tensor.cpu()
        dist.all_reduce(out, op=dist.ReduceOp.SUM, group=group)
        return out.to(tensor.device)

    def broadcast_text(self, text: str | None) -> str:
        """Rank 0's ``text`` on every rank (e.g. a tokenizer, so that all ranks share one)."""
        if not self.enabled:
            return text
        box = [text]
        dist.broadcast_object_list(box, src=0, group=_control_group())
        return box[0]


def _backend_takes(tensor: torch.Tensor) -> bool:
    """Whether the default group can reduce ``tensor`` where it lies (NCCL: CUDA only)."""
    return (dist.get_backend() == "nccl") == (tensor.device.type == "cuda")


_CONTROL = None  # a gloo group beside an NCCL one, for small host-side exchanges


def _control_group():
    """The group for small CPU tensors and objects: gloo. The default group when it is gloo;
    beside NCCL, a gloo group made once, so flags need no copy to the GPU (and no GPU sync)."""
    global _CONTROL
    if dist.get_backend() != "nccl":
        return None
    if _CONTROL is None:
        _CONTROL = dist.new_group(backend="gloo")
    return _CONTROL


TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK")


def from_environment() -> Context:
    """The :class:`Context` that ``torchrun`` describes in the environment (single-process
    when it sets nothing); ValueError when its variables are incomplete or out of range."""
    given = {k: os.environ.get(k) for k in TORCHRUN_VARS}
    if not any(given.values()):
        return Context()
    missing = [k for k, v in given.items() if v is None]
    if missing:
        raise ValueError(f"{', '.join(missing)} not set although {', '.join(k for k in given if k not in missing)} "
                         "is: start several processes with torchrun, which sets all three")
    try:
        rank, world, local = (int(given[k]) for k in TORCHRUN_VARS)
    except ValueError:
        raise ValueError(f"RANK, WORLD_SIZE, LOCAL_RANK must be integers, got {given}") from None
    if not (world >= 1 and 0 <= rank < world and 0 <= local <= rank):
        raise ValueError(f"RANK={rank}, WORLD_SIZE={world}, LOCAL_RANK={local} are inconsistent")
    return Context(rank, world, local)


def current() -> Context:
    """The :class:`Context` of the process group this process has joined (:func:`init`), or a
    single process when it has joined none."""
    if not (dist.is_available() and dist.is_initialized()):
        return Context()
    rank = dist.get_rank()
    return Context(rank, dist.get_world_size(), int(os.environ.get("LOCAL_RANK", rank)))


def device_for(ctx: Context, requested: str | None) -> str:
    """The device of this rank: with several processes, a CUDA device (or the default, on a
    CUDA machine) becomes ``cuda:LOCAL_RANK`` (NCCL needs one GPU per process); anything else
    is kept (e.g. ``cpu``)."""
    choice = device_name(requested)
    if ctx.enabled and torch.device(choice).type == "cuda":
        return f"cuda:{ctx.local_rank}"
    return choice


def init(ctx: Context, device: str | torch.device) -> None:
    """Join the process group that ``torchrun`` set up: NCCL when ``device`` is a GPU, gloo on
    the CPU. Does nothing for a single process (or when already joined)."""
    if not ctx.enabled or dist.is_initialized():
        return
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo",
                            rank=ctx.rank, world_size=ctx.world_size)


def data_parallel(model: nn.Module, ctx: Context, device: torch.device) -> nn.Module:
    """``model`` itself for one process, else ``model`` in ``DistributedDataParallel``."""
    if not ctx.enabled:
        return model
    from torch.nn.parallel import DistributedDataParallel

    return DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda"
                                   else None)


RANK_SEED = 1_000_003  # rank r seeds its dropout with seed + r * this (a prime, far from seeds)


def rank_seed(seed: int, rank: int, step: int = 0) -> int:
    """The seed of rank ``rank``'s dropout, so that each draws its own masks; after a resume at
    ``step``, ranks other than 0 draw anew (the checkpoint holds rank 0's generator)."""
    return seed + RANK_SEED * rank + step


def shutdown() -> None:
    """Leave the process group (if any)."""
    global _CONTROL
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
    _CONTROL = None


# --------------------------------------------------------------------------- sharding


def shard_steps(num_batches: int, start: int, per_step: int, ctx: Context) -> list[tuple[range, list[int]]]:
    """The optimiser steps of an epoch's ``num_batches`` from ``start`` on (the global
    ``Trainer.batch_in_epoch``), ``per_step`` batches each over all ranks: one ``(group, mine)``
    per step, ``group`` the consecutive positions it consumes (the last may be shorter),
    ``mine`` this rank's, every ``world_size``-th from ``rank`` (empty when a short last group
    has fewer batches than ranks)."""
    if per_step < ctx.world_size or per_step % ctx.world_size:
        raise ValueError(f"per_step={per_step} must be a multiple of world_size={ctx.world_size}")
    steps = []
    for first in range(start, num_batches, per_step):
        group = range(first, min(first + per_step, num_batches))
        steps.append((group, list(group[ctx.rank::ctx.world_size])))
    return steps


def token_shares(tokens: Sequence[int], group_tokens: int, world_size: int) -> list[float]:
    """Loss multipliers of a rank's batches, so that DDP's averaged gradient is the gradient of
    the mean loss per target token over the whole step: ``tokens[i] / group_tokens`` makes batch
    ``i``'s mean its part of the step's, ``* world_size`` undoes DDP's division by the ranks.
    Every rank knows every batch's tokens (on the host): no communication. One batch alone: 1.0.
    """
    if group_tokens <= 0:
        raise ValueError(f"a step needs target tokens, got {group_tokens}")
    return [n * world_size / group_tokens for n in tokens]


@dataclass(frozen=True)
class PlannedStep:
    """One optimiser step of an epoch, as this rank takes part in it."""

    group: range  # the consecutive batch positions the step consumes, over all ranks
    positions: list[int]  # this rank's batches among them
    shares: list[float]  # the loss multiplier of each (token_shares)
    tokens: int  # target tokens of the whole group


def plan_steps(target_tokens: Sequence[int], start: int, accumulate: int,
               ctx: Context) -> list[PlannedStep]:
    """The steps of the rest of an epoch, from batch ``start`` on (:func:`shard_steps`), with the
    loss shares of this rank's batches (:func:`token_shares`); ``target_tokens``: every batch's,
    in order; ``accumulate``: batches per step and rank. A rank left without a batch by a short
    last group trains on the group's first with share 0: it must still join DDP's all-reduce.
    """
    plan = []
    for group, mine in shard_steps(len(target_tokens), start, ctx.world_size * accumulate, ctx):
        tokens = sum(target_tokens[p] for p in group)  # over all ranks, on the host
        if mine:
            shares = token_shares([target_tokens[p] for p in mine], tokens, ctx.world_size)
        else:
            mine, shares = [group[0]], [0.0]
        plan.append(PlannedStep(group, mine, shares, tokens))
    return plan


def eval_positions(num_batches: int, ctx: Context) -> range | None:
    """The batches this rank evaluates: every ``world_size``-th from ``rank`` (None: all, for a
    single process)."""
    return range(ctx.rank, num_batches, ctx.world_size) if ctx.enabled else None
