"""Command line: ``python -m transformer_book train|translate|bleu|plot ...``.

    python -m transformer_book train --preset small --epochs 10 --checkpoint-dir runs/small
    python -m transformer_book train --checkpoint-dir runs/small --resume --epochs 20
    echo "Ein Hund läuft über die Wiese." | \\
        python -m transformer_book translate --checkpoint runs/small/last.pt --beam-size 4
    python -m transformer_book bleu --checkpoint runs/small/last.pt --split test_2016_flickr
    python -m transformer_book plot runs/small      # curves from runs/small/metrics.jsonl

Run ``python -m transformer_book <command> --help`` for every option.

Errors are one line on stderr, ``python -m transformer_book <command>: error: <what and what to
do>``, with exit status 2 for bad arguments (as argparse) and 1 for failures while running;
``--debug`` (or ``TRANSFORMER_BOOK_DEBUG=1``) adds the traceback. Ctrl-C during training writes
a checkpoint at the current step and prints the command that resumes (exit status 130).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import shlex
import signal
import sys
import traceback
from pathlib import Path

PROG = "python -m transformer_book"
PRESETS = ("tiny", "small", "cpu", "base", "big")
DEBUG_ENV = "TRANSFORMER_BOOK_DEBUG"
#: Defaults of a fresh training run. The parser's defaults are None so that ``--resume`` can
#: tell a flag the user gave (to compare with the checkpoint) from one left out.
TRAIN_DEFAULTS = {"preset": "small", "vocab_size": 8000, "epochs": 10, "max_tokens": 4096,
                  "warmup_steps": 4000, "lr_factor": 1.0, "label_smoothing": 0.1,
                  "checkpoint_every": 500, "seed": 0, "schedule": "noam", "time_budget": None}
#: Settings that --resume may change: how long to train, how often to save, where to run.
RESUMABLE = ("epochs", "max_steps", "checkpoint_every", "device", "accumulate", "time_budget")


class UsageError(Exception):
    """A bad argument: one line on stderr, exit status 2."""

    status = 2


class CLIError(Exception):
    """A failure while running: one line on stderr, exit status 1 (or ``status``)."""

    def __init__(self, message: str, status: int = 1):
        super().__init__(message)
        self.status = status


# --------------------------------------------------------------------------- parsing


class _Parser(argparse.ArgumentParser):
    """argparse, with its error as one line (no usage block) and exit status 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _int_at_least(low: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < low:
            what = "a positive integer" if low == 1 else f"an integer >= {low}"
            raise argparse.ArgumentTypeError(f"must be {what}, got {value}")
        return value

    parse.__name__ = "int"
    return parse


def _float_in(low: float, high: float | None = None, *, low_open: bool = False):
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        too_low = value <= low if low_open else value < low
        if not math.isfinite(value) or too_low or (high is not None and value >= high):
            interval = f"{'(' if low_open else '['}{low:g}, {'inf' if high is None else f'{high:g}'})"
            raise argparse.ArgumentTypeError(f"must be in {interval}, got {text}")
        return value

    parse.__name__ = "float"
    return parse


positive_int = _int_at_least(1)


def _common(p) -> None:
    p.add_argument("--device", help="cpu, cuda, cuda:1, mps ... (default: CUDA when available)")
    p.add_argument("--debug", action="store_true",
                   help=f"show the traceback of an error (or set {DEBUG_ENV}=1)")


def _add_train(sub) -> None:
    d = TRAIN_DEFAULTS
    p = sub.add_parser("train", help="train on Multi30k de->en (or your own corpus), with checkpoints",
                       description="Train a Transformer on Multi30k task 1 (German -> English), "
                       "or on your own parallel text files (--train-src ... --valid-tgt). "
                       "Writes CHECKPOINT_DIR/last.pt every --checkpoint-every steps, at each "
                       "epoch end and on Ctrl-C; --resume continues from it with the run's own "
                       "settings (only --epochs, --max-steps, --time-budget, --checkpoint-every, "
                       "--device and --accumulate may change). Under torchrun, one process per GPU (or "
                       "several CPU processes) trains with DistributedDataParallel; see the README.")
    p.add_argument("--data-dir", help="folder with the Multi30k .gz files (default: $MULTI30K_DIR, "
                   "else download into the user cache)")
    p.add_argument("--preset", choices=PRESETS,
                   help=f"TransformerConfig preset (default: {d['preset']}); 'cpu' also sets "
                   "the training recipe of TrainConfig.cpu(): 20 minutes on 2 CPU cores, "
                   "over 30 BLEU on test 2016 on the CPUs chapter 8 names")
    p.add_argument("--dropout", type=_float_in(0.0, 1.0), help="override the preset's dropout")
    p.add_argument("--num-layers", type=positive_int, help="override the preset's layers per stack")
    p.add_argument("--norm-first", action="store_true", default=None,
                   help="pre-norm sub-layers (the paper, and the default, is post-norm)")
    p.add_argument("--vocab-size", type=_int_at_least(5),
                   help=f"joint BPE vocabulary, special tokens included ({d['vocab_size']})")
    p.add_argument("--epochs", type=positive_int, help=f"passes over the data ({d['epochs']})")
    p.add_argument("--max-steps", type=positive_int, help="stop after this many optimiser steps")
    p.add_argument("--max-tokens", type=positive_int,
                   help=f"padded tokens per batch ({d['max_tokens']})")
    p.add_argument("--accumulate", type=positive_int,
                   help="batches per optimiser step and process, gradients accumulated (1); "
                   "under torchrun a step takes nproc * ACCUMULATE batches, so e.g. 2 on one "
                   "process matches 2 processes of 1")
    p.add_argument("--warmup-steps", type=positive_int,
                   help=f"Eq. (3) warm-up ({d['warmup_steps']})")
    p.add_argument("--lr-factor", type=_float_in(0.0, low_open=True),
                   help="multiplier on Eq. (3) (1.0)")
    p.add_argument("--schedule", choices=("noam", "linear"),
                   help="learning rate: Eq. (3) ('noam'), or its warm-up then a linear decay to "
                   "0 when the run ends ('linear')")
    p.add_argument("--time-budget", type=_float_in(0.0, low_open=True), metavar="SECONDS",
                   help="stop training after this many seconds (validation included)")
    p.add_argument("--label-smoothing", type=_float_in(0.0, 1.0), help="eps_ls (0.1)")
    p.add_argument("--clip-grad-norm", type=_float_in(0.0, low_open=True),
                   help="clip gradients to this norm")
    p.add_argument("--checkpoint-dir", default="checkpoints", help="default: ./checkpoints")
    p.add_argument("--checkpoint-every", type=positive_int,
                   help=f"steps between checkpoints ({d['checkpoint_every']})")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--resume", action="store_true",
                   help="continue the run in CHECKPOINT_DIR (from its last.pt, with its settings)")
    g.add_argument("--overwrite", action="store_true",
                   help="start a new run in CHECKPOINT_DIR even though it holds a last.pt "
                   "(deleted when training starts)")
    c = p.add_argument_group("your own corpus (instead of Multi30k; all four files, one sentence "
                             "per line, UTF-8, line counts matching)")
    for name in CORPUS_FLAGS:
        c.add_argument("--" + name.replace("_", "-"), metavar="FILE")
    h = p.add_argument_group("a Hugging Face dataset (instead of Multi30k; streamed; needs "
                             "pip install 'transformer-book[hf]')")
    h.add_argument("--hf-dataset", metavar="NAME", help="e.g. wmt/wmt14, or a local folder (written "
                   "by save_to_disk, or of data files such as train.jsonl)")
    h.add_argument("--hf-config", metavar="CONFIG", help="e.g. de-en (which also gives the "
                   "languages: de -> en)")
    h.add_argument("--hf-src", metavar="LANG", help="source language key (default: the "
                   "config's first)")
    h.add_argument("--hf-tgt", metavar="LANG", help="target language key (default: the "
                   "config's second)")
    h.add_argument("--hf-split", metavar="SPLIT", help="training split (train)")
    h.add_argument("--hf-valid-split", metavar="SPLIT", help="validation split (validation)")
    p.add_argument("--train-limit", type=positive_int, help="use only the first N training pairs "
                   "(smoke tests); the tokenizer is still learned from the whole training split")
    p.add_argument("--seed", type=_int_at_least(0), help=f"random seed ({d['seed']})")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    _common(p)


def _add_decoding(p) -> None:
    p.add_argument("--checkpoint", required=True, help="a last.pt written by `train`")
    p.add_argument("--beam-size", type=positive_int, default=4,
                   help="1 = greedy (default: 4, Sec. 6.1); at most the vocabulary size, and "
                   "refused when its estimated memory exceeds half of what is available")
    p.add_argument("--length-penalty", type=_float_in(0.0), default=0.6,
                   help="alpha (0.6, Sec. 6.1)")
    p.add_argument("--max-tokens", type=_int_at_least(2), default=4096,
                   help="padded source tokens per batch")
    _common(p)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description="Train and use the book's Transformer.")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_train(sub)
    t = sub.add_parser("translate", help="translate German lines from stdin to English on stdout",
                       description="Translate German lines from stdin (UTF-8) to English on "
                       "stdout, one output line per input line, in order. An empty line gives "
                       "an empty line; a line longer than the model takes is truncated, with a "
                       "warning naming it.")
    _add_decoding(t)
    t.add_argument("--invalid-utf8", choices=("error", "replace"), default="error",
                   help="bytes that are not UTF-8: stop with an error naming the line "
                   "(default), or replace them with U+FFFD and warn")
    b = sub.add_parser("bleu", help="sacreBLEU of a checkpoint on a Multi30k split")
    _add_decoding(b)
    b.add_argument("--split", default="test_2016_flickr", help="val, test_2016_flickr, ...")
    b.add_argument("--data-dir", help="as for train")
    g = sub.add_parser("plot", help="draw a run's curves from its metrics.jsonl",
                       description="Draw the training and validation loss and the learning rate "
                       "of a run, as chapter 8 does, from RUN_DIR/metrics.jsonl (written by "
                       "train beside its checkpoints).")
    g.add_argument("run_dir", metavar="RUN_DIR", help="a train --checkpoint-dir")
    g.add_argument("--out", help="image file to write (default RUN_DIR/curves.png)")
    g.add_argument("--debug", action="store_true",
                   help=f"show the traceback of an error (or set {DEBUG_ENV}=1)")
    return parser


# --------------------------------------------------------------------------- checks


def _check_device(name: str | None) -> None:
    if name is None:
        return
    import torch

    try:
        device = torch.device(name)
    except (RuntimeError, ValueError):
        raise UsageError(f"--device {name}: not a device name; use cpu, cuda, cuda:0 or mps") \
            from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise UsageError(f"--device {name}: CUDA is not available on this machine; "
                             "use --device cpu")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise UsageError(f"--device {name}: this machine has {torch.cuda.device_count()} "
                             "CUDA device(s)")
    elif device.type == "mps" and not torch.backends.mps.is_available():
        raise UsageError(f"--device {name}: MPS is not available on this machine; "
                         "use --device cpu")


CORPUS_FLAGS = ("train_src", "train_tgt", "valid_src", "valid_tgt")


HF_FLAGS = ("hf_dataset", "hf_config", "hf_src", "hf_tgt", "hf_split", "hf_valid_split")


def _hf_dataset(args) -> dict[str, str | None] | None:
    """--hf-dataset and its settings, defaults filled in (a local folder as an absolute path)."""
    given = {k: getattr(args, k, None) for k in HF_FLAGS}
    if not given["hf_dataset"]:
        stray = [k for k, v in given.items() if v]
        if stray and not args.resume:  # (with --resume: checked against the run's settings)
            raise UsageError(f"--{stray[0].replace('_', '-')}: only with --hf-dataset")
        return None
    from transformer_book.corpus import CorpusError, _languages

    try:
        given["hf_src"], given["hf_tgt"] = _languages(given["hf_config"], given["hf_src"],
                                                      given["hf_tgt"])
    except CorpusError as e:
        raise UsageError(str(e)) from None
    if Path(given["hf_dataset"]).is_dir():
        given["hf_dataset"] = str(Path(given["hf_dataset"]).resolve())
    given["hf_split"] = given["hf_split"] or "train"
    given["hf_valid_split"] = given["hf_valid_split"] or "validation"
    return given


def _corpus_files(args) -> dict[str, str] | None:
    """The four parallel text files of --train-src ... --valid-tgt, as absolute paths, or the
    --hf-dataset settings, or None (Multi30k)."""
    given = {k: getattr(args, k, None) for k in CORPUS_FLAGS}
    hf = _hf_dataset(args)
    if hf is not None and any(given.values()):
        raise UsageError("--hf-dataset and --train-src ...: give one corpus, not both")
    if hf is not None:
        return hf
    if not any(given.values()):
        return None
    missing = [k for k, v in given.items() if not v]
    if missing:
        flags = ", ".join("--" + k.replace("_", "-") for k in missing)
        raise UsageError(f"{flags}: missing; your own corpus needs all four files (training and "
                         "validation, source and target), or none of them for Multi30k")
    for name, path in given.items():
        if not Path(path).is_file():
            raise UsageError(f"--{name.replace('_', '-')} {path}: no such file")
    return {k: str(Path(v).resolve()) for k, v in given.items()}


def _load_corpus(args, files: dict[str, str] | None):
    """(training, validation) corpora: the user's parallel files or Hugging Face dataset (streamed
    pairs), else Multi30k."""
    if files is not None and files.get("hf_dataset"):
        from transformer_book.corpus import hf_translation_pairs

        return tuple(hf_translation_pairs(files["hf_dataset"], files["hf_config"],
                                          split=files[split], src_lang=files["hf_src"],
                                          tgt_lang=files["hf_tgt"])
                     for split in ("hf_split", "hf_valid_split"))
    if files is None:
        from transformer_book.data import load_multi30k

        return load_multi30k("train", args.data_dir), load_multi30k("val", args.data_dir)
    from transformer_book.corpus import load_parallel_text

    return (load_parallel_text(files["train_src"], files["train_tgt"], name="train"),
            load_parallel_text(files["valid_src"], files["valid_tgt"], name="valid"))


def _check_data_dir(folder: str | None) -> None:
    if folder is not None and not Path(folder).is_dir():
        raise UsageError(f"--data-dir {folder}: no such folder")


def _check_checkpoint_arg(path: str) -> None:
    p = Path(path)
    if not p.exists():
        raise UsageError(f"--checkpoint {path}: no such file")
    if p.is_dir():
        hint = f"; did you mean {p / 'last.pt'}?" if (p / "last.pt").is_file() else ""
        raise UsageError(f"--checkpoint {path}: is a folder, not a checkpoint file{hint}")


def available_memory(device) -> int | None:
    """Bytes free for a new allocation on ``device`` (GPU memory, or the smaller of the
    machine's available memory and the cgroup limit); None when unknown."""
    import torch

    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    sizes = []
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    sizes.append(int(line.split()[1]) * 1024)
    except OSError:
        try:
            sizes.append(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
        except (ValueError, OSError, AttributeError):
            pass
    try:  # a container's limit (cgroup v2)
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit != "max":
            used = int(Path("/sys/fs/cgroup/memory.current").read_text())
            sizes.append(int(limit) - used)
    except (OSError, ValueError):
        pass
    return min(sizes) if sizes else None


def _check_beam(args, model, device, longest: int) -> int | None:
    """Refuse a beam larger than the vocabulary, or one whose decoding of the longest input
    sentence needs more than half of the available memory; return the memory budget."""
    from transformer_book.evaluation import decode_memory_bytes

    config = model.config
    if args.beam_size > config.tgt_vocab_size:
        raise UsageError(f"--beam-size {args.beam_size}: more beams than the model's "
                         f"{config.tgt_vocab_size} target tokens; use a beam of at most "
                         f"{config.tgt_vocab_size} (the paper uses 4)")
    available = available_memory(device)
    if available is None:
        return None
    budget = available // 2
    need = decode_memory_bytes(config, longest, args.beam_size)
    if need > budget:
        per_beam = decode_memory_bytes(config, longest, 1)
        raise UsageError(f"--beam-size {args.beam_size}: decoding a sentence of {longest} "
                         f"tokens would need about {need / 2**30:.1f} GiB, more than half of "
                         f"the {available / 2**30:.1f} GiB available on {device}; use "
                         f"--beam-size {max(1, budget // per_beam)} or less (the paper uses 4)")
    return budget


# --------------------------------------------------------------------------- train


def _guess_preset(model_config: dict) -> str | None:
    from transformer_book.config import TransformerConfig

    for name in PRESETS:
        p = getattr(TransformerConfig, name)()
        if (p.d_model, p.num_heads, p.d_ff) == (model_config.get("d_model"),
                                                model_config.get("num_heads"),
                                                model_config.get("d_ff")):
            return name
    return None


def _resume_conflicts(args, state: dict) -> list[str]:
    """The flags given with --resume that contradict the checkpoint, as "--flag X (run: Y)"."""
    model, train, extra = state["model_config"], state["train_config"], state.get("extra") or {}
    run = {
        "preset": extra.get("preset") or _guess_preset(model),
        "vocab_size": extra.get("vocab_size", model.get("src_vocab_size")),
        "num_layers": model.get("num_layers"),
        "dropout": model.get("dropout"),
        "norm_first": model.get("norm_first"),
        "max_tokens": train.get("max_tokens"),
        "warmup_steps": train.get("warmup_steps"),
        "lr_factor": train.get("lr_factor"),
        "schedule": train.get("schedule", "noam"),
        "label_smoothing": train.get("label_smoothing"),
        "clip_grad_norm": train.get("clip_grad_norm"),
        "seed": train.get("seed"),
        "train_limit": extra.get("train_limit"),
        **{k: (extra.get("corpus") or {}).get(k) for k in CORPUS_FLAGS + HF_FLAGS},
    }
    out = []
    for name, value in run.items():
        given = getattr(args, name)
        if given is not None and (name in CORPUS_FLAGS
                                  or name == "hf_dataset" and Path(given).is_dir()):
            given = str(Path(given).resolve())
        if given is not None and given != value:
            flag = "--" + name.replace("_", "-")
            shown = "" if isinstance(given, bool) else f" {given}"
            out.append(f"{flag}{shown} (the run has {value})")
    return out


def _resume_command(args) -> str:
    parts = [sys.executable if os.path.isabs(sys.executable) else "python", "-m",
             "transformer_book", "train", "--checkpoint-dir", args.checkpoint_dir, "--resume"]
    if args.data_dir:
        parts += ["--data-dir", args.data_dir]
    world, local = os.environ.get("WORLD_SIZE", "1"), os.environ.get("LOCAL_WORLD_SIZE")
    if world not in ("", "1"):  # started by torchrun: start it the same way
        where = "--standalone" if local in (None, world) else "<the same --nnodes/--rdzv-* flags>"
        parts[:2] = ["torchrun", where, "--nproc-per-node", local or world, "-m"]
    return " ".join(p if p.startswith("<") else shlex.quote(p) for p in parts)


def cmd_train(args) -> int:
    from transformer_book.checkpoint import (
        TRAINING_KEYS,
        DirectoryLock,
        check_keys,
        load_checkpoint,
    )

    folder = Path(args.checkpoint_dir)
    last = folder / "last.pt"
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"--checkpoint-dir {folder}: exists and is not a folder")
    _check_device(args.device)
    _check_data_dir(args.data_dir)
    files = _corpus_files(args)
    if files is not None and args.data_dir:
        raise UsageError("--data-dir: not used with --train-src ... or --hf-dataset (your own "
                         "corpus); give one "
                         "or the other")
    if args.resume and not last.is_file():
        raise UsageError(f"--resume: {last} does not exist; leave out --resume to start a new "
                         "run there, or pass the --checkpoint-dir of the run to continue")
    from transformer_book import distributed

    try:  # under torchrun: this process's rank (the process group is joined in _train)
        ctx = distributed.from_environment()
    except ValueError as e:
        raise UsageError(str(e)) from None
    lock = None
    try:
        if ctx.is_main:  # rank 0 writes the folder; the other ranks only read it
            lock = DirectoryLock(folder).acquire()
    except OSError as e:
        raise CLIError(f"--checkpoint-dir {folder}: cannot create or lock it "
                       f"({e.strerror or e}); choose a folder you can write to") from None
    try:
        if not args.resume and last.exists() and not args.overwrite:
            raise UsageError(f"--checkpoint-dir {folder} already holds last.pt from another run; "
                             "add --resume to continue it, --overwrite to replace it with a new "
                             "run, or choose another --checkpoint-dir")
        state = None
        if args.resume:
            state = load_checkpoint(last, map_location="cpu")
            check_keys(state, TRAINING_KEYS, last)
            conflicts = _resume_conflicts(args, state)
            if conflicts:
                raise UsageError(f"--resume: {len(conflicts)} flag(s) contradict the run in "
                                 f"{last}: {'; '.join(conflicts)}; leave them out to continue "
                                 "the run, or start a new run in another --checkpoint-dir")
        return _train(args, folder, last, state, ctx)
    finally:
        if lock is not None:
            lock.release()
        distributed.shutdown()


def _join(ctx, config):
    """Join the torchrun process group: each process on its own GPU (``cuda:LOCAL_RANK``) with
    NCCL, or on the CPU with gloo. Returns ``config`` with this process's device."""
    import torch

    from transformer_book import distributed

    device = distributed.device_for(ctx, config.device)
    if device.startswith("cuda") and ctx.local_rank >= torch.cuda.device_count():
        raise UsageError(f"LOCAL_RANK {ctx.local_rank}: this machine has "
                         f"{torch.cuda.device_count()} CUDA device(s); start at most that many "
                         "processes per machine (torchrun --nproc-per-node), or pass --device cpu")
    distributed.init(ctx, device)
    return dataclasses.replace(config, device=device)


def _train(args, folder: Path, last: Path, state: dict | None, ctx=None) -> int:
    import torch

    from transformer_book import describe_hardware
    from transformer_book.config import TransformerConfig
    from transformer_book.corpus import prepare_compact_corpus
    from transformer_book.distributed import Context
    from transformer_book.model import Transformer
    from transformer_book.tokenizer import SubwordTokenizer, load_or_train_tokenizer
    from transformer_book.train import TrainConfig, Trainer

    resumable = {"checkpoint_dir": str(folder), "progress": not args.no_progress}
    resumable.update({k: getattr(args, k) for k in RESUMABLE if getattr(args, k) is not None})
    if state is not None:
        tokenizer = SubwordTokenizer.from_str(state["extra"]["tokenizer"])
        model_config = TransformerConfig(**state["model_config"])
        # batching, schedule, seed and checkpoint interval come from the checkpoint, so the
        # run continues exactly; only the RESUMABLE settings given on the command line change
        known = {f.name for f in dataclasses.fields(TrainConfig)}
        saved = {k: v for k, v in state["train_config"].items() if k in known}
        config = TrainConfig(**{**saved, **resumable})
        extra = dict(state["extra"])
        step, epoch = state["step"], state["epoch"]
        if args.epochs is not None and args.epochs < epoch:
            raise UsageError(f"--epochs {args.epochs}: the run in {last} has already done "
                             f"{epoch} epochs; pass more epochs to train longer")
        if args.max_steps is not None and args.max_steps < step:
            raise UsageError(f"--max-steps {args.max_steps}: the run in {last} is already at "
                             f"step {step}; pass more steps to train longer")
        spent = state.get("train_seconds", 0.0)
        if args.time_budget is not None and args.time_budget < spent:
            raise UsageError(f"--time-budget {args.time_budget:g}: the run in {last} has already "
                             f"trained for {spent:.0f} s; pass a larger budget to train longer")
        out_of_time = config.time_budget is not None and spent >= config.time_budget
        if (epoch >= config.epochs or (config.max_steps is not None and step >= config.max_steps)
                or out_of_time):
            limit = (f"--max-steps {config.max_steps}" if config.max_steps is not None
                     and step >= config.max_steps
                     else f"--epochs {config.epochs}" if epoch >= config.epochs
                     else f"--time-budget {config.time_budget:g} (seconds)")
            print(f"{PROG} train: nothing to do: the run in {last} is at step {step} ({epoch} "
                  f"epochs complete) and has reached {limit}; pass a larger --epochs, --max-steps "
                  "or --time-budget with --resume to train longer", file=sys.stderr)
            return 0
    else:
        defaults = dict(TRAIN_DEFAULTS)
        if args.preset == "cpu":
            recipe = TrainConfig.cpu()
            defaults.update({k: getattr(recipe, k) for k in TrainConfig.RECIPE_FIELDS})
        values = {k: (defaults.get(k) if getattr(args, k, None) is None
                      else getattr(args, k)) for k in defaults}
        config = TrainConfig(max_tokens=values["max_tokens"], accumulate=args.accumulate or 1,
                             warmup_steps=values["warmup_steps"],
                             lr_factor=values["lr_factor"],
                             schedule=values["schedule"], time_budget=values["time_budget"],
                             label_smoothing=values["label_smoothing"],
                             clip_grad_norm=args.clip_grad_norm, seed=values["seed"],
                             epochs=values["epochs"], max_steps=args.max_steps,
                             checkpoint_every=values["checkpoint_every"],
                             device=args.device, checkpoint_dir=str(folder),
                             progress=not args.no_progress)
        extra = {"train_limit": args.train_limit, "preset": values["preset"],
                 "vocab_size": values["vocab_size"], "corpus": _corpus_files(args)}

    ctx = ctx or Context()
    if ctx.enabled:
        config = _join(ctx, config)
    train_split, val_split = _load_corpus(args, extra.get("corpus"))
    if state is None:
        vocab_size = extra["vocab_size"]
        # every rank uses rank 0's tokenizer, learned once (the ranks of other machines may not
        # share its cache)
        tokenizer = (load_or_train_tokenizer(train_split, vocab_size=vocab_size) if ctx.is_main
                     else None)
        if ctx.enabled:
            text = ctx.broadcast_text(tokenizer.to_str() if ctx.is_main else None)
            if not ctx.is_main:
                tokenizer = SubwordTokenizer.from_str(text)
        if tokenizer.vocab_size > vocab_size:
            raise UsageError(f"--vocab-size {vocab_size}: too small; the training text has "
                             f"{tokenizer.vocab_size - 4} distinct characters, so with the 4 "
                             f"special tokens the vocabulary needs at least "
                             f"{tokenizer.vocab_size} ids; use --vocab-size "
                             f"{tokenizer.vocab_size} or more (default 8000)")
        if tokenizer.vocab_size < vocab_size:
            print(f"{PROG} train: warning: --vocab-size {vocab_size}: the training text yields "
                  f"only {tokenizer.vocab_size} subwords; the model uses a vocabulary of "
                  f"{tokenizer.vocab_size}", file=sys.stderr)
        overrides = {"dropout": args.dropout, "num_layers": args.num_layers,
                     "norm_first": args.norm_first}
        model_config = getattr(TransformerConfig, extra["preset"])(
            src_vocab_size=tokenizer.vocab_size, tgt_vocab_size=tokenizer.vocab_size,
            share_embeddings=True, pad_id=tokenizer.pad_id,
            **{k: v for k, v in overrides.items() if v is not None})
    # tokenised by streaming into compact arrays (2 bytes per token): the same batches as
    # train.prepare_corpus, for corpora of millions of pairs too
    train_data = prepare_compact_corpus(tokenizer, train_split, config.max_tokens,
                                        seed=config.seed, max_len=model_config.max_len - 2,
                                        limit=extra.get("train_limit"))
    val_data = prepare_compact_corpus(tokenizer, val_split, config.max_tokens, shuffle=False)
    for name, data in (("training", train_data), ("validation", val_data)):
        try:
            data.batch_indices(0)
        except ValueError as e:  # one sentence alone exceeds the token budget
            raise UsageError(f"--max-tokens {config.max_tokens}: too small for the {name} data "
                             f"({e}); raise --max-tokens") from None

    torch.manual_seed(config.seed)
    model = Transformer(model_config)
    extra["tokenizer"] = tokenizer.to_str()
    trainer = Trainer(model, train_data, config, model_config=model_config, val_data=val_data,
                      extra=extra, distributed=ctx)
    say = ctx.is_main  # rank 0 speaks for all
    per_step = ctx.world_size * config.accumulate
    if state is not None:
        trainer.load_checkpoint(last)
        if say:
            print(f"resumed from {last} at step {trainer.step} (epoch {trainer.epoch + 1}); "
                  f"checkpoint every {config.checkpoint_every} steps", file=sys.stderr)
        before = state.get("world_size", 1) * state["train_config"].get("accumulate", 1)
        if say and before != per_step:
            keep = (f"; pass --accumulate {before // ctx.world_size} to keep its batch size"
                    if before % ctx.world_size == 0 else "")
            print(f"{PROG} train: warning: the run took {before} batches per step, now "
                  f"{per_step} ({ctx.world_size} process(es) x --accumulate "
                  f"{config.accumulate}){keep}", file=sys.stderr)
    elif args.overwrite and say:  # the user asked for a new run here: the old one's files go
        for old in [last, *folder.glob("weights_epoch*.pt"), folder / "metrics.jsonl"]:
            old.unlink(missing_ok=True)
    if say:
        where = (f"{ctx.world_size} processes ({config.device.split(':')[0]}), " if ctx.enabled
                 else "")
        print(f"{where}{describe_hardware(trainer.device)}; {model.num_parameters():,} "
              f"parameters; {len(train_data)} training pairs; {per_step} batch(es) per step",
              file=sys.stderr)

    def request_stop(signum, frame):
        if trainer.stop_requested:  # a second Ctrl-C stops at once, without a checkpoint
            raise KeyboardInterrupt
        trainer.stop_requested = True
        if say:
            print(f"\n{PROG} train: stopping after this step and writing {last} "
                  "(press Ctrl-C again to stop at once, without it)", file=sys.stderr, flush=True)

    handlers = {s: signal.signal(s, request_stop) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        history = trainer.fit()
    except KeyboardInterrupt:
        kept = (f"{last} holds the last one written: resume it with --resume" if last.is_file()
                else "no checkpoint was written yet")
        raise CLIError(f"interrupted twice: stopped at once, without a checkpoint; {kept}",
                       status=130) from None
    finally:
        for s, h in handlers.items():
            signal.signal(s, h)
    if trainer.stop_requested:
        if say:
            print(f"{PROG} train: interrupted at step {trainer.step}; checkpoint written to "
                  f"{last}. Resume with:\n  {_resume_command(args)}", file=sys.stderr)
        return 130
    if not say:
        return 0
    if history.val_loss:
        print(f"step {trainer.step}: val loss {history.val_loss[-1][1]:.4f}", file=sys.stderr)
    if history.tokens_per_second:
        print(f"throughput: {history.tokens_per_second[-1][1]:.0f} target tokens/s",
              file=sys.stderr)
    print(f"checkpoint: {last}", file=sys.stderr)
    return 0


# --------------------------------------------------------------------------- translate, bleu


def _read_checkpoint(args):
    from transformer_book.checkpoint import model_from_checkpoint

    _check_checkpoint_arg(args.checkpoint)
    _check_device(args.device)
    return model_from_checkpoint(args.checkpoint, args.device)


def _warn(command: str, message: str) -> None:
    print(f"{PROG} {command}: warning: {message}", file=sys.stderr)


def read_lines(stream, invalid: str = "error") -> list[str]:
    """The lines of a binary stream decoded as UTF-8 (a final newline does not start a new
    line; ``\\r\\n`` endings and a leading byte-order mark are accepted).

    Args:
        invalid: ``"error"``: a :class:`CLIError` naming the first line with bytes that are not
            UTF-8; ``"replace"``: such bytes become U+FFFD, with a warning per line.
    """
    raw = stream.read()
    if isinstance(raw, str):  # a text stream (already decoded), e.g. in tests
        raw = raw.encode("utf-8", errors="surrogateescape")
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    chunks = raw.split(b"\n")
    if chunks and chunks[-1] == b"":
        chunks.pop()
    lines = []
    for number, chunk in enumerate(chunks, 1):
        chunk = chunk.removesuffix(b"\r")
        try:
            lines.append(chunk.decode("utf-8"))
        except UnicodeDecodeError as e:
            if invalid == "error":
                raise CLIError(f"stdin line {number}: byte {chunk[e.start]:#04x} at column "
                               f"{e.start + 1} is not UTF-8; convert the input to UTF-8 "
                               "(e.g. iconv -f latin1 -t utf-8), or pass --invalid-utf8 replace "
                               "to replace such bytes") from None
            _warn("translate", f"stdin line {number}: bytes that are not UTF-8 replaced by U+FFFD")
            lines.append(chunk.decode("utf-8", errors="replace"))
    return lines


def cmd_translate(args) -> int:
    from transformer_book.evaluation import source_token_limit, translate

    model, tokenizer, _ = _read_checkpoint(args)
    device = next(model.parameters()).device
    lines = read_lines(getattr(sys.stdin, "buffer", sys.stdin), args.invalid_utf8)
    limit = source_token_limit(model, args.max_tokens)
    lengths = [len(ids) for ids in tokenizer.encode_batch(lines)]
    for number, n in enumerate(lengths, 1):
        if n > limit:
            _warn("translate", f"stdin line {number}: {n} subword tokens, more than the {limit} "
                  f"the model takes (max_len {model.config.max_len}, --max-tokens "
                  f"{args.max_tokens}); translated its first {limit} tokens only")
    longest = min(max(lengths, default=1), limit) + 1
    budget = _check_beam(args, model, device, longest)
    outputs = translate(model, tokenizer, lines, beam_size=args.beam_size,
                        length_penalty=args.length_penalty, max_tokens=args.max_tokens,
                        truncate=True, memory_budget=budget)
    assert len(outputs) == len(lines)
    text = "".join(o.replace("\n", " ") + "\n" for o in outputs)
    if hasattr(sys.stdout, "buffer"):  # UTF-8 whatever the locale
        sys.stdout.flush()
        sys.stdout.buffer.write(text.encode("utf-8"))
    else:
        sys.stdout.write(text)
    sys.stdout.flush()
    return 0


def cmd_bleu(args) -> int:
    from transformer_book.data import MULTI30K_SIZES, load_multi30k
    from transformer_book.evaluation import corpus_bleu, source_token_limit, translate

    if args.split not in MULTI30K_SIZES:
        raise UsageError(f"--split {args.split}: unknown; use one of {', '.join(MULTI30K_SIZES)}")
    _check_data_dir(args.data_dir)
    model, tokenizer, _ = _read_checkpoint(args)
    split = load_multi30k(args.split, args.data_dir)
    limit = source_token_limit(model, args.max_tokens)
    longest = min(max(len(ids) for ids in tokenizer.encode_batch(split.src)), limit) + 1
    budget = _check_beam(args, model, next(model.parameters()).device, longest)
    hyps = translate(model, tokenizer, split.src, beam_size=args.beam_size,
                     length_penalty=args.length_penalty, max_tokens=args.max_tokens,
                     progress=True, truncate=True, memory_budget=budget)
    score, signature = corpus_bleu(hyps, split.tgt)
    print(f"{args.split} beam={args.beam_size}: {score}")
    print(f"signature: {signature}")
    _record_bleu(args, score.score)
    return 0


def _record_bleu(args, bleu: float) -> None:
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
        _warn("bleu", f"{log}: score not recorded ({getattr(e, 'strerror', None) or e})")


def cmd_plot(args) -> int:
    import matplotlib

    matplotlib.use("Agg")  # a file, not a window: works on a server
    from transformer_book.runlog import plot_run

    folder = Path(args.run_dir)
    if not folder.is_dir():
        raise UsageError(f"RUN_DIR {folder}: no such folder")
    out = Path(args.out) if args.out else folder / "curves.png"
    try:
        plot_run(folder, out)
    except FileNotFoundError as e:
        raise CLIError(str(e)) from None
    print(out)
    return 0


# --------------------------------------------------------------------------- errors


def _message(exc: BaseException) -> tuple[str, int]:
    """One line saying what went wrong (and what to do), and the exit status."""
    from transformer_book.checkpoint import (
        CheckpointError,
        CheckpointWriteError,
        DirectoryLockedError,
    )
    from transformer_book.corpus import CorpusError
    from transformer_book.data import Multi30kError

    if isinstance(exc, UsageError | CLIError):
        return str(exc), exc.status
    if isinstance(exc, CheckpointWriteError):
        return exc.strerror, 1
    if isinstance(exc, CheckpointError | DirectoryLockedError | Multi30kError | CorpusError
                  | FloatingPointError):
        return str(exc), 1
    if isinstance(exc, OSError):
        where = f"{exc.filename}: " if exc.filename else ""
        return f"{where}{exc.strerror or exc}", 1
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted", 130
    return (f"unexpected {type(exc).__name__}: {exc}; run again with --debug for the "
            "traceback, and please report it"), 1


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    command = {"train": cmd_train, "translate": cmd_translate, "bleu": cmd_bleu,
               "plot": cmd_plot}[args.command]
    debug = args.debug or os.environ.get(DEBUG_ENV, "") not in ("", "0")
    try:
        return command(args)
    except BrokenPipeError:  # e.g. `translate ... | head`: the reader left, nothing to say
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except (Exception, KeyboardInterrupt) as exc:
        if debug:
            traceback.print_exc()
        message, status = _message(exc)
        message = " ".join(str(message).split())  # one line, whatever the exception held
        rank = (f" (rank {os.environ.get('RANK')})"  # under torchrun: which process said it
                if os.environ.get("WORLD_SIZE", "1") not in ("", "1") else "")
        print(f"{PROG} {args.command}{rank}: error: {message}", file=sys.stderr)
        return status


if __name__ == "__main__":
    sys.exit(main())
