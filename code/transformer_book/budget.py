"""How long a run trains, and how far along it is (not in the paper, which trained for a number
of steps: 100,000 for the base model, Sec. 5.2).

A run ends after ``TrainConfig.epochs`` epochs, ``max_steps`` optimiser steps or
``time_budget`` seconds of training, whichever comes first. :class:`Clock` counts the seconds
(over every ``fit()`` call and across resumes); :class:`Budget` says whether the run is done
and how far along it is, :meth:`Budget.progress`, which the linear learning-rate schedule
(:func:`~transformer_book.schedule.linear_lr`) reads to decay to zero exactly when the run ends.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class Clock:
    """Seconds of training: every ``fit()`` call, and those before a resume.

    Attributes:
        seconds: the time of the finished calls (a checkpoint's ``train_seconds``).
        started: ``time.perf_counter()`` when the running call began, else None.
        agreed: over several processes, the slowest one's :meth:`read` as of the last step,
            which every process then uses (set by the training loop), else None.
    """

    def __init__(self, seconds: float = 0.0):
        self.seconds = seconds
        self.started: float | None = None
        self.agreed: float | None = None

    def start(self) -> None:
        self.started = time.perf_counter()

    def stop(self) -> None:
        self.seconds += time.perf_counter() - self.started
        self.started = self.agreed = None

    def read(self) -> float:
        """This process's seconds of training so far."""
        running = 0.0 if self.started is None else time.perf_counter() - self.started
        return self.seconds + running


class Budget:
    """The end of a run, and its progress towards it.

    Args:
        config: a :class:`~transformer_book.config.TrainConfig`: ``epochs``, ``max_steps``,
            ``time_budget`` (the attribute may be replaced between ``fit()`` calls).
        data: the training batches (a :class:`~transformer_book.batching.BatchedCorpus`).
        per_step: batches per optimiser step, over all processes (``world_size * accumulate``).
        elapsed: returns the seconds of training so far (e.g. ``Trainer.elapsed``).

    Raises:
        ValueError: ``time_budget`` is not a positive number of seconds.
    """

    def __init__(self, config, data, per_step: int, elapsed: Callable[[], float]):
        if config.time_budget is not None and not config.time_budget > 0:
            raise ValueError(f"time_budget must be a positive number of seconds, got "
                             f"{config.time_budget!r}")
        self.config, self.data, self.per_step, self.elapsed = config, data, per_step, elapsed
        self._total_steps: int | None = None

    def total_steps(self) -> int:
        """Steps the run takes if no time budget stops it first: ``config.epochs`` epochs,
        capped at ``config.max_steps``."""
        cfg = self.config
        total = sum(-(-self.data.num_batches(e) // self.per_step) for e in range(cfg.epochs))
        return total if cfg.max_steps is None else min(total, cfg.max_steps)

    def progress(self, steps_done: int) -> float:
        """Fraction of the run done, in [0, 1]: ``steps_done`` over :meth:`total_steps`, or
        the time over ``config.time_budget``, whichever is further along."""
        if self._total_steps is None:  # the data and the config are fixed by the first call
            self._total_steps = max(1, self.total_steps())
        done = steps_done / self._total_steps
        if self.config.time_budget is not None:
            done = max(done, self.elapsed() / self.config.time_budget)
        return min(1.0, done)

    def out_of_time(self) -> bool:
        return self.config.time_budget is not None and self.elapsed() >= self.config.time_budget

    def reached(self, step: int, epoch: int, out_of_time: bool | None = None) -> bool:
        """Whether a run at ``step`` in ``epoch`` is done (``out_of_time``: the answer of
        :meth:`out_of_time`, if already asked)."""
        cfg = self.config
        if out_of_time is None:
            out_of_time = self.out_of_time()
        return (epoch >= cfg.epochs or (cfg.max_steps is not None and step >= cfg.max_steps)
                or out_of_time)
