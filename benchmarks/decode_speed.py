"""Decoding speed on Multi30k test 2016: greedy and beam search, with and without the KV cache.

Sentences per second for four ways of decoding the same sources (Sec. 6.1: beam size 4, length
penalty 0.6), taking turns batch by batch so that a slow spell of the machine hits all of them,
and the speed-up the key/value cache brings (the decoder then runs on the newest token only
instead of the whole prefix). It also checks that cached and uncached decoding give identical
outputs.

    .venv/bin/python benchmarks/decode_speed.py --checkpoint runs/small/last.pt
    .venv/bin/python benchmarks/decode_speed.py            # no checkpoint: untrained model
    .venv/bin/python benchmarks/decode_speed.py --quick    # 100 sentences

The checkpoint is a ``last.pt`` written by ``python -m transformer_book train``. Without one,
an untrained model of the same size decodes a fixed number of steps per sentence (EOS is made
unreachable): speed depends on the shapes, not on the weights, once the length is fixed, but
then the lengths are not those a trained model would produce.
"""

from __future__ import annotations

import argparse
import time

import torch
from flags import add_flags, set_threads
from transformer_book import describe_hardware, get_device
from transformer_book.config import PRESETS
from transformer_lab import (
    format_table,
    make_eos_unreachable,
    measure_decoding,
    source_batches,
)


def load_model(args, device):
    """(model, tokenizer, description) from a checkpoint, or an untrained model of a preset."""
    if args.checkpoint:
        from transformer_book.checkpoint import model_from_checkpoint

        model, tokenizer, state = model_from_checkpoint(args.checkpoint, device)
        step = state.get("step", "?")
        return model, tokenizer, f"checkpoint {args.checkpoint} (step {step})"
    from transformer_book.config import TransformerConfig
    from transformer_book.model import Transformer
    from transformer_book.tokenizer import load_or_train_tokenizer

    tokenizer = load_or_train_tokenizer(data_dir=args.data_dir, vocab_size=args.vocab_size)
    preset = getattr(TransformerConfig, args.preset)
    config = preset(src_vocab_size=tokenizer.vocab_size, tgt_vocab_size=tokenizer.vocab_size,
                    pad_id=tokenizer.pad_id)
    torch.manual_seed(0)
    model = Transformer(config).to(device).eval()
    make_eos_unreachable(model, tokenizer.eos_id)
    return model, tokenizer, (f"UNTRAINED '{args.preset}' model (no --checkpoint): every "
                              f"sentence decodes exactly {args.steps} tokens")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--checkpoint", help="last.pt from `python -m transformer_book train`")
    p.add_argument("--data-dir", help="Multi30k folder (default: $MULTI30K_DIR or the cache)")
    p.add_argument("--split", default="test_2016_flickr")
    p.add_argument("--limit", type=int, help="decode only the first N sentences")
    p.add_argument("--batch-size", type=int, default=64, help="sentences per batch")
    p.add_argument("--beam-size", type=int, default=4)
    p.add_argument("--length-penalty", type=float, default=0.6)
    p.add_argument("--no-uncached-beam", action="store_true",
                   help="skip beam search without the cache (the slowest of the four)")
    p.add_argument("--preset", choices=PRESETS["transformer"], default="small",
                   help="untrained model's preset (default small)")
    p.add_argument("--vocab-size", type=int, default=8000, help="untrained model's BPE size")
    p.add_argument("--steps", type=int, default=20,
                   help="tokens per sentence for the untrained model (Multi30k's English test "
                        "sentences average about 16 subwords)")
    add_flags(p, "threads", "device", "quick")  # --quick: the first 100 sentences
    args = p.parse_args(argv)
    set_threads(args)
    if args.quick:
        args.limit = min(args.limit or 100, 100)

    from transformer_book.data import load_multi30k

    device = get_device(args.device)
    print(f"Hardware: {describe_hardware(device)}")
    start = time.perf_counter()
    model, tokenizer, what = load_model(args, device)
    print(f"Model: {what}; {model.num_parameters():,} parameters")
    split = load_multi30k(args.split, args.data_dir)
    sources = tokenizer.encode_batch(split.src[:args.limit] if args.limit else split.src)
    batches = source_batches(sources, args.batch_size, pad_id=tokenizer.pad_id,
                             eos_id=tokenizer.eos_id)
    beam = args.beam_size
    methods = {
        "greedy, cached": {"beam_size": 1, "use_cache": True},
        "greedy, no cache": {"beam_size": 1, "use_cache": False},
        f"beam {beam}, cached": {"beam_size": beam, "use_cache": True,
                                 "length_penalty": args.length_penalty},
    }
    if not args.no_uncached_beam:
        methods[f"beam {beam}, no cache"] = {"beam_size": beam, "use_cache": False,
                                             "length_penalty": args.length_penalty}
    print(f"{args.split}: {len(sources)} sentences in batches of {args.batch_size} "
          f"(sorted by length)")
    results = measure_decoding(model, batches, methods, bos_id=tokenizer.bos_id,
                               eos_id=tokenizer.eos_id,
                               max_new_tokens=None if args.checkpoint else args.steps,
                               device=device)
    rows = []
    for name, r in results.items():
        kind = name.split(",")[0]
        cached = results[f"{kind}, cached"]
        rows.append({"method": name, "seconds": r["seconds"],
                     "sps": r["sentences_per_second"],
                     "tps": r["tokens"] / r["seconds"],
                     "speedup": r["sentences_per_second"] / results[f"{kind}, no cache"][
                         "sentences_per_second"] if f"{kind}, no cache" in results else None,
                     "same": "yes" if r["outputs"] == cached["outputs"] else "NO"})
    print(format_table(rows, [("method", "method", "s"), ("seconds", "seconds", ".1f"),
                              ("sentences/s", "sps", ".1f"), ("tokens/s", "tps", ".0f"),
                              ("speed-up vs no cache", "speedup", ".2f"),
                              ("same output as cached", "same", "s")]))
    print(f"total wall time {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
