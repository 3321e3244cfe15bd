"""The CPU ladder and profile of chapter 11: what each change of the CPU speed run buys, on real
Multi30k batches of the cpu recipe, and where a training step's time goes.

The ladder (``transformer_lab.cpu_ladder``): fp32 on 1 thread -> 2 threads -> bf16
autocast (fused attention) -> bf16 with the plain attention kernel (the package's CPU bf16 path)
-> no dropout (a recipe change) -> torch.compile, each rung keeping the ones above, the rungs
taking turns round after round on the same batches; per rung target tokens/s and sentences/s
in every round, and the compile time apart. The profile: ``torch.profiler`` over warm steps of
the model of ``TransformerConfig.cpu()`` on the same batches, for fp32 with P_drop 0.1, bf16
with the fused attention kernel, and chapter 8's cpu configuration as it runs on a CPU with bf16
instructions (bf16, plain attention, no dropout), on 1 and on 2 threads; the operators' own time
in groups (matrix products, attention, dropout, the output layer's log-softmax, Adam, the rest).

Writes ``benchmarks/results/<machine>/cpu_ladder.json`` and ``cpu_profile.json``.

    .venv/bin/python benchmarks/cpu_ladder.py --quick                      # a smoke test
    .venv/bin/python benchmarks/cpu_ladder.py --machine cpu-2026-11-24 2>&1 | tee LOG
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import shlex
import sys
import time
from pathlib import Path

import torch
from flags import add_flags, results_folder
from transformer_book import describe_hardware
from transformer_book.config import model_config_for
from transformer_book.files import atomic_write
from transformer_book.step import native_cpu_bf16
from transformer_lab.cpu_ladder import (
    CPU_LADDER,
    CpuRung,
    compile_payoff,
    measure_cpu_ladder,
    profile_cpu_step,
    real_batches,
    summarize_ladder,
)
from transformer_lab.timing import format_table

#: The profiled settings (eager; the threads are set per run).
PROFILES = (
    CpuRung("fp32, P_drop 0.1"),
    CpuRung("bf16 autocast (fused attention), P_drop 0.1", precision="bf16 fused"),
    CpuRung("chapter 8's cpu configuration: bf16, plain attention, P_drop 0", precision="bf16",
            dropout=0.0),
)

LADDER_COLUMNS = [
    ("rung", "rung", "s"),
    ("tok/s (median)", "median_tokens_per_second", ",.0f"),
    ("sent/s", "median_sentences_per_second", ",.0f"),
    ("vs above", "vs_above", ".2f"),
    ("lowest", "vs_above_low", ".2f"),
    ("highest", "vs_above_high", ".2f"),
    ("vs first", "vs_first", ".2f"),
    ("spread", "spread", ".0%"),
]


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=10, help="batches (steps) per round")
    p.add_argument("--rounds", type=int, default=6, help="timed rounds after a warm-up round")
    p.add_argument("--profile-steps", type=int, default=10, help="profiled (active) steps")
    p.add_argument("--only", choices=("ladder", "profile"), default=None)
    p.add_argument("--note", default="", help="what else ran on the machine, for the record")
    # --threads: the threads of the multi-thread rungs (the others run on 1);
    # --quick: the tiny model, one round of 2 steps
    add_flags(p, "threads", "machine", "quick", threads=2)
    args = p.parse_args(argv)
    if args.quick:
        args.steps, args.rounds, args.profile_steps = 2, 1, 1
    batches, tokenizer = real_batches(args.steps)
    config = model_config_for(tokenizer, "tiny" if args.quick else "cpu")
    head = {"date": datetime.date.today().isoformat(),
            "hardware": describe_hardware(torch.device("cpu")).split(",")[0],
            "torch": torch.__version__, "native_bf16": native_cpu_bf16(),
            "command": "python " + shlex.join([sys.argv[0], *(argv or sys.argv[1:])]),
            "note": args.note, "config": {k: getattr(config, k) for k in (
                "d_model", "num_heads", "num_layers", "d_ff", "src_vocab_size")},
            "batches": [list(b.src.shape) + [b.tgt_in.shape[1], b.num_tgt_tokens]
                        for b in batches]}
    print(f"{head['hardware']}, torch {head['torch']}, native bf16: {head['native_bf16']}; "
          f"{len(batches)} batches of at most 1,500 padded tokens per round", flush=True)
    out = {}
    folder = results_folder(args.machine)
    if args.only != "ladder":
        profiles = []
        for threads in (1, args.threads):
            for setting in PROFILES:
                rung = dataclasses.replace(setting, threads=threads)
                got = profile_cpu_step(rung, config, batches, wait=2, warmup=1,
                                       active=args.profile_steps)
                print(f"\n{rung.name}, {threads} thread(s): {got['step_seconds']:.3f} s per "
                      f"step under the profiler\n{got.pop('table')}", flush=True)
                for group, seconds in got["groups"].items():
                    print(f"  {group:28} {seconds:7.3f} s  {seconds / got['total']:5.1%}")
                profiles.append(got)
        out["profile"] = {**head, "wait": 2, "warmup": 1, "active": args.profile_steps,
                          "profiles": profiles}
        if folder:
            write(folder / "cpu_profile.json", out["profile"])
    if args.only != "profile":
        rungs = [dataclasses.replace(r, threads=args.threads) if r.threads > 1 else r
                 for r in CPU_LADDER]
        start = time.perf_counter()
        rows = measure_cpu_ladder(config, batches, rungs=rungs, rounds=args.rounds,
                                  log=lambda line: print(line, flush=True))
        summary = summarize_ladder(rows)
        print("\n" + format_table(summary, LADDER_COLUMNS))
        compiled, eager = summary[-1], summary[-2]
        payoff = compile_payoff(compiled["compile_seconds"], compiled["vs_above"])
        print(f"\ntorch.compile: {compiled['compile_seconds']:.0f} s of compiling for "
              f"x{compiled['vs_above']:.2f} over '{eager['rung']}' (median of the rounds): on "
              f"600 s of training it saves {payoff['saved_seconds']:.0f} s, "
              f"{'pays off' if payoff['pays_off'] else 'does not pay off'}; break-even after "
              f"{payoff['break_even_seconds']:.0f} s")
        if compiled["note"]:
            print(f"note: {compiled['note']}")
        print(f"ladder wall time {time.perf_counter() - start:.0f} s")
        out["ladder"] = {**head, "steps": args.steps, "rounds": args.rounds,
                         "threads": args.threads, "rows": rows, "summary": summary,
                         "compile_payoff_600s": payoff}
        if folder:
            write(folder / "cpu_ladder.json", out["ladder"])
    return out


def write(path: Path, record: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(path) as f:
        f.write((json.dumps(record, indent=1) + "\n").encode())
    print(f"wrote {path}", flush=True)


if __name__ == "__main__":
    main()
