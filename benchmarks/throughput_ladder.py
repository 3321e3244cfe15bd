"""The throughput ladder: one speed feature more per rung, ours and nn.Transformer side by side.

For the package's small preset (TransformerConfig.small()) and for the paper's base model it prints ms/step, target
tokens/s and model FLOPs utilisation (MFU, on a GPU whose peak is known) for each rung: eager
baseline, no host syncs, fused Adam, flash SDPA, torch.compile, CUDA graphs, larger batch
(see ``transformer_lab.ladder``). Rungs that need CUDA are reported as skipped on a
CPU. The models take turns within each rung and the fastest of ``--rounds`` rounds is kept; the
``spread`` field of each row (slowest round / fastest - 1) shows how noisy the machine was.
Writes ``benchmarks/results/<machine>/throughput_ladder.json`` (one row per model, config and
rung).

    .venv/bin/python benchmarks/throughput_ladder.py --quick          # seconds: smoke test
    .venv/bin/python benchmarks/throughput_ladder.py --machine cpu-2026-11-23 --threads 2
    .venv/bin/python benchmarks/throughput_ladder.py --machine h100-2026-11-23   # on a GPU
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import time
from pathlib import Path

import torch
from flags import add_flags, results_folder, set_threads
from transformer_book import describe_hardware, get_device
from transformer_book.config import TransformerConfig
from transformer_book.files import write_json
from transformer_book.model import Transformer
from transformer_lab import (
    LADDER_COLUMNS,
    TorchTransformerBaseline,
    format_table,
    ladder_table_rows,
    matched_configs,
    measure_ladder,
)
from transformer_lab.ladder import json_rows


def model_pair(config: TransformerConfig):
    """A function returning our model and nn.Transformer with the same weights' seed and size."""
    def make() -> dict:
        torch.manual_seed(0)
        ours = Transformer(config)
        torch.manual_seed(0)
        theirs = TorchTransformerBaseline(config)
        n_ours = sum(p.numel() for p in ours.parameters())
        n_theirs = sum(p.numel() for p in theirs.parameters())
        if n_ours != n_theirs:
            raise AssertionError(f"the models differ in size: {n_ours} != {n_theirs}")
        return {"transformer_book": ours, "nn.Transformer": theirs}
    return make


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--configs", nargs="+", choices=("small", "base"), default=["small", "base"])
    p.add_argument("--vocab", type=int, default=8000, help="shared vocabulary size")
    p.add_argument("--small-batch", type=int, default=32, help="sentences per step (small)")
    p.add_argument("--small-len", type=int, default=24, help="source = target length (small)")
    p.add_argument("--base-batch", type=int, default=None,
                   help="sentences per step (base; default 256 on CUDA, 16 on a CPU)")
    p.add_argument("--base-len", type=int, default=None,
                   help="source = target length (base; default 64 on CUDA, 24 on a CPU)")
    p.add_argument("--steps", type=int, default=5, help="steps per timed round")
    p.add_argument("--rounds", type=int, default=3, help="timed rounds after one warm-up round")
    p.add_argument("--compile-on-cpu", action="store_true",
                   help="also climb the torch.compile rung on a CPU (minutes per model)")
    add_flags(p, "threads", "device", "machine", "quick")  # --quick: tiny config, one round
    args = p.parse_args(argv)

    set_threads(args)
    device = get_device(args.device)
    cuda = device.type == "cuda"
    amp_dtype = torch.bfloat16 if cuda else None
    print(f"Hardware: {describe_hardware(device)}; {'bf16 autocast' if cuda else 'fp32'}")
    runs = []
    if args.quick:
        runs.append(("tiny", TransformerConfig.tiny(dropout=0.1), 8, 10))
        args.steps, args.rounds = 2, 1
    else:
        if "small" in args.configs:
            runs.append(("small", TransformerConfig.small(), args.small_batch, args.small_len))
        if "base" in args.configs:
            runs.append(("base", TransformerConfig.base(), args.base_batch or (256 if cuda else 16),
                         args.base_len or (64 if cuda else 24)))
    start = time.perf_counter()
    rows: list[dict] = []
    for name, preset, batch, length in runs:
        config = matched_configs(preset.replace(src_vocab_size=args.vocab,
                                                tgt_vocab_size=args.vocab,
                                                max_len=max(512, length)))
        label = f"{name}, batch {batch} x {length}"
        print(f"\n{label}: d_model={config.d_model}, layers={config.num_layers}, "
              f"d_ff={config.d_ff}, vocab={args.vocab}, dropout {config.dropout} everywhere; "
              f"fastest of {args.rounds} rounds of {args.steps} steps", flush=True)
        got = measure_ladder(model_pair(config), batch=batch, src_len=length, tgt_len=length,
                             device=device, amp_dtype=amp_dtype, steps=args.steps,
                             rounds=args.rounds, compile_on_cpu=args.compile_on_cpu,
                             config_name=label, log=lambda line: print(line, flush=True))
        rows += got
        print(format_table(ladder_table_rows(got), LADDER_COLUMNS), flush=True)
        if args.machine:  # after each configuration, so a long run keeps what it measured
            write(rows, args, device)
    spreads = [r["spread"] for r in rows if r.get("spread") is not None]
    if spreads:
        print(f"\nnoise: the slowest timed round was {100 * max(spreads):.0f}% slower than the "
              f"fastest at worst (median {100 * statistics.median(spreads):.0f}%)")
    print(f"total wall time {time.perf_counter() - start:.0f} s")
    if args.machine:
        print(f"wrote {write(rows, args, device)}")
    return rows


def write(rows: list[dict], args, device) -> Path:
    out = results_folder(args.machine) / "throughput_ladder.json"
    write_json(out, {
        "hardware": describe_hardware(device), "torch": torch.__version__,
        "date": datetime.date.today().isoformat(), "threads": torch.get_num_threads(),
        "steps": args.steps, "rounds": args.rounds, "rows": json_rows(rows)})
    return out


if __name__ == "__main__":
    main()
