"""Depth and normalisation, settled by a sweep: does the paper's six-layer post-norm model train
on Multi30k, and with which peak learning rate, warm-up, batch size and dropout?

A grid over layers (3, 6) x norm placement (post-norm as in the paper, pre-norm) x peak learning
rate x warm-up steps x batch size (target-side token budget, up to the paper's ~25k) x dropout x
seeds, each run trained with train_bleu.py (the paper's base width: d_model 512, 8 heads,
d_ff 2048, shared embeddings scaled by sqrt(d_model), label smoothing 0.1). The peak rate is
given directly and turned into Eq. (3)'s factor: peak = factor * d_model^-0.5 * warmup^-0.5.
Each run records whether it diverged (non-finite loss), its best validation loss, and its BLEU
(beam 4; weights chosen on validation, test 2016 reported), and whether it was cut off by
--time-limit before its epochs were done.

One file per run (benchmarks/results/<machine>/depth_norm_sweep_runs/), aggregated after every
run into benchmarks/results/<machine>/depth_norm_sweep.json, one row per run with the fields
layers, norm_first, peak_lr, warmup_steps, max_tokens, dropout, seed, diverged, cut_off,
best_val_loss, val_bleu, test2016_bleu, epochs_run, steps, train_seconds.

    .venv/bin/python benchmarks/depth_norm_sweep.py --quick            # CPU smoke test
    .venv/bin/python benchmarks/depth_norm_sweep.py --machine h100-2026-11-24 \\
        --layers 3 6 --norm post pre --peak-lr 3.5e-4 7e-4 1.4e-3 --warmup 1000 4000 \\
        --max-tokens 4096 16384 --dropout 0.1 --seeds 0 1 --epochs 40
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
from pathlib import Path

from experiments import run_one
from flags import add_flags, results_folder
from transformer_book.files import write_json

D_MODEL = 512  # the base width every run of the sweep uses


def lr_factor(peak_lr: float, warmup: int, d_model: int = D_MODEL) -> float:
    """Eq. (3)'s factor that makes the schedule peak at ``peak_lr`` (reached at step ``warmup``)."""
    return peak_lr * math.sqrt(d_model) * math.sqrt(warmup)


def run_name(layers: int, norm: str, peak: float, warmup: int, tokens: int, dropout: float,
             seed: int) -> str:
    return f"L{layers}-{norm}-lr{peak:g}-wu{warmup}-tok{tokens}-do{dropout:g}-s{seed}"


def aggregate(runs_dir: Path) -> list[dict]:
    rows = []
    for path in sorted(runs_dir.glob("*.json")):
        r = json.loads(path.read_text())
        s = r["settings"]
        rows.append({**s, "diverged": r["diverged"], "cut_off": r.get("cut_off"),
                     "best_val_loss": r["best_val_loss"], "val_bleu": r["val_bleu"],
                     "test2016_bleu": r["test2016_bleu"], "epochs_run": r.get("epochs_run"),
                     "steps": r.get("steps"), "train_seconds": r["train_seconds"],
                     "hardware": r.get("hardware")})
    return rows


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layers", type=int, nargs="+", default=[3, 6])
    p.add_argument("--norm", choices=["post", "pre"], nargs="+", default=["post", "pre"])
    p.add_argument("--peak-lr", type=float, nargs="+", default=[3.5e-4, 7e-4])
    p.add_argument("--warmup", type=int, nargs="+", default=[1000, 4000])
    p.add_argument("--max-tokens", type=int, nargs="+", default=[4096])
    p.add_argument("--dropout", type=float, nargs="+", default=[0.1])
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--epochs", type=int, default=40)
    p.add_argument("--time-limit", type=float, help="per run: stop after the epoch in progress")
    p.add_argument("--rerun", action="store_true")
    p.add_argument("--data-dir")
    # --threads, --device, --quick: passed on to every train_bleu.py run
    add_flags(p, "threads", "device", "machine", "quick", machine="local")
    args = p.parse_args(argv)

    out = results_folder(args.machine)
    runs_dir = out / "depth_norm_sweep_runs"
    grid = itertools.product(args.layers, args.norm, args.peak_lr, args.warmup, args.max_tokens,
                             args.dropout, args.seeds)
    for layers, norm, peak, warmup, tokens, dropout, seed in grid:
        name = run_name(layers, norm, peak, warmup, tokens, dropout, seed)
        run_argv = ["--preset", "base", "--num-layers", str(layers), "--dropout", str(dropout),
                    "--warmup-steps", str(warmup), "--lr-factor", f"{lr_factor(peak, warmup):.6g}",
                    "--max-tokens", str(tokens), "--epochs", str(args.epochs), "--seed", str(seed),
                    "--beam-size", "4", "--average-last", "5", "--name", name]
        if norm == "pre":
            run_argv.append("--norm-first")
        for flag in ("time_limit", "device", "threads", "data_dir"):
            if getattr(args, flag) is not None:
                run_argv += ["--" + flag.replace("_", "-"), str(getattr(args, flag))]
        if args.quick:
            run_argv.append("--quick")
        path = runs_dir / f"{name}.json"
        record = run_one(run_argv, path, rerun=args.rerun)
        if "settings" not in record:  # first time: add the grid point and the cut-off flag
            record["settings"] = {"layers": layers, "norm_first": norm == "pre", "peak_lr": peak,
                                  "warmup_steps": warmup, "max_tokens": tokens, "dropout": dropout,
                                  "seed": seed, "epochs": args.epochs}
            epochs_run = record.get("epochs_run")  # --quick trains 2 epochs: compare with that
            planned = record.get("train_config", {}).get("epochs", args.epochs)
            record["settings"]["epochs"] = planned
            record["cut_off"] = None if epochs_run is None else epochs_run < planned
            write_json(path, record)
        write_json(out / "depth_norm_sweep.json", aggregate(runs_dir))
    rows = aggregate(runs_dir)
    write_json(out / "depth_norm_sweep.json", rows)
    print(f"\n{'layers':>6} {'norm':>4} {'peak lr':>8} {'warmup':>6} {'tokens':>6} {'drop':>4} {'seed':>4}"
          f" {'diverged':>8} {'val loss':>8} {'test BLEU':>9}")
    for r in rows:
        loss = f"{r['best_val_loss']:.3f}" if r["best_val_loss"] is not None else "-"
        bleu = f"{r['test2016_bleu']:.2f}" if r["test2016_bleu"] is not None else "-"
        print(f"{r['layers']:6} {'pre' if r['norm_first'] else 'post':>4} {r['peak_lr']:8.2e} "
              f"{r['warmup_steps']:6} {r['max_tokens']:6} {r['dropout']:4} {r['seed']:4} "
              f"{str(r['diverged']):>8} {loss:>8} {bleu:>9}{'  (cut off)' if r['cut_off'] else ''}")
    print(f"wrote {out / 'depth_norm_sweep.json'}")
    return rows


if __name__ == "__main__":
    main()
