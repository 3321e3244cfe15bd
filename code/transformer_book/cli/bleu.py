"""``python -m transformer_book bleu``: sacreBLEU of a checkpoint on a Multi30k split (Sec. 6.1:
beam 4, length penalty 0.6 by default), recorded in the run's ``metrics.jsonl``."""

from __future__ import annotations

from pathlib import Path

from transformer_book.cli.common import UsageError, check_data_dir, warn
from transformer_book.cli.translate import add_decoding_flags, check_beam, read_checkpoint


def add_parser(sub) -> None:
    p = sub.add_parser("bleu", help="sacreBLEU of a checkpoint on a Multi30k split")
    add_decoding_flags(p)
    p.add_argument("--split", default="test_2016_flickr", help="val, test_2016_flickr, ...")
    p.add_argument("--data-dir", help="as for train")


def run(args) -> int:
    from transformer_book.data import MULTI30K_SIZES, load_multi30k
    from transformer_book.evaluation import corpus_bleu, source_token_limit, translate

    if args.split not in MULTI30K_SIZES:
        raise UsageError(f"--split {args.split}: unknown; use one of {', '.join(MULTI30K_SIZES)}")
    check_data_dir(args.data_dir)
    model, tokenizer, _ = read_checkpoint(args)
    split = load_multi30k(args.split, args.data_dir)
    limit = source_token_limit(model, args.max_tokens)
    longest = min(max(len(ids) for ids in tokenizer.encode_batch(split.src)), limit) + 1
    budget = check_beam(args, model, longest)
    hyps = translate(model, tokenizer, split.src, beam_size=args.beam_size,
                     length_penalty=args.length_penalty, max_tokens=args.max_tokens,
                     progress=True, truncate=True, memory_budget=budget)
    score, signature = corpus_bleu(hyps, split.tgt)
    print(f"{args.split} beam={args.beam_size}: {score}")
    print(f"signature: {signature}")
    _record(args, score.score)
    return 0


def _record(args, bleu: float) -> None:
    """Append the score to the run's metrics.jsonl, when the checkpoint sits beside one."""
    import torch

    from transformer_book.runlog import METRICS_FILE, append_metrics

    log = Path(args.checkpoint).parent / METRICS_FILE
    if not log.is_file():
        return
    try:
        step = torch.load(args.checkpoint, map_location="cpu", weights_only=True).get("step")
        append_metrics(log, [{"step": step, "bleu": bleu, "split": args.split,
                              "beam_size": args.beam_size}])
    except (OSError, AttributeError) as e:  # a read-only run folder: the score is printed anyway
        warn("bleu", f"{log}: score not recorded ({getattr(e, 'strerror', None) or e})")
