"""Sec. 5: the training loop. Epochs of token-budget batches (Sec. 5.1), one optimiser step per
batch or group of batches (:class:`~transformer_book.step.TrainStep`), validation, checkpoints.

:meth:`Trainer.fit` reads like chapter 8's epoch: take the next batch, step, record; validate
when :meth:`~Trainer.should_eval` says so, write ``last.pt`` when :meth:`~Trainer.should_save`
does, end when :meth:`~Trainer.should_stop` does. What it trains, and what a checkpoint keeps,
is a :class:`~transformer_book.training_run.TrainingRun`: the model, Adam and its schedule, the
run's position and history (:mod:`~transformer_book.run_state`), its time budget
(:mod:`~transformer_book.budget`), the processes of a ``torchrun`` launch
(:mod:`~transformer_book.distributed`), the weights kept for averaging
(:mod:`~transformer_book.checkpoint`) and its records (:mod:`~transformer_book.runlog`).
"""

from __future__ import annotations

import time
from pathlib import Path

from transformer_book.batching import BatchedCorpus, device_batches
from transformer_book.distributed import eval_positions, plan_steps
from transformer_book.evaluation import mean_loss
from transformer_book.run_state import History
from transformer_book.training_run import TrainingRun


class Trainer(TrainingRun):
    """The training loop of Sec. 5: batches, label-smoothed loss, Adam + warm-up, checkpoints.

    Built as a :class:`~transformer_book.training_run.TrainingRun` (the same arguments: model,
    training data, config, and optionally ``val_data``, ``model_config``, ``extra``,
    ``distributed``). Over several processes every rank must call :meth:`fit` (and
    :meth:`evaluate`) alike: they exchange losses and flags.
    """

    # ------------------------------------------------------------------ the loop
    def fit(self) -> History:
        """Train until ``config.epochs`` epochs, ``config.max_steps`` steps or
        ``config.time_budget`` seconds are done, whichever comes first.

        Resumes where the trainer stands (after :meth:`load_checkpoint`: mid-epoch). Writes
        ``last.pt`` every ``checkpoint_every`` steps and at each epoch end; an interrupted run
        loses at most the steps since the last checkpoint.
        """
        from tqdm import tqdm  # the plain bar: works in terminals and notebooks alike

        self.clock.start()
        self.log.drop_unread()  # (those of an interrupted call)
        try:
            while not self.should_stop(*self._flags()):
                self._epoch(tqdm)
        finally:
            self.clock.stop()
        return self.history

    def _epoch(self, tqdm) -> None:
        """Train on the rest of the current epoch, or until the run must stop."""
        cfg = self.config
        targets = self.train_data.target_tokens(self.epoch)  # every rank knows every batch's
        plan = plan_steps(targets, self.batch_in_epoch, cfg.accumulate, self.dist)
        stream = self.batches(self.train_data, self.epoch,
                              positions=[p for planned in plan for p in planned.positions])
        bar = tqdm(total=len(targets), initial=self.batch_in_epoch,
                   disable=not (cfg.progress and self.dist.is_main),
                   desc=f"epoch {self.epoch + 1}/{cfg.epochs}")
        tokens, start, losses = 0, time.perf_counter(), []
        for planned in plan:  # one optimiser step: this rank's batches of the group, weighted
            parts = [(next(stream)[1], share) for share in planned.shares]
            loss = self.train_step.accumulate(parts, self.dist.world_size)
            self.step += 1
            self.batch_in_epoch += len(planned.group)
            tokens += planned.tokens
            self.log.step(self.step, loss, self.scheduler.get_last_lr()[0])
            bar.update(len(planned.group))
            end_of_epoch = self.batch_in_epoch == len(targets)
            out_of_time, stop = self._flags()  # read once per step: they can change any time
            self.stop_requested = self.stop_requested or stop
            stopping = self.should_stop(out_of_time, stop)
            if (self.log.unread >= self.sync_every or end_of_epoch or stopping
                    or self.step % cfg.checkpoint_every == 0 or self._eval_due()):
                losses += self.log.read_losses()  # read before validation and checkpoints
                bar.set_postfix(loss=f"{losses[-1]:.3f}", step=self.step)
            if end_of_epoch:  # move on before saving, so a resume starts the next epoch
                self.epoch, self.batch_in_epoch = self.epoch + 1, 0
                if cfg.average_last > 1:
                    self.snapshots.add(self.epoch, self.model)
            if self.should_eval(end_of_epoch, out_of_time):
                self.log.validation(self.step, self.epoch, self.evaluate())
                if cfg.progress and self.dist.is_main:
                    bar.write(f"step {self.step}: val loss {self.history.val_loss[-1][1]:.4f}")
            if self.should_save(end_of_epoch, stopping):
                self.save_checkpoint(Path(cfg.checkpoint_dir) / "last.pt")
            if stopping:
                break
        stream.close()
        bar.close()
        if tokens:
            self._end_epoch(tokens / (time.perf_counter() - start), losses, len(targets))

    def _end_epoch(self, tokens_per_second: float, losses: list[float], num_batches: int) -> None:
        """Record the throughput; with ``log_epochs``, print a line (rank 0)."""
        self.log.throughput(self.step, self.epoch, tokens_per_second)
        if self.config.log_epochs and self.dist.is_main:
            val = self.history.val_loss[-1][1] if self.history.val_loss else float("nan")
            # a run its time budget stopped inside an epoch: show how far it got
            at = (f"{self.epoch:3}" if self.batch_in_epoch == 0
                  else f"{self.epoch + self.batch_in_epoch / num_batches:5.1f}")
            print(f"epoch {at}/{self.config.epochs}  step {self.step:6}  "
                  f"train loss {sum(losses) / len(losses):.3f}  val loss {val:.3f}  "
                  f"{tokens_per_second:9,.0f} tok/s  {time.perf_counter() - self.clock.started:6.0f} s",
                  flush=True)

    def _eval_due(self) -> bool:
        return bool(self.config.eval_every) and self.step % self.config.eval_every == 0

    def should_eval(self, end_of_epoch: bool, out_of_time: bool) -> bool:
        """Validate now: every ``eval_every`` steps if set, else at the end of each epoch and
        when the time budget runs out."""
        if self.val_data is None:
            return False
        return self._eval_due() if self.config.eval_every else end_of_epoch or out_of_time

    def should_save(self, end_of_epoch: bool, stopping: bool) -> bool:
        """Write ``last.pt`` now: every ``checkpoint_every`` steps, at each epoch end and when
        the run stops (rank 0 only: the replicas are identical)."""
        return bool(self.config.checkpoint_dir) and self.dist.is_main and (
            self.step % self.config.checkpoint_every == 0 or end_of_epoch or stopping)

    def should_stop(self, out_of_time: bool, stop_requested: bool) -> bool:
        """End the run now: its epochs, steps or time are spent, or a stop was requested."""
        return stop_requested or self.budget.reached(self.step, self.epoch, out_of_time)

    def _flags(self) -> tuple[bool, bool]:
        """(out of time, stop requested), the same on every rank: each rank reads its own clock
        and signals, and they must stop at the same step. Over several ranks this also sets
        :meth:`elapsed` to the slowest rank's time, which the linear schedule reads."""
        stop = self.stop_requested
        if self.dist.enabled:
            stop, self.clock.agreed = self.dist.agree(stop, self._local_elapsed())
        return self.budget.out_of_time(), stop

    # ------------------------------------------------------------------ batches, validation
    def batches(self, data: BatchedCorpus, epoch: int, start: int = 0, positions=None):
        """``(host batch, device batch)`` pairs of ``data``'s ``epoch`` (from ``start``, or only
        the batches at ``positions``); with ``prefetch``, checked on the host and copied ahead."""
        return device_batches(data.batches(epoch, start=start, positions=positions), self.device,
                              ahead=self.prefetch, model=self.model)

    def evaluate(self, data: BatchedCorpus | None = None) -> float:
        """Mean cross-entropy (no smoothing, nats per target token) over ``data`` (default: val).

        On several processes each rank evaluates every ``world_size``-th batch and the sums are
        added up: every rank returns the same number, that of the whole data, in a
        ``world_size``-th of the time. Every rank must call it.
        """
        data = self.val_data if data is None else data
        if data is None:
            raise ValueError("no validation data: pass val_data to Trainer or data here")
        mine = eval_positions(data.num_batches(0), self.dist)
        return mean_loss(self.model, self.batches(data, 0, positions=mine), pad_id=self.pad_id,
                         amp_dtype=self.amp_dtype, ranks=self.dist)
