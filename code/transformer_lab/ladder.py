"""The GPU throughput ladder: the same training step with one speed feature more per rung, ours
and ``torch.nn.Transformer`` side by side (chapter 11's CPU ladder is
:mod:`~transformer_lab.cpu_ladder`).

Each rung keeps everything the rungs above it switched on:

========================  ============================================================================
rung                      what changes
========================  ============================================================================
eager baseline            the plain loop: a fresh host-to-device copy per batch, the model checks the
                          token ids on every forward (reads min/max back), the loss is read every step
no host syncs             ids checked on the host before the copy, batches pinned and copied ahead
                          (``non_blocking``), losses read every ``read_every`` steps in one transfer
fused Adam                ``torch.optim.Adam(fused=True)``: a few kernels for all parameters
flash SDPA                ``sdpa_kernel([FLASH_ATTENTION, EFFICIENT_ATTENTION])`` (CUDA only; on a
                          CPU, SDPA already picks its fused kernel)
torch.compile             forward + loss through ``torch.compile(fullgraph=True)``
CUDA graphs               ``mode="reduce-overhead"``: the step's kernels replayed as one graph (CUDA only)
larger batch              four times the sentences per step
========================  ============================================================================

Every step is :class:`transformer_book.step.TrainStep`, the step :class:`~transformer_book.train.Trainer`
runs, with the paper's Adam and schedule and label smoothing 0.1; the batches are synthetic
(fixed shapes, no padding: speed depends on shapes, not on which ids the tokens are).
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import cycle, islice

import torch
from torch import nn
from transformer_book.batching import Batch, check_token_ids, to_device_ahead

from transformer_lab.throughput import count_train_flops, synthetic_batch
from transformer_lab.timing import gpu_peak_tflops, sync


@dataclass(frozen=True)
class Rung:
    """One rung of the ladder: which speed features are on."""

    name: str
    sync_free: bool = False  # host-side id checks, pinned batches copied ahead, rare loss reads
    fused_adam: bool = False  # torch.optim.Adam(fused=True)
    fused_sdpa: bool = False  # restrict SDPA to the flash / memory-efficient kernels (CUDA)
    compile: bool = False  # torch.compile(fullgraph=True) of forward + loss
    cuda_graphs: bool = False  # torch.compile(mode="reduce-overhead") (CUDA)
    batch_scale: int = 1  # sentences per step, times the base batch
    cuda_only: bool = False  # meaningful on CUDA only: reported as skipped elsewhere


LADDER: tuple[Rung, ...] = (
    Rung("eager baseline"),
    Rung("no host syncs", sync_free=True),
    Rung("fused Adam", sync_free=True, fused_adam=True),
    Rung("flash SDPA", sync_free=True, fused_adam=True, fused_sdpa=True, cuda_only=True),
    Rung("torch.compile", sync_free=True, fused_adam=True, fused_sdpa=True, compile=True),
    Rung("CUDA graphs", sync_free=True, fused_adam=True, fused_sdpa=True, compile=True,
         cuda_graphs=True, cuda_only=True),
    Rung("larger batch", sync_free=True, fused_adam=True, fused_sdpa=True, compile=True,
         cuda_graphs=True, batch_scale=4),
)


def _sdpa_context(rung: Rung, device: torch.device):
    if not (rung.fused_sdpa and device.type == "cuda"):
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION])


def make_runner(model: nn.Module, rung: Rung, host_batches: Sequence[Batch], *,
                device: torch.device, amp_dtype: torch.dtype | None, read_every: int = 50,
                compile_on_cpu: bool = True) -> Callable[[int], None]:
    """``run(n)``: ``n`` training steps of ``model`` as ``rung`` prescribes, then a sync.

    The host batches are cycled through; each step moves one to the device the way the rung
    says (a plain copy, or pinned and ahead), and the loss is read back every step or every
    ``read_every`` steps.
    """
    from transformer_book.schedule import make_optimizer
    from transformer_book.step import TrainStep

    cfg = model.config
    cuda = device.type == "cuda"
    model.to(device).train()
    if hasattr(model, "check_token_ids"):
        model.check_token_ids = not rung.sync_free  # else checked on the host, below
    optimizer, scheduler = make_optimizer(model, cfg.d_model, 4000, fused=rung.fused_adam)
    compile_it = rung.compile and (cuda or compile_on_cpu)
    step = TrainStep(model, optimizer, scheduler, label_smoothing=0.1, pad_id=cfg.pad_id,
                     amp_dtype=amp_dtype, compile=compile_it,
                     compile_mode="reduce-overhead" if rung.cuda_graphs and cuda else None)

    def checked(batches):
        for b in batches:
            check_token_ids(b, cfg.src_vocab_size, cfg.tgt_vocab_size)
            yield b

    def run(n: int) -> None:
        stream = islice(cycle(host_batches), n)
        with _sdpa_context(rung, device):
            if not rung.sync_free:
                for b in stream:
                    float(step(b.to(device)))  # read every loss: the host waits each step
            else:
                pending = []
                for _, b in to_device_ahead(checked(stream), device):
                    pending.append(step(b))
                    if len(pending) >= read_every:
                        torch.stack(pending).tolist()  # one transfer for many steps
                        pending.clear()
                if pending:
                    torch.stack(pending).tolist()
        sync(device)

    return run


def measure_ladder(
    make_models: Callable[[], dict[str, nn.Module]],
    *,
    batch: int,
    src_len: int,
    tgt_len: int,
    device: torch.device | str = "cpu",
    amp_dtype: torch.dtype | None = None,
    rungs: Sequence[Rung] = LADDER,
    steps: int = 3,
    rounds: int = 3,
    compile_on_cpu: bool = False,
    config_name: str = "",
    log: Callable[[str], None] | None = None,
) -> list[dict]:
    """Climb the ladder: time every rung for every model, the models taking turns.

    Args:
        make_models: returns fresh models, name -> model (each with a ``config``); called once
            per rung, so every rung starts from the same weights.
        batch, src_len, tgt_len: the base batch shape (``batch_scale`` multiplies ``batch``).
        device, amp_dtype: where and in what precision.
        rungs: the rungs (default :data:`LADDER`).
        steps: steps per timed round; rounds: timed rounds after one untimed warm-up round
            (which also compiles); the fastest round of each model is kept.
        compile_on_cpu: compile on a CPU too (minutes per model); otherwise the compile rungs
            are reported as skipped there.
        config_name: a label for the ``config`` column.
        log: called with a line per measured row (e.g. ``print``), for long runs.

    Returns:
        One dict per (model, rung): ``model``, ``config``, ``rung``, ``device``,
        ``ms_per_step``, ``tokens_per_second`` (target tokens), ``mfu`` (None unless the GPU's
        peak is known), ``batch``, ``src_len``, ``tgt_len``, ``flops_per_step``,
        ``compile_seconds`` (the warm-up round's extra time), ``spread`` (slowest timed round /
        fastest - 1: the noise), ``note`` (why a rung was skipped or what it left out).
    """
    device = torch.device(device)
    cuda = device.type == "cuda"
    peak = gpu_peak_tflops(torch.cuda.get_device_name(device)) if cuda else None
    rows: list[dict] = []
    flops: dict[tuple[str, int], float] = {}
    for rung in rungs:
        B = batch * rung.batch_scale
        skip = ""
        if rung.cuda_only and not cuda:
            skip = "skipped: needs CUDA"
        elif rung.compile and not rung.batch_scale > 1 and not (cuda or compile_on_cpu):
            skip = "skipped: compiling takes minutes on a CPU (--compile-on-cpu)"
        models = make_models()
        if skip:
            for name in models:
                rows.append({"model": name, "config": config_name, "rung": rung.name,
                             "device": device.type, "ms_per_step": None,
                             "tokens_per_second": None, "mfu": None, "batch": B,
                             "src_len": src_len, "tgt_len": tgt_len, "note": skip})
            continue
        runners, times, first = {}, {}, {}
        for name, model in models.items():
            cfg = model.config
            host = []
            for seed in range(4):  # a few different batches, cycled through
                src, tgt_in, tgt_out = synthetic_batch(B, src_len, tgt_len, cfg.tgt_vocab_size,
                                                       pad_id=cfg.pad_id, seed=seed)
                host.append(Batch(src, tgt_in, tgt_out, cfg.pad_id))
            if (name, B) not in flops:
                flops[(name, B)] = count_train_flops(model.to(device), *(t.to(device) for t in (
                    host[0].src, host[0].tgt_in, host[0].tgt_out)), pad_id=cfg.pad_id,
                    amp_dtype=amp_dtype)
            runners[name] = make_runner(model, rung, host, device=device, amp_dtype=amp_dtype,
                                        compile_on_cpu=compile_on_cpu)
            times[name] = []
        for r in range(rounds + 1):
            for name, run in runners.items():
                start = time.perf_counter()
                run(steps)
                seconds = (time.perf_counter() - start) / steps
                if r == 0:
                    first[name] = seconds
                else:
                    times[name].append(seconds)
        for name in runners:
            seconds = min(times[name])
            n_flops = flops[(name, B)]
            compiled = rung.compile and (cuda or compile_on_cpu)
            row = {"model": name, "config": config_name, "rung": rung.name, "device": device.type,
                   "ms_per_step": seconds * 1e3, "tokens_per_second": B * tgt_len / seconds,
                   "mfu": (n_flops / seconds / 1e12 / peak) if peak else None, "batch": B,
                   "src_len": src_len, "tgt_len": tgt_len, "flops_per_step": n_flops,
                   "compile_seconds": (first[name] - seconds) * steps if compiled else None,
                   # how much slower the slowest timed round was: the machine's noise
                   "spread": max(times[name]) / seconds - 1,
                   "note": "" if rung.cuda_only or cuda else _cpu_note(rung, compile_on_cpu)}
            rows.append(row)
            if log:
                log(f"{config_name:>24}  {rung.name:>15}  {name:>17}  "
                    f"{row['ms_per_step']:9.1f} ms/step  {row['tokens_per_second']:11,.0f} tok/s")
    return rows


def _cpu_note(rung: Rung, compile_on_cpu: bool) -> str:
    """What a cumulative rung left out on a CPU."""
    left_out = []
    if rung.fused_sdpa:
        left_out.append("flash SDPA")
    if rung.compile and not compile_on_cpu:
        left_out.append("compile")
    if rung.cuda_graphs:
        left_out.append("CUDA graphs")
    return f"without {', '.join(left_out)} (CPU)" if left_out else ""


def ladder_table_rows(rows: Sequence[dict]) -> list[dict]:
    """The ladder as table rows: one per (config, rung), ours and theirs side by side, with the
    ratio ours / theirs and each model's speed-up over its own eager baseline."""
    by_key = {(r["config"], r["rung"], r["model"]): r for r in rows}
    out = []
    for r in rows:
        if r["model"] != "transformer_book":
            continue
        theirs = by_key.get((r["config"], r["rung"], "nn.Transformer"), {})
        ours_base = by_key.get((r["config"], "eager baseline", "transformer_book"), {})
        line = {"config": r["config"], "rung": r["rung"], "note": r.get("note", ""),
                "ours_ms": r["ms_per_step"], "theirs_ms": theirs.get("ms_per_step"),
                "ours_tok_s": r["tokens_per_second"],
                "theirs_tok_s": theirs.get("tokens_per_second"),
                "ours_mfu": r["mfu"], "theirs_mfu": theirs.get("mfu")}
        if r["tokens_per_second"] and line["theirs_tok_s"]:
            line["ratio"] = r["tokens_per_second"] / line["theirs_tok_s"]
        if r["tokens_per_second"] and ours_base.get("tokens_per_second"):
            line["speedup"] = r["tokens_per_second"] / ours_base["tokens_per_second"]
        out.append(line)
    return out


LADDER_COLUMNS = [
    ("rung", "rung", "s"),
    ("ours ms/step", "ours_ms", ".1f"),
    ("theirs ms/step", "theirs_ms", ".1f"),
    ("ours tok/s", "ours_tok_s", ",.0f"),
    ("theirs tok/s", "theirs_tok_s", ",.0f"),
    ("ours/theirs", "ratio", ".2f"),
    ("vs our eager", "speedup", ".2f"),
    ("ours MFU", "ours_mfu", ".1%"),
    ("theirs MFU", "theirs_mfu", ".1%"),
    ("note", "note", "s"),
]


def json_rows(rows: Sequence[dict]) -> list[dict]:
    """Rows with NaN/inf replaced by None, ready for ``json.dump``."""
    def clean(v):
        return None if isinstance(v, float) and not math.isfinite(v) else v
    return [{k: clean(v) for k, v in r.items()} for r in rows]


__all__ = ["LADDER", "LADDER_COLUMNS", "Rung", "json_rows", "ladder_table_rows", "make_runner",
           "measure_ladder"]
