"""The CPU ladder and the CPU profile of chapter 11: where a training step of chapter 8's cpu
configuration spends its time on a CPU, and what each change of the CPU speed run buys.

The ladder times the same training step (:class:`~transformer_book.step.TrainStep`: forward,
label-smoothed loss, backward, Adam, schedule) on real Multi30k batches of the cpu recipe
(at most 1,500 padded tokens), one change more per rung; each rung keeps the ones above it:

=========================  =========================================================================
rung                       what changes
=========================  =========================================================================
fp32, 1 thread             the cpu preset's model with the paper's P_drop 0.1, float32, one thread
2 threads                  two threads (the reader's two cores)
bf16 autocast              ``torch.autocast("cpu", torch.bfloat16)`` around the forward pass; attention
                           through PyTorch's fused CPU kernel (SDPA's default)
bf16, plain attention      the package's CPU bf16 path (``TrainStep(amp_dtype=torch.bfloat16)``,
                           ``TrainConfig.cpu_amp``): attention through SDPA's plain ("math") kernel
no dropout                 P_drop 0: a change of the **recipe** (what is computed), not of speed alone
torch.compile              forward + loss through ``torch.compile(fullgraph=True)`` (inductor); the
                           compile time is reported apart
=========================  =========================================================================

The rungs take turns: each round runs every rung on the same batches, so a slow spell of a
shared machine hits all of them, and every figure comes with its spread over the rounds.
"""

from __future__ import annotations

import itertools
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from transformer_book.batching import Batch

from transformer_lab.memory import quiet_stderr


@dataclass(frozen=True)
class CpuRung:
    """One rung of the CPU ladder: how the step runs."""

    name: str
    threads: int = 1
    precision: str = "fp32"  # "fp32", "bf16 fused" (autocast, fused attention), "bf16" (package)
    dropout: float = 0.1  # P_drop of the model (Sec. 5.4)
    compile: bool = False  # torch.compile(fullgraph=True) of forward + loss
    recipe_change: bool = False  # changes what is computed, not only how fast


CPU_LADDER: tuple[CpuRung, ...] = (
    CpuRung("fp32, 1 thread"),
    CpuRung("2 threads", threads=2),
    CpuRung("bf16 autocast", threads=2, precision="bf16 fused"),
    CpuRung("bf16, plain attention", threads=2, precision="bf16"),
    CpuRung("no dropout", threads=2, precision="bf16", dropout=0.0, recipe_change=True),
    CpuRung("torch.compile", threads=2, precision="bf16", dropout=0.0, compile=True),
)

PRECISIONS = ("fp32", "bf16 fused", "bf16")


class BF16Forward(nn.Module):
    """``model``'s forward pass under ``torch.autocast("cpu", torch.bfloat16)``.

    With ``plain_attention=False`` attention keeps SDPA's default (fused) CPU kernel: the rung
    "bf16 autocast", which the package's step does not offer. With ``plain_attention=True`` it
    computes exactly what ``TrainStep(amp_dtype=torch.bfloat16)`` computes on a CPU, with the two
    contexts written as ``with`` statements, which ``torch.compile(fullgraph=True)`` can trace.
    """

    def __init__(self, model: nn.Module, *, plain_attention: bool) -> None:
        super().__init__()
        self.model, self.plain_attention = model, plain_attention
        self.config = model.config

    def forward(self, src: Tensor, tgt: Tensor) -> Tensor:
        if self.plain_attention:
            with torch.autocast("cpu", dtype=torch.bfloat16), sdpa_kernel(SDPBackend.MATH):
                return self.model(src, tgt)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return self.model(src, tgt)


def real_batches(n: int, *, max_tokens: int = 1500, vocab_size: int = 8000, seed: int = 0,
                 data_dir=None) -> tuple[list[Batch], object]:
    """The first ``n`` training batches of Multi30k (epoch 0, shuffled with ``seed``), batched as
    the cpu recipe batches them (at most ``max_tokens`` padded tokens), and the tokenizer.

    Needs the data (``MULTI30K_DIR`` or ``data_dir``); the tokenizer comes from the cache.
    """
    from transformer_book.config import TransformerConfig
    from transformer_book.corpus import prepare_run_data
    from transformer_book.data import load_multi30k

    tokenizer, corpus, _ = prepare_run_data(load_multi30k("train", data_dir), None,
                                            max_tokens=max_tokens,
                                            max_len=TransformerConfig.cpu().max_len, seed=seed,
                                            vocab_size=vocab_size)
    return list(itertools.islice(corpus.batches(0), n)), tokenizer


def make_cpu_step(rung: CpuRung, config, *, seed: int = 0, warmup_steps: int = 200,
                  lr_factor: float = 0.45, traceable_bf16: bool = False):
    """A fresh model of ``config`` (with the rung's dropout, seeded with ``seed``) and its
    training step as the rung runs it: ``(step, model)``.

    The optimiser and schedule are the cpu recipe's (:func:`~transformer_book.schedule.
    make_optimizer`, Eq. (3) with ``warmup_steps`` and ``lr_factor``), the loss label-smoothed
    (0.1). ``traceable_bf16``: run the rung "bf16" through :class:`BF16Forward` (the same
    computation) instead of the package's autocast.
    """
    from transformer_book.model import Transformer
    from transformer_book.schedule import make_optimizer
    from transformer_book.step import TrainStep

    if rung.precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {rung.precision!r}")
    torch.manual_seed(seed)
    model = Transformer(config.replace(dropout=rung.dropout))
    optimizer, scheduler = make_optimizer(model, config.d_model, warmup_steps, lr_factor)
    net, amp = model, None
    if rung.precision == "bf16 fused":
        net = BF16Forward(model, plain_attention=False)
    elif rung.precision == "bf16" and traceable_bf16:
        net = BF16Forward(model, plain_attention=True)
    elif rung.precision == "bf16":
        amp = torch.bfloat16  # the package's CPU bf16 path (transformer_book.step.autocast)
    step = TrainStep(net, optimizer, scheduler, label_smoothing=0.1, pad_id=config.pad_id,
                     amp_dtype=amp, compile=rung.compile)
    return step, model


def first_call(rung: CpuRung, config, batch: Batch, seed: int):
    """Build the rung's step and make its first call (for a compiled step: the first
    compilation): ``(step, note, failed_seconds)``. A compiled bf16 rung whose package step
    cannot be compiled with ``fullgraph=True`` falls back to :class:`BF16Forward`; the note says
    so, and ``failed_seconds`` is the time the failed attempt took (not compile time)."""
    start = time.perf_counter()
    step, _ = make_cpu_step(rung, config, seed=seed)
    try:
        step(batch)
        return step, "", 0.0
    except Exception as error:  # dynamo's errors share no public base class
        if not (rung.compile and rung.precision == "bf16"):
            raise
        reason = f"{type(error).__name__}: {str(error).splitlines()[0][:120]}"
    torch._dynamo.reset()
    failed = time.perf_counter() - start
    step, _ = make_cpu_step(rung, config, seed=seed, traceable_bf16=True)
    step(batch)
    return step, (f"the package's bf16 step did not compile with fullgraph=True ({reason}); "
                  "compiled the same computation with the autocast and kernel contexts as "
                  "with-statements (BF16Forward)"), failed


def _sentences(batch: Batch) -> int:
    return int((batch.tgt_out != batch.pad_id).any(dim=1).sum())


def measure_cpu_ladder(config, batches: Sequence[Batch], *, rungs: Sequence[CpuRung] = CPU_LADDER,
                       rounds: int = 5, seed: int = 0,
                       log: Callable[[str], None] | None = None) -> list[dict]:
    """Time each rung on ``batches``: one untimed warm-up round (for a compiled rung it
    compiles), then ``rounds`` timed rounds in which the rungs take turns.

    Args:
        config: the model's :class:`~transformer_book.config.TransformerConfig` (its dropout is
            replaced by each rung's).
        batches: the batches of one round (the same in every round and for every rung).
        rungs: the ladder, in order.
        rounds: timed rounds.
        seed: seeds every rung's model.
        log: called with a line per rung and round.

    Returns:
        One dict per rung: ``rung``, ``threads``, ``precision``, ``dropout``, ``compile``,
        ``recipe_change``, ``steps`` (per round), ``target_tokens`` and ``sentences`` (per round),
        ``seconds`` (one per timed round), ``tokens_per_second`` and ``sentences_per_second``
        (per round), ``warmup_seconds`` (the untimed round), ``compile_seconds`` (compiled rungs:
        the warm-up round's time beyond the median timed round), ``note``.
    """
    if rounds < 1 or not batches:
        raise ValueError(f"need rounds >= 1 and at least one batch, got {rounds}, {len(batches)}")
    threads = torch.get_num_threads()
    tokens = sum(b.num_tgt_tokens for b in batches)
    sentences = sum(_sentences(b) for b in batches)
    steps, rows = {}, []
    for rung in rungs:
        rows.append({"rung": rung.name, "threads": rung.threads, "precision": rung.precision,
                     "dropout": rung.dropout, "compile": rung.compile,
                     "recipe_change": rung.recipe_change, "steps": len(batches),
                     "target_tokens": tokens, "sentences": sentences, "seconds": [],
                     "warmup_seconds": None, "compile_seconds": None, "note": ""})
    try:
        for r in range(rounds + 1):
            for rung, row in zip(rungs, rows, strict=True):
                torch.set_num_threads(rung.threads)
                start = time.perf_counter()
                if r == 0:
                    steps[rung.name], row["note"], failed = first_call(rung, config, batches[0],
                                                                        seed)
                    start += failed  # a failed compile attempt is not compile time
                    rest = batches[1:]
                else:
                    rest = batches
                loss = None
                for batch in rest:
                    loss = steps[rung.name](batch)
                if loss is not None:
                    float(loss)  # the loss as a loop reads it (on a CPU: no queue to wait for)
                seconds = time.perf_counter() - start
                if r == 0:
                    row["warmup_seconds"] = seconds
                else:
                    row["seconds"].append(seconds)
                if log:
                    log(f"round {r}{' (warm-up)' if r == 0 else ''}  {rung.name:>22}  "
                        f"{seconds:7.2f} s  {tokens / seconds:8,.0f} target tokens/s")
    finally:
        torch.set_num_threads(threads)
    for row in rows:
        row["tokens_per_second"] = [tokens / s for s in row["seconds"]]
        row["sentences_per_second"] = [sentences / s for s in row["seconds"]]
        if row["compile"]:
            row["compile_seconds"] = row["warmup_seconds"] - statistics.median(row["seconds"])
    return rows


def summarize_ladder(rows: Sequence[dict]) -> list[dict]:
    """Per rung: median and best target tokens/s and sentences/s, the spread of the rounds
    (slowest / fastest - 1), and against the rung above, round by round (the two ran
    back to back in each round): the median, lowest and highest ratio of their tokens/s, and
    ``faster_every_round`` / ``slower_every_round``. ``vs_first``: median tokens/s over the
    first rung's."""
    out = []
    for i, row in enumerate(rows):
        tps = row["tokens_per_second"]
        line = {"rung": row["rung"], "recipe_change": row["recipe_change"],
                "median_tokens_per_second": statistics.median(tps),
                "best_tokens_per_second": max(tps),
                "median_sentences_per_second": statistics.median(row["sentences_per_second"]),
                "spread": max(row["seconds"]) / min(row["seconds"]) - 1,
                "rounds": len(tps), "compile_seconds": row["compile_seconds"],
                "note": row["note"]}
        line["vs_first"] = line["median_tokens_per_second"] / statistics.median(
            rows[0]["tokens_per_second"])
        if i > 0:
            ratios = [a / b for a, b in zip(tps, rows[i - 1]["tokens_per_second"], strict=True)]
            line |= {"vs_above": statistics.median(ratios), "vs_above_low": min(ratios),
                     "vs_above_high": max(ratios), "faster_every_round": min(ratios) > 1,
                     "slower_every_round": max(ratios) < 1}
        out.append(line)
    return out


def compile_payoff(compile_seconds: float, speedup: float, budget: float = 600.0) -> dict:
    """Whether compiling pays off within a training budget of ``budget`` seconds.

    Compiling takes ``compile_seconds`` of the budget; the compiled step then runs ``speedup``
    times as fast as the eager one. The compiled run does the eager run's work in
    ``compile_seconds + budget / speedup``; it pays off when that is less than ``budget``.

    Returns:
        ``saved_seconds`` (training time saved on ``budget`` seconds of eager work, before the
        compile time), ``pays_off``, and ``break_even_seconds`` (the eager training time from
        which compiling pays off; inf if the compiled step is not faster).
    """
    saved = budget * (1 - 1 / speedup)
    break_even = compile_seconds / (1 - 1 / speedup) if speedup > 1 else float("inf")
    return {"saved_seconds": saved, "pays_off": compile_seconds < saved,
            "break_even_seconds": break_even}


# ------------------------------------------------------------------------------ the profile

PROFILE_GROUPS = ("matrix products", "attention", "dropout", "log-softmax (output layer)", "Adam",
                  "the rest")

_MATMULS = {"aten::mm", "aten::addmm"}
_DROPOUT = {"aten::bernoulli_", "aten::native_dropout", "aten::native_dropout_backward"}
_LOG_SOFTMAX = {"aten::_log_softmax", "aten::_log_softmax_backward_data"}
# The plain ("math") attention kernel is made of batched products and a softmax; the linear
# layers use mm/addmm and the loss a log-softmax, so these names belong to attention alone.
_MATH_ATTENTION = {"aten::bmm", "aten::_softmax", "aten::_softmax_backward_data"}


def _ancestors(event):
    event = event.cpu_parent
    while event is not None:
        yield event.name
        event = event.cpu_parent


def profile_group(event) -> str:
    """The group of :data:`PROFILE_GROUPS` a profiled operator belongs to.

    Everything Adam's ``step`` runs is "Adam"; the fused CPU attention kernel
    (``_scaled_dot_product_flash_attention_for_cpu`` and its backward) and the plain kernel's
    batched products and softmax (and any operator called inside SDPA) are "attention";
    ``aten::mm`` and ``aten::addmm`` (the linear layers, the output layer included) "matrix
    products"; the Bernoulli masks of dropout "dropout"; the loss's log-softmax and its
    backward "log-softmax (output layer)".
    """
    name, up = event.name, list(_ancestors(event))
    if name.startswith("Optimizer.step") or any(a.startswith("Optimizer.step") for a in up):
        return "Adam"
    if ("scaled_dot_product" in name or name in _MATH_ATTENTION
            or any("scaled_dot_product" in a for a in up)):
        return "attention"
    if name in _MATMULS:
        return "matrix products"
    if name in _DROPOUT:
        return "dropout"
    if name in _LOG_SOFTMAX:
        return "log-softmax (output layer)"
    return "the rest"


def grouped_profile(events) -> dict[str, float]:
    """Operators' own CPU time (seconds) per group of :data:`PROFILE_GROUPS`, summed over the
    profiled events (``prof.events()``)."""
    groups = dict.fromkeys(PROFILE_GROUPS, 0.0)
    for e in events:
        groups[profile_group(e)] += e.self_cpu_time_total / 1e6
    return groups


def profile_cpu_step(rung: CpuRung, config, batches: Sequence[Batch], *, wait: int = 1,
                     warmup: int = 1, active: int = 2, seed: int = 0, row_limit: int = 10) -> dict:
    """Profile warm training steps as ``rung`` runs them (threads, precision, dropout; eager):
    ``torch.profiler`` with ``schedule(wait, warmup, active)``: the first ``wait`` steps run
    without the profiler, the next ``warmup`` are profiled and discarded, and the ``active``
    ones after them recorded, so one-time costs (Adam creating its state, first calls) stay out.

    Returns:
        ``groups`` (own CPU seconds per active step, per group of :data:`PROFILE_GROUPS`),
        ``total`` (their sum), ``step_seconds`` (the active steps' wall time per step, under the
        profiler), ``top`` (the operators with the most own time: ``name``, ``seconds`` and
        ``calls`` per step), ``sdpa_backward`` (own seconds per step of the fused attention
        kernel's backward), ``table`` (the profiler's own table).
    """
    from torch.profiler import ProfilerActivity, profile, schedule

    threads = torch.get_num_threads()
    torch.set_num_threads(rung.threads)
    try:
        step, _ = make_cpu_step(rung, config, seed=seed)
        n = wait + warmup + active
        ring = itertools.cycle(batches)
        with quiet_stderr(), profile(activities=[ProfilerActivity.CPU],
                                      schedule=schedule(wait=wait, warmup=warmup,
                                                        active=active)) as prof:
            for i in range(n):
                if i == wait + warmup:
                    start = time.perf_counter()
                float(step(next(ring)))
                prof.step()  # the schedule counts steps here
            step_seconds = (time.perf_counter() - start) / active
    finally:
        torch.set_num_threads(threads)
    events = prof.events()
    groups = {k: v / active for k, v in grouped_profile(events).items()}
    averages = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    top = [{"name": e.key, "seconds": e.self_cpu_time_total / 1e6 / active,
            "calls": e.count / active} for e in averages[:row_limit]]
    sdpa_backward = sum(e.self_cpu_time_total for e in averages
                        if "flash_attention" in e.key and "backward" in e.key) / 1e6 / active
    return {"rung": rung.name, "threads": rung.threads, "precision": rung.precision,
            "dropout": rung.dropout, "groups": groups, "total": sum(groups.values()),
            "step_seconds": step_seconds, "top": top, "sdpa_backward": sdpa_backward,
            "table": prof.key_averages().table(sort_by="self_cpu_time_total",
                                               row_limit=row_limit, max_name_column_width=55)}


def format_profile_groups(profiles: Sequence[dict], labels: Sequence[str] | None = None) -> str:
    """A table of :func:`profile_cpu_step` results: one line per group, one column per profile
    (its operators' own seconds per step and their share), and the total."""
    from transformer_lab.timing import format_table

    labels = list(labels) if labels is not None else [p["rung"] for p in profiles]
    rows = [{"group": g, **{f"c{i}": f"{p['groups'][g]:.3f} s {p['groups'][g] / p['total']:4.0%}"
                           for i, p in enumerate(profiles)}} for g in PROFILE_GROUPS]
    rows.append({"group": "total", **{f"c{i}": f"{p['total']:.3f} s 100%"
                                      for i, p in enumerate(profiles)}})
    columns = [("group", "group", "s")] + [(label, f"c{i}", "s") for i, label in enumerate(labels)]
    return format_table(rows, columns)


__all__ = ["CPU_LADDER", "PROFILE_GROUPS", "BF16Forward", "CpuRung", "compile_payoff",
           "format_profile_groups", "grouped_profile", "make_cpu_step", "measure_cpu_ladder", "profile_cpu_step",
           "profile_group", "real_batches", "summarize_ladder"]
