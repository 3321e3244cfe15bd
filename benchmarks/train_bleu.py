"""BLEU on Multi30k German -> English: train one configuration, score it with sacreBLEU.

Trains ``transformer_book.Transformer`` with the recipe of chapter 8 (joint BPE, token-budget
batches, label smoothing, Adam with the warm-up of Eq. 3) and reports cased, detokenised
sacreBLEU on the validation set and on test 2016, with greedy decoding and with beam search
(beam 4, length penalty 0.6, Sec. 6.1), for the weights of the last epoch and for the average
of the last epochs' weights (Sec. 6.1 averages the last 5 checkpoints). It prints the hardware,
the wall time and the sacreBLEU signature; ``--json`` also writes everything to a file.

    .venv/bin/python benchmarks/train_bleu.py --quick                    # seconds: smoke test
    .venv/bin/python benchmarks/train_bleu.py --preset base --epochs 40  # chapter 8's full run

The book's target: test 2016 BLEU >= 40 with beam search from the full configuration (a GPU
run). Several runs with different settings can share one GPU: start them side by side.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import shlex
import sys
import time
from pathlib import Path

import torch
from flags import add_flags, set_threads
from transformer_book import describe_hardware, set_seed
from transformer_book.cli.common import add_config_flags, add_override_flags, given_settings
from transformer_book.config import PRESETS, TransformerConfig, model_config_for, train_config_for
from transformer_book.corpus import prepare_run_data
from transformer_book.data import load_multi30k
from transformer_book.model import build_model
from transformer_book.tokenizer import load_or_train_tokenizer
from transformer_book.train import TrainConfig, Trainer, corpus_bleu, translate

#: The TransformerConfig fields this script can change in the preset (--norm-first: pre-norm
#: sub-layers, chapter 5; --learned-positions: Table 3 row E; --embed-init normal: the paper's
#: code's embedding scale).
MODEL_FIELDS = ("d_model", "num_heads", "num_layers", "d_ff", "d_key", "d_value", "dropout",
                "attention_dropout", "ffn_dropout", "norm_first", "learned_positions",
                "embed_init")
#: The TrainConfig fields this script takes as flags (help, types and valid values from the
#: dataclass, as for `python -m transformer_book train`). Left out, a flag keeps the preset's
#: value: TrainConfig.cpu() for --preset cpu, else TrainConfig()'s (10 epochs, 4,096 tokens,
#: warm-up 4,000, Eq. 3), and average_last 5 (1 with --preset cpu, whose time budget ends it
#: inside an epoch).
TRAIN_FIELDS = ("epochs", "max_tokens", "warmup_steps", "lr_factor", "schedule", "time_budget",
                "label_smoothing", "clip_grad_norm", "average_last", "seed", "cpu_amp")


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", help="Multi30k folder (default: $MULTI30K_DIR, else download)")
    p.add_argument("--preset", choices=PRESETS["transformer"], default="small")
    add_override_flags(p, TransformerConfig, MODEL_FIELDS)
    p.add_argument("--vocab-size", type=int, default=8000)
    add_config_flags(p, TrainConfig, TRAIN_FIELDS)
    p.add_argument("--beam-size", type=int, default=4)
    p.add_argument("--length-penalty", type=float, default=0.6)
    p.add_argument("--score-splits", default="val,test_2016_flickr",
                   help="comma-separated splits to translate and score after training")
    p.add_argument("--time-limit", type=float,
                   help="stop after the epoch during which this many seconds have passed")
    p.add_argument("--name", default="run", help="label of this run in the output")
    p.add_argument("--json", help="write the results to this file")
    p.add_argument("--summary-json", help="also write a short record to this file: test 2016 "
                   "BLEU (beam), train_seconds, threads, cpu, torch, config, "
                   "sacrebleu_signature and the command that reproduces it")
    # --quick: the tiny model for 2 epochs on 2,000 training pairs, 100 sentences scored
    add_flags(p, "threads", "device", "quick")
    args = p.parse_args(argv)
    set_threads(args)

    start = time.perf_counter()
    train = load_multi30k("train", args.data_dir)
    splits = {name: load_multi30k(name, args.data_dir)
              for name in dict.fromkeys(["val", *args.score_splits.split(",")])}
    tokenizer = load_or_train_tokenizer(train, vocab_size=args.vocab_size)
    if args.quick:
        args.preset, args.epochs, args.average_last = "tiny", 2, 2
        train = dataclasses.replace(train, src=train.src[:2000], tgt=train.tgt[:2000])
        splits = {k: dataclasses.replace(v, src=v.src[:100], tgt=v.tgt[:100])
                  for k, v in splits.items()}
    config = dataclasses.replace(train_config_for(args.preset), **{
        "average_last": 1 if args.preset == "cpu" else 5, "progress": False, "log_epochs": True,
        **given_settings(args, [*TRAIN_FIELDS, "device"])})
    model_config = model_config_for(tokenizer, args.preset,
                                    **given_settings(args, MODEL_FIELDS))
    _, train_data, val_data = prepare_run_data(
        train, splits["val"], tokenizer=tokenizer, max_tokens=config.max_tokens,
        max_len=model_config.max_len, seed=config.seed)
    set_seed(config.seed)
    model = build_model(model_config)
    trainer = Trainer(model, train_data, config, model_config=model_config, val_data=val_data)
    hardware = describe_hardware(trainer.device)
    print(f"[{args.name}] {hardware}")
    print(f"[{args.name}] {model.num_parameters():,} parameters; {model_config}")
    print(f"[{args.name}] {config}", flush=True)

    train_start = time.perf_counter()
    if args.time_limit is not None:  # stop at the first epoch end past the time limit

        def stop_between_epochs():
            if trainer.batch_in_epoch == 0 and time.perf_counter() - train_start > args.time_limit:
                trainer.stop_requested = True

        trainer.after_step = stop_between_epochs
    trainer.fit()
    if trainer.stop_requested and trainer.epoch < config.epochs:
        print(f"[{args.name}] time limit reached after epoch {trainer.epoch}")
    train_seconds = time.perf_counter() - train_start

    weights = {"last": {k: v.detach().clone() for k, v in model.state_dict().items()}}
    if config.average_last > 1:
        weights[f"mean of last {len(trainer.snapshots)}"] = trainer.averaged_state_dict()
    rows, signature = [], ""
    for label, state in weights.items():
        model.load_state_dict(state)
        for split, corpus in splits.items():
            if split not in args.score_splits.split(","):
                continue  # val is still loaded: it is the validation loss's data
            for beam in sorted({1, args.beam_size}):
                t0 = time.perf_counter()
                hyps = translate(model, tokenizer, corpus.src, beam_size=beam,
                                 length_penalty=args.length_penalty)
                seconds = time.perf_counter() - t0
                score, signature = corpus_bleu(hyps, corpus.tgt)
                rows.append({"weights": label, "split": split,
                             "decoding": "greedy" if beam == 1 else f"beam {beam}",
                             "bleu": round(score.score, 2), "seconds": round(seconds, 1)})
    model.load_state_dict(weights["last"])
    val_losses = trainer.history.val_loss
    result = {
        "name": args.name, "hardware": hardware, "parameters": model.num_parameters(),
        "model_config": model_config.to_dict(), "train_config": dataclasses.asdict(config),
        "epochs_run": trainer.epoch, "steps": trainer.step,
        "train_seconds": round(train_seconds, 1),
        "total_seconds": round(time.perf_counter() - start, 1),
        "best_val_loss": round(min(v for _, v in val_losses), 4) if val_losses else math.nan,
        "tokens_per_second": round(trainer.history.tokens_per_second[-1][1]),
        "bleu": rows, "signature": signature,
    }
    width = max(len(r["weights"]) for r in rows)
    print(f"\n[{args.name}] {trainer.epoch} epochs, {trainer.step} steps, "
          f"{train_seconds / 60:.1f} min of training on {hardware}")
    print(f"{'weights':<{width}}  {'split':<17} {'decoding':<8}  {'BLEU':>6}  {'seconds':>7}")
    for r in rows:
        print(f"{r['weights']:<{width}}  {r['split']:<17} {r['decoding']:<8}  {r['bleu']:6.2f}  "
              f"{r['seconds']:7.1f}")
    print(f"sacreBLEU signature: {signature}")
    print(f"total wall time {result['total_seconds']:.0f} s", flush=True)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    if args.summary_json:
        beam = f"beam {args.beam_size}" if args.beam_size > 1 else "greedy"
        (test_bleu,) = [r["bleu"] for r in rows if r["weights"] == "last"
                        and r["split"] == "test_2016_flickr" and r["decoding"] == beam]
        summary = {
            "bleu": test_bleu, "split": "test_2016_flickr", "decoding": beam,
            "length_penalty": args.length_penalty, "train_seconds": result["train_seconds"],
            "threads": torch.get_num_threads(), "cpu": hardware.split(",")[0].removeprefix("CPU: "),
            "hardware": hardware, "torch": torch.__version__, "epochs_run": trainer.epoch,
            "steps": trainer.step, "tokens_per_second": result["tokens_per_second"],
            "config": {"model": model_config.to_dict(), "train": dataclasses.asdict(config),
                       "vocab_size": args.vocab_size},
            "sacrebleu_signature": signature,
            "command": "MULTI30K_DIR=<folder> .venv/bin/python benchmarks/train_bleu.py "
                       + shlex.join(sys.argv[1:] if argv is None else argv),
        }
        Path(args.summary_json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.summary_json).write_text(json.dumps(summary, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main()
