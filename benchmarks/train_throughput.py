"""Training throughput: transformer_book.Transformer against torch.nn.Transformer, same work.

Both models get the same dimensions, embeddings, positional encoding, output layer, dropouts,
batch, dtype, loss (label-smoothed cross-entropy) and optimiser (Adam, Sec. 5.3); a training
step is forward + backward + optimiser step. The table gives target tokens per second, the
ratio ours / theirs (measured in the same run, the models taking turns), and the model FLOPs
per step counted by ``torch.utils.flop_counter``. On a GPU it then trains the paper's base
model in bf16 and reports tokens/s and model FLOPs utilisation (MFU) against the GPU's peak.

    .venv/bin/python benchmarks/train_throughput.py              # CPU: small config
    .venv/bin/python benchmarks/train_throughput.py --quick      # tiny config, seconds
    .venv/bin/python benchmarks/train_throughput.py --compile    # also through torch.compile
"""

from __future__ import annotations

import argparse
import time

import torch
from flags import add_flags, set_threads
from transformer_book import describe_hardware, get_device
from transformer_book.config import PRESETS, TransformerConfig
from transformer_book.model import Transformer
from transformer_lab import (
    TorchTransformerBaseline,
    format_table,
    gpu_peak_tflops,
    matched_configs,
    measure_train_throughput,
    profile_train_step,
)

AMP = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}

# The Annotated Transformer (Rush, 2018) reports about 27,000 tokens/s on four GPUs (V100s).
ANNOTATED_TRANSFORMER_TOKENS_PER_S = 27_000


def build_pair(config: TransformerConfig, compile_models: bool, seed: int = 0) -> dict:
    torch.manual_seed(seed)
    ours = Transformer(config)
    torch.manual_seed(seed)
    theirs = TorchTransformerBaseline(config)
    n_ours = sum(p.numel() for p in ours.parameters())
    n_theirs = sum(p.numel() for p in theirs.parameters())
    if n_ours != n_theirs:
        raise AssertionError(f"the two models differ in size: {n_ours} != {n_theirs} parameters")
    models = {"transformer_book": ours, "nn.Transformer": theirs}
    if compile_models:
        for name in list(models):
            compiled = torch.compile(models[name])
            compiled.config = config
            models[f"{name} (compiled)"] = compiled
    return models


def run(config: TransformerConfig, args, device, amp_dtype, label: str) -> list[dict]:
    models = build_pair(config, args.compile)
    n_params = sum(p.numel() for p in models["transformer_book"].parameters())
    print(f"\n{label}: d_model={config.d_model}, heads={config.num_heads}, "
          f"layers={config.num_layers}, d_ff={config.d_ff}, vocab={config.tgt_vocab_size}, "
          f"dropout={config.dropout} (also on attention and FFN), {n_params / 1e6:.1f}M parameters")
    print(f"batch {args.batch} x (source {args.src_len}, target {args.tgt_len}) tokens, "
          f"{args.dtype}, fastest of {args.rounds} rounds of {args.steps} steps")
    rows = measure_train_throughput(models, batch=args.batch, src_len=args.src_len,
                                    tgt_len=args.tgt_len, device=device, amp_dtype=amp_dtype,
                                    steps=args.steps, rounds=args.rounds)
    ref = {r["model"]: r for r in rows}
    for r in rows:
        theirs = ref[r["model"].replace("transformer_book", "nn.Transformer")]
        r["ratio"] = r["tokens_per_second"] / theirs["tokens_per_second"]
    peak = gpu_peak_tflops(torch.cuda.get_device_name(device)) if device.type == "cuda" else None
    columns = [("model", "model", "s"), ("ms / step", "seconds_per_step", lambda s: f"{s * 1e3:.1f}"),
               ("target tokens/s", "tokens_per_second", ",.0f"),
               ("vs nn.Transformer", "ratio", ".2f"),
               ("GFLOP / step", "flops_per_step", lambda f: f"{f / 1e9:.1f}"),
               ("TFLOP/s", "tflops", ".2f")]
    if peak is not None and amp_dtype == torch.bfloat16:
        for r in rows:
            r["mfu"] = r["tflops"] / peak
        columns.append((f"MFU (peak {peak:.0f})", "mfu", ".1%"))
    print(format_table(rows, columns))
    if args.profile:
        for name, model in models.items():
            print(f"\nProfile of {name} ({args.steps} steps, operators by self device time):")
            print(profile_train_step(model, batch=args.batch, src_len=args.src_len,
                                     tgt_len=args.tgt_len, device=device, amp_dtype=amp_dtype,
                                     steps=args.steps))
    return rows


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", choices=PRESETS["transformer"], default="small")
    p.add_argument("--vocab", type=int, default=8000, help="shared vocabulary size")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--src-len", type=int, default=24)
    p.add_argument("--tgt-len", type=int, default=24)
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--dtype", choices=sorted(AMP), default=None,
                   help="autocast dtype (default fp32 on CPU, bf16 on CUDA)")
    p.add_argument("--steps", type=int, default=3, help="steps per timed round")
    p.add_argument("--rounds", type=int, default=3, help="timed rounds (after one warm-up round)")
    p.add_argument("--compile", action="store_true", help="also time both through torch.compile")
    p.add_argument("--profile", action="store_true",
                   help="also print torch.profiler's top operators of each model's training step")
    p.add_argument("--no-paper-base", action="store_true",
                   help="on CUDA, skip the paper's base model in bf16")
    p.add_argument("--base-batch", type=int, default=256, help="batch of the base-model run")
    p.add_argument("--base-len", type=int, default=64, help="source = target length there")
    add_flags(p, "threads", "device", "quick")  # --quick: tiny config, one round of two steps
    args = p.parse_args(argv)

    set_threads(args)
    device = get_device(args.device)
    args.dtype = args.dtype or ("bf16" if device.type == "cuda" else "fp32")
    if args.quick:
        args.config, args.batch, args.steps, args.rounds = "tiny", 16, 2, 1
    amp_dtype = AMP[args.dtype]
    print(f"Hardware: {describe_hardware(device)}")
    start = time.perf_counter()
    config = matched_configs(getattr(TransformerConfig, args.config)(
        src_vocab_size=args.vocab, tgt_vocab_size=args.vocab, dropout=args.dropout,
        max_len=max(512, args.src_len, args.tgt_len)))
    run(config, args, device, amp_dtype, f"Config '{args.config}'")

    if device.type == "cuda" and not args.no_paper_base:
        base = matched_configs(TransformerConfig.base(max_len=max(512, args.base_len)))
        args.batch, args.src_len, args.tgt_len = args.base_batch, args.base_len, args.base_len
        rows = run(base, args, device, AMP["bf16"], "The paper's base model (Table 3), bf16")
        ours = rows[0]["tokens_per_second"]
        print(f"The Annotated Transformer reported about {ANNOTATED_TRANSFORMER_TOKENS_PER_S:,} "
              f"tokens/s on four V100 GPUs; ours here: {ours:,.0f} tokens/s on one GPU "
              f"({ours / ANNOTATED_TRANSFORMER_TOKENS_PER_S:.1f}x).")
    print(f"\ntotal wall time {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
