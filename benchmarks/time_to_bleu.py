"""Time to BLEU: train from scratch until Multi30k test 2016 BLEU reaches a target.

Trains with the fast path (chapter 10: no host syncs in the step, fused Adam, batches checked
on the host and copied ahead, optionally torch.compile and fixed-width batches) and, in the
same loop with the same recipe and data, ``torch.nn.Transformer`` as the reference. After each
epoch (from ``--eval-from`` on) it scores the **validation** set (cased sacreBLEU, beam 4,
length penalty 0.6) with the mean of the last ``--average-last`` epochs' weights (Sec. 6.1);
the first epoch whose validation BLEU reaches ``--val-target`` (default: the target) stops the
run, and only then is test 2016 translated, once: the test set makes no choice. Training time
is the wall time of the training steps alone (evaluation and compilation are not in it; the
compile warm-up is reported as ``compile_seconds``).

Writes ``benchmarks/results/<machine>/time_to_bleu.json`` with the hardware, torch version,
target and reached BLEU, train seconds, steps, target tokens, tokens/s, MFU, sacreBLEU's
signature and the full recipe, for both models.

    .venv/bin/python benchmarks/time_to_bleu.py --quick --device cpu      # seconds: smoke test
    .venv/bin/python benchmarks/time_to_bleu.py --machine h100-2026-11-23 # the GPU run
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import datetime
import json
import math
import time
from pathlib import Path

import torch
from torch import nn
from transformer_book import decode, describe_hardware, set_seed
from transformer_book.batching import BatchedCorpus
from transformer_book.benchmark import (
    TorchTransformerBaseline,
    count_train_flops,
    gpu_peak_tflops,
    source_batches,
    sync,
)
from transformer_book.config import TransformerConfig
from transformer_book.data import load_multi30k
from transformer_book.model import Transformer
from transformer_book.tokenizer import load_or_train_tokenizer
from transformer_book.train import TrainConfig, Trainer, corpus_bleu

RESULTS = Path(__file__).resolve().parent / "results"


class _DecodableBaseline(Transformer):
    """Lets ``transformer_book.decode`` (which accepts the book's Transformer only) decode the
    nn.Transformer reference through its ``encode``/``decode`` (no key/value cache)."""

    def __init__(self, inner: TorchTransformerBaseline):
        nn.Module.__init__(self)
        self.inner, self.config = inner, inner.config

    def encode(self, src):
        return self.inner.encode(src)

    def decode(self, tgt, memory, src_mask, cache=None):
        return self.inner.decode(tgt, memory, src_mask)


def translate_all(model: nn.Module, tokenizer, sentences, *, beam_size: int, device,
                  batch_size: int = 128) -> list[str]:
    """Detokenised translations (beam search with length penalty 0.6, Sec. 6.1)."""
    ours = isinstance(model, Transformer) and not isinstance(model, _DecodableBaseline)
    ids = tokenizer.encode_batch(list(sentences))
    out = [""] * len(sentences)
    model.eval()
    for idx, src in source_batches(ids, batch_size, pad_id=tokenizer.pad_id,
                                   eos_id=tokenizer.eos_id):
        src = src.to(device)
        if beam_size == 1:
            hyps = decode.to_lists(decode.greedy_decode(
                model, src, tokenizer.bos_id, tokenizer.eos_id, use_cache=ours),
                tokenizer.eos_id, tokenizer.pad_id)
        else:
            hyps = decode.beam_search(model, src, tokenizer.bos_id, tokenizer.eos_id,
                                      beam_size=beam_size, length_penalty=0.6, use_cache=ours)
        for i, text in zip(idx, tokenizer.decode_batch(hyps), strict=True):
            out[i] = text
    return out


def build(name: str, config: TransformerConfig) -> nn.Module:
    set_seed(0)
    return Transformer(config) if name == "transformer_book" else TorchTransformerBaseline(config)


def corpus(tokenizer, pairs, max_tokens, *, widths, shuffle, seed, max_len):
    src, tgt = tokenizer.encode_batch(pairs.src), tokenizer.encode_batch(pairs.tgt)
    keep = [i for i in range(len(src)) if len(src[i]) <= max_len and len(tgt[i]) <= max_len]
    return BatchedCorpus([src[i] for i in keep], [tgt[i] for i in keep], max_tokens,
                         pad_id=tokenizer.pad_id, bos_id=tokenizer.bos_id,
                         eos_id=tokenizer.eos_id, shuffle=shuffle, seed=seed, widths=widths)


def warm_up_compile(trainer: Trainer, data: BatchedCorpus) -> float:
    """Compile the step for every batch shape of an epoch, then undo those steps (weights,
    optimizer, schedule, random state): returns the seconds it took."""
    start = time.perf_counter()
    model_state = copy.deepcopy(trainer.model.state_dict())
    opt_state = copy.deepcopy(trainer.optimizer.state_dict())
    sched_state = trainer.scheduler.state_dict()
    rng = torch.get_rng_state()
    cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
    shapes = set()
    for _, batch in trainer._batches(data, 0):
        if tuple(batch.src.shape) + tuple(batch.tgt_in.shape) not in shapes:
            shapes.add(tuple(batch.src.shape) + tuple(batch.tgt_in.shape))
            trainer._step(batch)
    sync(trainer.device)
    trainer.model.load_state_dict(model_state)
    trainer.optimizer.load_state_dict(opt_state)
    trainer.scheduler.load_state_dict(sched_state)
    torch.set_rng_state(rng)
    if cuda_rng is not None:
        torch.cuda.set_rng_state_all(cuda_rng)
    return time.perf_counter() - start


def run_one(name, model_config, train_config, args, train_data, val, test, tokenizer) -> dict:
    model = build(name, model_config)
    trainer = Trainer(model, train_data, train_config, model_config=model_config)
    device = trainer.device
    decodable = model if name == "transformer_book" else _DecodableBaseline(model)
    compile_seconds = warm_up_compile(trainer, train_data) if train_config.compile else 0.0
    # model FLOPs per target token, from one batch (matrix products, forward + backward)
    sample = next(iter(train_data.batches(0))).to(device)
    flops_per_token = count_train_flops(model, sample.src, sample.tgt_in, sample.tgt_out,
                                        pad_id=tokenizer.pad_id,
                                        amp_dtype=trainer.amp_dtype) / sample.num_tgt_tokens
    train_seconds, tokens, evals, reached_val = 0.0, 0, [], False
    for epoch in range(1, args.max_epochs + 1):
        trainer.config = dataclasses.replace(train_config, epochs=epoch)
        sync(device)
        start = time.perf_counter()
        trainer.fit()
        sync(device)
        train_seconds += time.perf_counter() - start
        tokens += sum(b.num_tgt_tokens for b in train_data.batches(epoch - 1))
        if epoch < args.eval_from:
            continue
        state = (trainer.averaged_state_dict() if len(trainer.snapshots) > 1
                 else copy.deepcopy(model.state_dict()))
        last = copy.deepcopy(model.state_dict())
        model.load_state_dict(state)
        hyps = translate_all(decodable, tokenizer, val.src, beam_size=args.beam_size,
                             device=device)
        val_bleu = corpus_bleu(hyps, val.tgt)[0].score
        evals.append({"epoch": epoch, "step": trainer.step, "val_bleu": round(val_bleu, 2),
                      "train_seconds": round(train_seconds, 2)})
        print(f"[{name}] epoch {epoch}: val BLEU {val_bleu:.2f} (mean of last "
              f"{max(1, len(trainer.snapshots))} epochs), {train_seconds:.1f} s of training",
              flush=True)
        if val_bleu >= args.val_target:
            reached_val = True
            break
        model.load_state_dict(last)  # go on training from the last weights
    hyps = translate_all(decodable, tokenizer, test.src, beam_size=args.beam_size, device=device)
    score, signature = corpus_bleu(hyps, test.tgt)
    peak = gpu_peak_tflops(torch.cuda.get_device_name(device)) if device.type == "cuda" else None
    rate = tokens / train_seconds
    return {
        "model": name, "device": describe_hardware(device), "torch": torch.__version__,
        "target_bleu": args.target, "val_target_bleu": args.val_target,
        "reached_val_target": reached_val, "reached_bleu": round(score.score, 2),
        "reached_target": score.score >= args.target,
        "train_seconds": round(train_seconds, 2), "compile_seconds": round(compile_seconds, 2),
        "epochs": trainer.epoch, "steps": trainer.step, "target_tokens": tokens,
        "tokens_per_second": round(rate), "flops_per_target_token": flops_per_token,
        "mfu": (flops_per_token * rate / 1e12 / peak) if peak else None,
        "sacrebleu_signature": signature, "beam_size": args.beam_size, "length_penalty": 0.6,
        "evaluations": evals, "parameters": sum(p.numel() for p in model.parameters()),
        "model_config": model_config.to_dict(), "train_config": dataclasses.asdict(train_config),
        "widths": list(train_data.widths) if train_data.widths else None,
    }


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--target", type=float, default=40.0, help="test 2016 BLEU to reach")
    p.add_argument("--val-target", type=float, default=None,
                   help="validation BLEU that stops training (default: --target)")
    p.add_argument("--models", nargs="+", choices=("transformer_book", "nn.Transformer"),
                   default=["transformer_book", "nn.Transformer"])
    p.add_argument("--preset", default="base", choices=("tiny", "small", "base"))
    p.add_argument("--num-layers", type=int, default=3)
    p.add_argument("--dropout", type=float, default=0.3)
    p.add_argument("--vocab-size", type=int, default=8000)
    p.add_argument("--max-tokens", type=int, default=4096, help="padded tokens per batch")
    p.add_argument("--warmup-steps", type=int, default=1000)
    p.add_argument("--lr-factor", type=float, default=0.5)
    p.add_argument("--average-last", type=int, default=5)
    p.add_argument("--max-epochs", type=int, default=40)
    p.add_argument("--eval-from", type=int, default=8, help="first epoch scored on val")
    p.add_argument("--beam-size", type=int, default=4)
    p.add_argument("--compile", action="store_true", help="torch.compile the step")
    p.add_argument("--cuda-graphs", action="store_true",
                   help="compile with mode='reduce-overhead' (implies --compile, --widths)")
    p.add_argument("--widths", type=int, nargs="*", default=None,
                   help="fixed batch widths, e.g. 16 24 32 48 64 (default: none)")
    p.add_argument("--device", default=None)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--data-dir", default=None)
    p.add_argument("--machine", default=None, help="results folder, e.g. h100-2026-11-23")
    p.add_argument("--quick", action="store_true",
                   help="tiny model, 500 pairs, 20 sentences scored, 2 epochs: a smoke test")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.cuda_graphs:
        args.compile = True
        args.widths = args.widths or [16, 24, 32, 48, 64, 96]
    train = load_multi30k("train", args.data_dir)
    val = load_multi30k("val", args.data_dir)
    test = load_multi30k("test_2016_flickr", args.data_dir)
    tokenizer = load_or_train_tokenizer(train, vocab_size=args.vocab_size)
    if args.quick:
        args.preset, args.num_layers, args.max_epochs, args.eval_from = "tiny", 1, 2, 2
        args.average_last, args.beam_size, args.warmup_steps = 2, 2, 100
        args.max_tokens = 1024
        train = dataclasses.replace(train, src=train.src[:500], tgt=train.tgt[:500])
        val = dataclasses.replace(val, src=val.src[:20], tgt=val.tgt[:20])
        test = dataclasses.replace(test, src=test.src[:20], tgt=test.tgt[:20])
    args.val_target = args.target if args.val_target is None else args.val_target
    model_config = getattr(TransformerConfig, args.preset)(
        src_vocab_size=tokenizer.vocab_size, tgt_vocab_size=tokenizer.vocab_size,
        pad_id=tokenizer.pad_id, num_layers=args.num_layers, dropout=args.dropout)
    train_config = TrainConfig(
        max_tokens=args.max_tokens, epochs=1, warmup_steps=args.warmup_steps,
        lr_factor=args.lr_factor, average_last=args.average_last, device=args.device,
        progress=False, compile=args.compile,
        compile_mode="reduce-overhead" if args.cuda_graphs else None)
    train_data = corpus(tokenizer, train, args.max_tokens, widths=args.widths, shuffle=True,
                        seed=0, max_len=model_config.max_len - 2)
    results = []
    for name in args.models:
        print(f"\n[{name}] training on Multi30k ({len(train_data):,} pairs) to val BLEU "
              f"{args.val_target}", flush=True)
        results.append(run_one(name, model_config, train_config, args, train_data, val, test,
                               tokenizer))
        r = results[-1]
        print(f"[{name}] test 2016 BLEU {r['reached_bleu']:.2f} (beam {args.beam_size}) after "
              f"{r['train_seconds']:.1f} s of training ({r['epochs']} epochs, {r['steps']} "
              f"steps, {r['tokens_per_second']:,} target tokens/s"
              + (f", MFU {r['mfu']:.1%}" if r["mfu"] else "")
              + f"; compile {r['compile_seconds']:.1f} s)", flush=True)
    if len(results) == 2 and all(r["train_seconds"] for r in results):
        print(f"\ntraining time nn.Transformer / ours: "
              f"{results[1]['train_seconds'] / results[0]['train_seconds']:.2f}")
    out = {"date": datetime.date.today().isoformat(), "results": results}
    if args.machine:
        path = RESULTS / args.machine / "time_to_bleu.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(out, indent=1, default=lambda v: None
                                   if isinstance(v, float) and math.isnan(v) else str(v)) + "\n")
        print(f"wrote {path}")
    return out


if __name__ == "__main__":
    main()
