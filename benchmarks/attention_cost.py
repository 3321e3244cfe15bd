"""Attention's cost against sequence length: time and peak memory, fitted log-log slopes.

Measures Eq. (1) from scratch (``transformer_book.attention.scaled_dot_product_attention``,
which materialises the n x n scores) against PyTorch's fused
``torch.nn.functional.scaled_dot_product_attention``, from n = 64 up to ``--max-len``; then one
self-attention layer against chapter 1's recurrent networks on the same lengths (the paper's
Table 1: O(n^2 d) against O(n d^2), O(1) against O(n) sequential steps).

    .venv/bin/python benchmarks/attention_cost.py            # CPU: n = 64 .. 4096
    .venv/bin/python benchmarks/attention_cost.py --quick    # a few seconds
    .venv/bin/python benchmarks/attention_cost.py --max-len 65536 --dtype bf16   # on a GPU
"""

from __future__ import annotations

import argparse
import math
import time

import torch
from flags import add_flags, set_threads
from transformer_book import describe_hardware, get_device
from transformer_lab import (
    format_bytes,
    format_table,
    loglog_slope,
    measure_attention,
    measure_sequence_layers,
)

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def powers_of_two(lo: int, hi: int) -> list[int]:
    out, n = [], lo
    while n <= hi:
        out.append(n)
        n *= 2
    return out


def slopes(rows: list[dict], key: str, min_n: int) -> dict[str, float]:
    """Fitted exponent per implementation over the lengths >= min_n (where n^2 dominates)."""
    out = {}
    for name in dict.fromkeys(r["implementation"] for r in rows):
        pts = [(r["n"], r[key]) for r in rows if r["implementation"] == name and r["n"] >= min_n]
        try:
            out[name] = loglog_slope([p[0] for p in pts], [p[1] for p in pts])
        except ValueError:
            out[name] = math.nan
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--min-len", type=int, default=64)
    p.add_argument("--max-len", type=int, default=None,
                   help="longest n (default 4096 on CPU, 65536 on CUDA; OOM stops one method)")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--d-k", type=int, default=64)
    p.add_argument("--dtype", choices=sorted(DTYPES), default="fp32")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--no-memory", action="store_true", help="skip the peak-memory measurements")
    p.add_argument("--rnn-max-len", type=int, default=None,
                   help="longest n for the layer comparison (default: min(max-len, 2048))")
    add_flags(p, "threads", "device", "quick")  # --quick: n = 64 .. 512, two repeats
    args = p.parse_args(argv)

    set_threads(args)
    device = get_device(args.device)
    max_len = args.max_len or (65536 if device.type == "cuda" else 4096)
    repeats = args.repeats
    if args.quick:
        max_len, repeats = min(max_len, 512), 2
    lengths = powers_of_two(args.min_len, max_len)
    dtype = DTYPES[args.dtype]
    fit_from = lengths[len(lengths) // 2]  # fit the upper half: small n is dominated by overheads

    print(f"Hardware: {describe_hardware(device)}")
    print(f"Attention alone, Eq. (1): q, k, v of shape (B={args.batch}, H={args.heads}, n, "
          f"Dk={args.d_k}), {args.dtype}, fastest of {repeats} calls, no gradient")
    start = time.perf_counter()
    rows = measure_attention(lengths, batch=args.batch, heads=args.heads, d_k=args.d_k,
                             device=device, dtype=dtype, repeats=repeats,
                             memory=not args.no_memory)
    by = {(r["implementation"], r["n"]): r for r in rows}
    table = []
    for n in lengths:
        mine, sdpa = by[("from scratch", n)], by[("PyTorch SDPA", n)]
        table.append({
            "n": n, "mine_ms": mine["seconds"] * 1e3, "sdpa_ms": sdpa["seconds"] * 1e3,
            "ratio": mine["seconds"] / sdpa["seconds"], "mine_mem": mine["peak_bytes"],
            "sdpa_mem": sdpa["peak_bytes"], "score": mine["score_bytes"],
            "note": "; ".join(f"{r['implementation']}: {r['note']}" for r in (mine, sdpa)
                              if r["note"]),
        })
    print(format_table(table, [
        ("n", "n", "d"), ("from scratch ms", "mine_ms", ".3f"), ("SDPA ms", "sdpa_ms", ".3f"),
        ("scratch/SDPA", "ratio", ".2f"), ("scratch peak", "mine_mem", format_bytes),
        ("SDPA peak", "sdpa_mem", format_bytes), ("one n x n matrix", "score", format_bytes),
        ("note", "note", "s"),
    ]))
    t_slopes = slopes(rows, "seconds", fit_from)
    line = ", ".join(f"{k} {v:.2f}" for k, v in t_slopes.items())
    print(f"log-log slope of time for n >= {fit_from}: {line}   (2 = quadratic)")
    if not args.no_memory:
        m_slopes = slopes(rows, "peak_bytes", fit_from)
        line = ", ".join(f"{k} {v:.2f}" for k, v in m_slopes.items())
        print(f"log-log slope of peak memory for n >= {fit_from}: {line}")

    rnn_max = args.rnn_max_len or min(max_len, 2048)
    rnn_lengths = [n for n in lengths if n <= rnn_max]
    d_model = args.heads * args.d_k
    print()
    print(f"One layer of width D={d_model} against n (Table 1 of the paper): "
          f"input (B={args.batch}, n, D), {args.dtype}, no gradient")
    layer_rows = measure_sequence_layers(rnn_lengths, d_model=d_model, heads=args.heads,
                                         batch=args.batch, device=device, dtype=dtype,
                                         repeats=repeats)
    names = list(dict.fromkeys(r["implementation"] for r in layer_rows))
    lby = {(r["implementation"], r["n"]): r for r in layer_rows}
    ltable = []
    for n in rnn_lengths:
        row = {"n": n}
        for i, name in enumerate(names):
            row[f"t{i}"] = lby[(name, n)]["seconds"] * 1e3
        row["ratio"] = row["t1"] / row["t0"]
        ltable.append(row)
    print(format_table(ltable, [("n", "n", "d")]
                       + [(f"{name} ms", f"t{i}", ".3f") for i, name in enumerate(names)]
                       + [("Elman / attention", "ratio", ".2f")]))
    l_slopes = slopes(layer_rows, "seconds", rnn_lengths[len(rnn_lengths) // 2])
    print("log-log slope of time over the upper half of n: "
          + ", ".join(f"{k} {v:.2f}" for k, v in l_slopes.items()))
    print(f"total wall time {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
