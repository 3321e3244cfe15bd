"""Sec. 5.3: the optimiser and the learning-rate schedule.

Adam with beta1 = 0.9, beta2 = 0.98, eps = 1e-9, and a learning rate that grows linearly for
``warmup_steps`` steps and then decays as the inverse square root of the step, Eq. (3):
:func:`noam_lr`, :func:`make_optimizer`. Not in the paper: :func:`linear_lr`, a linear warm-up
towards Eq. (3)'s peak, all of it times a linear decay that reaches zero when the run ends, for
short time budgets; :class:`TimePlan`, such a budget in seconds turned into a number of steps
once, so that the rate stays a function of the step.
"""

from __future__ import annotations

import bisect

import torch
from torch import nn

from transformer_book.config import SCHEDULES

__all__ = ["SCHEDULES", "TimePlan", "linear_lr", "make_optimizer", "noam_lr", "steps_within"]


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
    warm-up. In a run whose progress grows evenly with the steps (N steps in all), the highest
    rate is peak * (1 - progress at step warmup_steps) when N >= 2 * warmup_steps; a shorter run
    peaks before its warm-up ends, near step N/2, at about peak * N / (4 * warmup_steps). Li et
    al. (2020, "Budgeted training") found a linear decay to zero at the end of the budget robust
    and among the best budget-aware schedules (image and video tasks); in chapter 8's CPU runs
    it and Eq. (3) were within the seeds' spread.
    """
    if step < 1:
        raise ValueError(f"step counts from 1, got {step}")
    if warmup_steps < 1:
        raise ValueError(f"warmup_steps must be >= 1, got {warmup_steps}")
    peak = factor * d_model**-0.5 * warmup_steps**-0.5  # the peak of noam_lr
    return peak * min(step / warmup_steps, 1.0) * max(0.0, 1.0 - progress)


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
    callable returning the fraction of the run's steps done, e.g. steps done over
    :meth:`transformer_book.train.Trainer.total_steps`) read at each step;
    ``schedule="constant"`` its warm-up, then its peak held (no decay).

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
    elif schedule == "constant":
        rate = lambda i: linear_lr(i + 1, d_model, warmup_steps, factor)  # noqa: E731
    else:
        # after i steps the run is progress(i) done; the (i + 1)-th step uses this rate
        rate = lambda i: linear_lr(i + 1, d_model, warmup_steps, factor, progress(i))  # noqa: E731
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, rate)
    return optimizer, scheduler


#: A time budget becomes a number of steps once the pace has settled. The first steps pay for
#: allocations and thread start-up, and on a GPU for each batch shape met for the first time (on
#: an H200, many times the later pace for about 20 s: benchmarks/results/h200-2026-11-27/). The
#: pace is watched over two half-windows of ``PLAN_SHARE / 2`` of the budget each (at least
#: ``MIN_HALF`` seconds). The plan is made at the first step, after at least ``PLAN_AT`` steps
#: and both half-windows, at which a step of the last half-window took at least ``SETTLED`` times
#: as long as one of the half-window before (the steps no longer speed up by more than a
#: quarter); at the latest, once ``PLAN_LATEST`` of the budget is spent or less than a window of
#: it is left. The pace planned with is that of the last half-window.
PLAN_AT, PLAN_SHARE, MIN_HALF, SETTLED, PLAN_LATEST = 20, 0.1, 10.0, 0.8, 0.5


def steps_within(budget: float, step: int, elapsed: float, pace: float) -> int:
    """The step at which a run that is at ``step`` after ``elapsed`` seconds, taking ``pace``
    seconds a step, has spent ``budget`` seconds (at least ``step``: a spent budget ends it)."""
    return step + max(0, int((budget - elapsed) / max(pace, 1e-9)))


class TimePlan:
    """*Time budget*: the budget turned into a number of steps (``steps``), once, when the pace
    has settled (see ``PLAN_SHARE``), at the pace of the slowest rank; ``at`` is the step the
    plan was made at. A budget spent before then (a run of a few steps) ends the run where it
    is. The linear schedule's progress (:meth:`progress`) is 0 until the plan, then runs from 0
    at step ``at`` to 1 at the last step, so the rate does not jump when the plan is made.

    A checkpoint keeps ``steps``, ``pace`` and ``at``: a resumed run keeps the plan (the same
    rates at the same steps, even on another machine, whose budget in seconds is then not kept),
    and one resumed with another budget replans at once from the stored pace. The pace is per
    step: a run resumed with other batches per step (processes x ``accumulate``) keeps the
    plan's steps, not its seconds. Steps watched before a checkpoint are not stored: a run
    resumed before its plan watches its pace again."""

    def __init__(self, budget: float | None, steps: int | None = None, pace: float | None = None,
                 at: int = 0):
        self.budget, self.steps, self.pace, self.at = budget, steps, pace, at
        self.steps_seen: list[int] = []  # the steps done while waiting for the plan,
        self.times: list[float] = []  # and the seconds of training after each

    def waiting(self) -> bool:
        return self.budget is not None and self.steps is None

    def progress(self, done: int, total_steps) -> float:
        """The linear schedule's progress after ``done`` of ``total_steps()`` steps (see the
        class; not counted while waiting: with no plan yet, a run's steps may be unbounded)."""
        if self.waiting():
            return 0.0
        return min(1.0, max(0.0, (done - self.at) / max(1, total_steps() - self.at)))

    def _pace(self, since: float, until: float) -> float | None:
        """Seconds a step between the first step done at ``since`` or later and the last one
        done by ``until`` (None if that is not two steps)."""
        first = bisect.bisect_left(self.times, since)
        last = bisect.bisect_right(self.times, until) - 1
        if last <= first:
            return None
        steps = self.steps_seen[last] - self.steps_seen[first]
        return (self.times[last] - self.times[first]) / steps

    def update(self, step: int, seconds: float, dist) -> None:
        """After ``step``, ``seconds`` of training (the run's, a resumed run's earlier seconds
        included); ``dist``: the :class:`~transformer_book.distributed.Context`."""
        if not self.waiting():
            return
        (now,) = dist.max(seconds)  # alike on every rank
        self.steps_seen.append(step)
        self.times.append(now)
        half = max(PLAN_SHARE * self.budget / 2, MIN_HALF)
        late = now >= PLAN_LATEST * self.budget or self.budget - now < 2 * half
        if now >= self.budget:
            self.pace = None
        elif len(self.times) < PLAN_AT or not (late or now - self.times[0] >= 2 * half):
            return
        else:
            recent, before = self._pace(now - half, now), self._pace(now - 2 * half, now - half)
            if recent and (late or (before and recent >= SETTLED * before)):
                self.pace = recent
            elif late:  # (steps longer than a half-window: the pace of all those watched)
                self.pace = self._pace(self.times[0], now)
            else:
                return
        self.steps = step if self.pace is None else steps_within(self.budget, step, now, self.pace)
        self.at, self.steps_seen, self.times = step, [], []

    def state(self) -> dict:
        return {"budget": self.budget, "steps": self.steps, "pace": self.pace, "at": self.at}

    @classmethod
    def resumed(cls, budget: float | None, state: dict | None, step: int, seconds: float):
        """The plan of a run resumed at ``step`` after ``seconds``, with ``budget`` now
        (a checkpoint written before ``at`` was stored: 0)."""
        state = state or {}
        at = state.get("at", 0)
        if budget == state.get("budget"):
            return cls(budget, state.get("steps"), state.get("pace"), at)
        if budget is not None and state.get("pace"):  # another budget: replan at the same pace
            return cls(budget, steps_within(budget, step, seconds, state["pace"]), state["pace"],
                       at)
        return cls(budget)
