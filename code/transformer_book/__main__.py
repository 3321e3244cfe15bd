"""Command line: ``python -m transformer_book train|translate|bleu ...``.

    python -m transformer_book train --preset small --epochs 10 --checkpoint-dir runs/small
    python -m transformer_book train --checkpoint-dir runs/small --resume --epochs 20
    echo "Ein Hund läuft über die Wiese." | \\
        python -m transformer_book translate --checkpoint runs/small/last.pt --beam-size 4
    python -m transformer_book bleu --checkpoint runs/small/last.pt --split test_2016_flickr

Run ``python -m transformer_book <command> --help`` for every option.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

PRESETS = ("tiny", "small", "base", "big")


def _add_train(sub) -> None:
    p = sub.add_parser("train", help="train on Multi30k de->en, with checkpoints",
                       description="Train a Transformer on Multi30k task 1 (German -> English). "
                       "Writes CHECKPOINT_DIR/last.pt every --checkpoint-every steps and at each "
                       "epoch end; --resume continues from it.")
    p.add_argument("--data-dir", help="folder with the Multi30k .gz files (default: $MULTI30K_DIR, "
                   "else download into the user cache)")
    p.add_argument("--preset", choices=PRESETS, default="small",
                   help="TransformerConfig preset (default: small)")
    p.add_argument("--dropout", type=float, help="override the preset's dropout")
    p.add_argument("--num-layers", type=int, help="override the preset's layers per stack")
    p.add_argument("--norm-first", action="store_true",
                   help="pre-norm sub-layers (the paper, and the default, is post-norm)")
    p.add_argument("--vocab-size", type=int, default=8000, help="joint BPE vocabulary (8000)")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--max-steps", type=int, help="stop after this many optimiser steps")
    p.add_argument("--max-tokens", type=int, default=4096, help="padded tokens per batch")
    p.add_argument("--warmup-steps", type=int, default=4000, help="Eq. (3) warm-up (4000)")
    p.add_argument("--lr-factor", type=float, default=1.0, help="multiplier on Eq. (3)")
    p.add_argument("--label-smoothing", type=float, default=0.1)
    p.add_argument("--clip-grad-norm", type=float, help="clip gradients to this norm")
    p.add_argument("--checkpoint-dir", default="checkpoints", help="default: ./checkpoints")
    p.add_argument("--checkpoint-every", type=int, default=500, help="steps between checkpoints")
    p.add_argument("--resume", action="store_true",
                   help="continue from CHECKPOINT_DIR/last.pt (its model and batching settings)")
    p.add_argument("--train-limit", type=int, help="use only the first N training pairs (smoke "
                   "tests); the tokenizer is still learned from the whole training split")
    p.add_argument("--device", help="cpu, cuda, ... (default: CUDA when available)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def _add_decoding(p) -> None:
    p.add_argument("--checkpoint", required=True, help="a last.pt written by `train`")
    p.add_argument("--beam-size", type=int, default=4, help="1 = greedy (default: 4, Sec. 6.1)")
    p.add_argument("--length-penalty", type=float, default=0.6, help="alpha (0.6, Sec. 6.1)")
    p.add_argument("--max-tokens", type=int, default=4096, help="padded source tokens per batch")
    p.add_argument("--device", help="cpu, cuda, ... (default: CUDA when available)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m transformer_book",
                                     description="Train and use the book's Transformer.")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_train(sub)
    t = sub.add_parser("translate", help="translate German lines from stdin to English on stdout")
    _add_decoding(t)
    b = sub.add_parser("bleu", help="sacreBLEU of a checkpoint on a Multi30k split")
    _add_decoding(b)
    b.add_argument("--split", default="test_2016_flickr", help="val, test_2016_flickr, ...")
    b.add_argument("--data-dir", help="as for train")
    return parser


def cmd_train(args) -> int:
    from transformer_book import describe_hardware
    from transformer_book.config import TransformerConfig
    from transformer_book.data import load_multi30k
    from transformer_book.model import Transformer
    from transformer_book.tokenizer import SubwordTokenizer, load_or_train_tokenizer
    from transformer_book.train import TrainConfig, Trainer, load_checkpoint, prepare_corpus

    last = Path(args.checkpoint_dir) / "last.pt"
    if args.resume and not last.is_file():
        print(f"error: --resume given but {last} does not exist", file=sys.stderr)
        return 2
    train_split = load_multi30k("train", args.data_dir)
    val_split = load_multi30k("val", args.data_dir)
    overrides = {"epochs": args.epochs, "max_steps": args.max_steps, "device": args.device,
                 "checkpoint_dir": args.checkpoint_dir, "checkpoint_every": args.checkpoint_every,
                 "progress": not args.no_progress}
    if args.resume:
        state = load_checkpoint(last, map_location="cpu")
        tokenizer = SubwordTokenizer.from_str(state["extra"]["tokenizer"])
        model_config = TransformerConfig(**state["model_config"])
        # batching, schedule and seed come from the checkpoint so the run continues exactly
        config = TrainConfig(**{**state["train_config"], **overrides})
        train_limit = state["extra"].get("train_limit")
    else:
        tokenizer = load_or_train_tokenizer(train_split, vocab_size=args.vocab_size)
        preset = getattr(TransformerConfig, args.preset)
        extra = {} if args.dropout is None else {"dropout": args.dropout}
        if args.num_layers is not None:
            extra["num_layers"] = args.num_layers
        if args.norm_first:
            extra["norm_first"] = True
        model_config = preset(src_vocab_size=tokenizer.vocab_size,
                              tgt_vocab_size=tokenizer.vocab_size, share_embeddings=True,
                              pad_id=tokenizer.pad_id, **extra)
        config = TrainConfig(max_tokens=args.max_tokens, warmup_steps=args.warmup_steps,
                             lr_factor=args.lr_factor, label_smoothing=args.label_smoothing,
                             clip_grad_norm=args.clip_grad_norm, seed=args.seed, **overrides)
        train_limit = args.train_limit
    if train_limit is not None:
        train_split = dataclasses.replace(train_split, src=train_split.src[:train_limit],
                                          tgt=train_split.tgt[:train_limit])
    train_data = prepare_corpus(tokenizer, train_split, config.max_tokens, seed=config.seed,
                                max_len=model_config.max_len - 2)
    val_data = prepare_corpus(tokenizer, val_split, config.max_tokens, shuffle=False)
    import torch

    torch.manual_seed(config.seed)
    model = Transformer(model_config)
    trainer = Trainer(model, train_data, config, model_config=model_config, val_data=val_data,
                      extra={"tokenizer": tokenizer.to_str(), "train_limit": train_limit})
    if args.resume:
        trainer.load_checkpoint(last)
        print(f"resumed from {last} at step {trainer.step} (epoch {trainer.epoch + 1})",
              file=sys.stderr)
    print(f"{describe_hardware(trainer.device)}; {model.num_parameters():,} parameters; "
          f"{len(train_data)} training pairs", file=sys.stderr)
    history = trainer.fit()
    if history.val_loss:
        print(f"step {trainer.step}: val loss {history.val_loss[-1][1]:.4f}", file=sys.stderr)
    if history.tokens_per_second:
        print(f"throughput: {history.tokens_per_second[-1][1]:.0f} target tokens/s",
              file=sys.stderr)
    print(f"checkpoint: {last}", file=sys.stderr)
    return 0


def _read_checkpoint(args):
    from transformer_book.train import model_from_checkpoint

    return model_from_checkpoint(args.checkpoint, args.device)


def cmd_translate(args) -> int:
    from transformer_book.train import translate

    model, tokenizer, _ = _read_checkpoint(args)
    lines = [line.rstrip("\n") for line in sys.stdin]
    outputs = translate(model, tokenizer, lines, beam_size=args.beam_size,
                        length_penalty=args.length_penalty, max_tokens=args.max_tokens)
    for line in outputs:
        print(line)
    return 0


def cmd_bleu(args) -> int:
    from transformer_book.data import load_multi30k
    from transformer_book.train import corpus_bleu, translate

    model, tokenizer, _ = _read_checkpoint(args)
    split = load_multi30k(args.split, args.data_dir)
    hyps = translate(model, tokenizer, split.src, beam_size=args.beam_size,
                     length_penalty=args.length_penalty, max_tokens=args.max_tokens,
                     progress=True)
    score, signature = corpus_bleu(hyps, split.tgt)
    print(f"{args.split} beam={args.beam_size}: {score}")
    print(f"signature: {signature}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    command = {"train": cmd_train, "translate": cmd_translate, "bleu": cmd_bleu}[args.command]
    return command(args)


if __name__ == "__main__":
    sys.exit(main())
