"""``python -m transformer_book train``: train a Transformer as Sec. 5 prescribes (or, with
``--model rnn``, the recurrent translator), with resumable checkpoints. The training flags come
from :class:`~transformer_book.config.TrainConfig`'s fields; the data's from :mod:`.train_data`.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import signal
import sys
from pathlib import Path

from transformer_book.cli.common import (
    PROG,
    CLIError,
    UsageError,
    add_common,
    add_config_flags,
    check_device,
    config_fields,
    flag_name,
    given_settings,
    number_in,
    positive_int,
    warn,
)
from transformer_book.cli.train_data import (
    CORPUS_FLAGS,
    HF_FLAGS,
    add_corpus_flags,
    corpus_files,
    load_corpus,
)
from transformer_book.config import PRESETS, TrainConfig, train_config_for

DEFAULT_PRESET, DEFAULT_VOCAB = "small", 8000
#: The TrainConfig fields `train` has a flag for, and those --resume may change (plus the
#: device, a flag of every command, and the folder and progress bar, always the command line's).
TRAIN_FLAGS = config_fields(TrainConfig, flag=True)
RESUMABLE = config_fields(TrainConfig, resume=True)
MODEL_FLAGS = ("dropout", "num_layers", "norm_first")


def add_parser(sub) -> None:
    *some, final = (flag_name(n) for n in RESUMABLE if n in TRAIN_FLAGS or n == "device")
    p = sub.add_parser("train", help="train on Multi30k de->en (or your own corpus), with checkpoints",
                       description="Train a Transformer on Multi30k task 1 (German -> English), "
                       "or on your own parallel text files (--train-src ... --valid-tgt). "
                       "Writes CHECKPOINT_DIR/last.pt every --checkpoint-every steps, at each "
                       "epoch end and on Ctrl-C; --resume continues from it with the run's own "
                       f"settings (only {', '.join(some)} and {final} may change). Under torchrun, one process "
                       "per GPU (or several CPU processes) trains with DistributedDataParallel; "
                       "see the README.")
    p.add_argument("--model", choices=tuple(PRESETS), help="the Transformer (default), or the "
                   "recurrent translator (rnn: bidirectional LSTM encoder, LSTM decoder with "
                   "attention; presets tiny and cpu, default cpu)")
    p.add_argument("--preset", choices=PRESETS["transformer"],
                   help=f"TransformerConfig preset (default: {DEFAULT_PRESET}; RecurrentConfig's "
                   "with --model rnn, default cpu); 'cpu' also sets "
                   "the training recipe of TrainConfig.cpu() (TrainConfig.cpu_rnn() with --model "
                   "rnn: its own learning rate): 20 minutes on 2 CPU cores, "
                   "over 30 BLEU on test 2016 on the CPUs chapter 8 names")
    p.add_argument("--dropout", type=number_in("[0, 1)"), help="override the preset's dropout")
    p.add_argument("--num-layers", type=positive_int, help="override the preset's layers per stack")
    p.add_argument("--norm-first", action="store_true", default=None,
                   help="pre-norm sub-layers (the paper, and the default, is post-norm)")
    p.add_argument("--vocab-size", type=number_in("[5, inf)", int),
                   help=f"joint BPE vocabulary, special tokens included ({DEFAULT_VOCAB})")
    add_config_flags(p, TrainConfig, TRAIN_FLAGS)
    p.add_argument("--checkpoint-dir", default="checkpoints", help="default: ./checkpoints")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--resume", action="store_true",
                   help="continue the run in CHECKPOINT_DIR (from its last.pt, with its settings)")
    g.add_argument("--overwrite", action="store_true",
                   help="start a new run in CHECKPOINT_DIR even though it holds a last.pt "
                   "(deleted when training starts)")
    add_corpus_flags(p)
    p.add_argument("--train-limit", type=positive_int, help="use only the first N training pairs "
                   "(smoke tests); the tokenizer is still learned from the whole training split")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_common(p)


# --------------------------------------------------------------------------- resume


def _guess_preset(model_config: dict) -> str | None:
    from transformer_book.config import TransformerConfig

    for name in PRESETS["transformer"]:
        p = getattr(TransformerConfig, name)()
        if (p.d_model, p.num_heads, p.d_ff) == (model_config.get("d_model"),
                                                model_config.get("num_heads"),
                                                model_config.get("d_ff")):
            return name
    return None


def _resume_conflicts(args, state: dict) -> list[str]:
    """The flags given with --resume that contradict the checkpoint, as "--flag X (run: Y)"."""
    model, train, extra = state["model_config"], state["train_config"], state.get("extra") or {}
    defaults = {f.name: f.default for f in dataclasses.fields(TrainConfig)}
    run = {
        "model": model.get("kind", "transformer"),
        "preset": extra.get("preset") or _guess_preset(model),
        "vocab_size": extra.get("vocab_size", model.get("src_vocab_size")),
        **{k: model.get(k) for k in MODEL_FLAGS},
        # a field the checkpoint lacks (written before the field existed) had its default
        **{k: train.get(k, defaults[k]) for k in TRAIN_FLAGS if k not in RESUMABLE},
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
            shown = "" if isinstance(given, bool) else f" {given}"
            out.append(f"{flag_name(name)}{shown} (the run has {value})")
    return out


def resume_command(args) -> str:
    """The command that resumes this run (printed after Ctrl-C)."""
    parts = [sys.executable if os.path.isabs(sys.executable) else "python", "-m",
             "transformer_book", "train", "--checkpoint-dir", args.checkpoint_dir, "--resume"]
    if args.data_dir:
        parts += ["--data-dir", args.data_dir]
    world, local = os.environ.get("WORLD_SIZE", "1"), os.environ.get("LOCAL_WORLD_SIZE")
    if world not in ("", "1"):  # started by torchrun: start it the same way
        where = "--standalone" if local in (None, world) else "<the same --nnodes/--rdzv-* flags>"
        parts[:2] = ["torchrun", where, "--nproc-per-node", local or world, "-m"]
    return " ".join(p if p.startswith("<") else shlex.quote(p) for p in parts)


def _resumed_config(args, state: dict, last: Path, command_line: dict) -> TrainConfig | None:
    """The run's own settings, with those --resume may change taken from the command line;
    None when the run has nothing left to do."""
    # batching, schedule, seed and checkpoint interval come from the checkpoint, so the run
    # continues exactly; only the RESUMABLE settings given on the command line change
    known = {f.name for f in dataclasses.fields(TrainConfig)}
    saved = {k: v for k, v in state["train_config"].items() if k in known}
    config = TrainConfig(**{**saved, **{k: v for k, v in command_line.items() if k in RESUMABLE}})
    step, epoch, spent = state["step"], state["epoch"], state.get("train_seconds", 0.0)
    if args.epochs is not None and args.epochs < epoch:
        raise UsageError(f"--epochs {args.epochs}: the run in {last} has already done "
                         f"{epoch} epochs; pass more epochs to train longer")
    if args.max_steps is not None and args.max_steps < step:
        raise UsageError(f"--max-steps {args.max_steps}: the run in {last} is already at "
                         f"step {step}; pass more steps to train longer")
    if args.time_budget is not None and args.time_budget < spent:
        raise UsageError(f"--time-budget {args.time_budget:g}: the run in {last} has already "
                         f"trained for {spent:.0f} s; pass a larger budget to train longer")
    from transformer_book.schedule import TimePlan

    plan = TimePlan.resumed(config.time_budget, state.get("time_plan"), step, spent)
    budget_spent = (step >= plan.steps if plan.steps is not None  # planned: the steps decide
                    else config.time_budget is not None and spent >= config.time_budget)
    limit = (f"--max-steps {config.max_steps}" if config.max_steps is not None
             and step >= config.max_steps
             else f"--epochs {config.epochs}" if epoch >= config.epochs
             else f"--time-budget {config.time_budget:g} (seconds)" if budget_spent else None)
    if limit is None:
        return config
    print(f"{PROG} train: nothing to do: the run in {last} is at step {step} ({epoch} "
          f"epochs complete) and has reached {limit}; pass a larger --epochs, --max-steps "
          "or --time-budget with --resume to train longer", file=sys.stderr)
    return None


# --------------------------------------------------------------------------- the command


def run(args) -> int:
    from transformer_book import distributed
    from transformer_book.checkpoint import TRAINING_KEYS, check_keys, load_checkpoint
    from transformer_book.files import DirectoryLock, DirectoryLockedError

    folder = Path(args.checkpoint_dir)
    last = folder / "last.pt"
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"--checkpoint-dir {folder}: exists and is not a folder")
    check_device(args.device)
    files = corpus_files(args)
    if args.resume and not last.is_file():
        raise UsageError(f"--resume: {last} does not exist; leave out --resume to start a new "
                         "run there, or pass the --checkpoint-dir of the run to continue")
    try:  # under torchrun: this process's rank (the process group is joined in _train)
        ctx = distributed.from_environment()
    except ValueError as e:
        raise UsageError(str(e)) from None
    lock = None
    try:
        if ctx.is_main:  # rank 0 writes the folder; the other ranks only read it
            lock = DirectoryLock(folder).acquire()
    except DirectoryLockedError as e:
        raise CLIError(f"--checkpoint-dir {folder}: {e}") from None
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
        return _train(args, folder, state, ctx, files)
    finally:
        if lock is not None:
            lock.release()
        distributed.shutdown()


def _join(ctx, config: TrainConfig) -> TrainConfig:
    """Join the torchrun process group; ``config`` with this process's device."""
    import torch

    from transformer_book import distributed

    device = distributed.device_for(ctx, config.device)
    if device.startswith("cuda") and ctx.local_rank >= torch.cuda.device_count():
        raise UsageError(f"LOCAL_RANK {ctx.local_rank}: this machine has "
                         f"{torch.cuda.device_count()} CUDA device(s); start at most that many "
                         "processes per machine (torchrun --nproc-per-node), or pass --device cpu")
    distributed.init(ctx, device)
    return dataclasses.replace(config, device=device)


def _tokenizer(train_split, vocab_size: int, ctx):
    """The joint BPE vocabulary of the training text: learned once, by rank 0 (the ranks of
    other machines may not share its cache), and sent to the others."""
    from transformer_book.tokenizer import SubwordTokenizer, load_or_train_tokenizer

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
                         f"{tokenizer.vocab_size} or more (default {DEFAULT_VOCAB})")
    if tokenizer.vocab_size < vocab_size:
        warn("train", f"--vocab-size {vocab_size}: the training text yields only "
             f"{tokenizer.vocab_size} subwords; the model uses a vocabulary of "
             f"{tokenizer.vocab_size}")
    return tokenizer


def _train(args, folder: Path, state: dict | None, ctx, files) -> int:
    from transformer_book.config import model_config_for, model_config_from_dict
    from transformer_book.corpus import prepare_run_data
    from transformer_book.tokenizer import SubwordTokenizer

    last = folder / "last.pt"
    command_line = {**given_settings(args, TRAIN_FLAGS), **given_settings(args, ["device"]),
                    "checkpoint_dir": str(folder), "progress": not args.no_progress}
    if state is not None:
        config = _resumed_config(args, state, last, command_line)
        if config is None:
            return 0
        extra = dict(state["extra"])
    else:
        kind = args.model or "transformer"
        preset = args.preset or ("cpu" if kind == "rnn" else DEFAULT_PRESET)
        if preset not in PRESETS[kind]:
            raise UsageError(f"--preset {preset}: the recurrent model (--model rnn) has the "
                             f"presets {' and '.join(PRESETS[kind])}")
        if kind == "rnn" and args.norm_first:
            raise UsageError("--norm-first: the recurrent model (--model rnn) has no sub-layers")
        base = train_config_for(preset, kind)  # --preset cpu: the cpu recipe
        config = dataclasses.replace(base, **command_line)
        extra = {"train_limit": args.train_limit, "preset": preset,
                 "vocab_size": args.vocab_size or DEFAULT_VOCAB, "corpus": files}
    if ctx.enabled:
        config = _join(ctx, config)
    train_split, val_split = load_corpus(args, extra.get("corpus"))
    if state is not None:
        tokenizer = SubwordTokenizer.from_str(state["extra"]["tokenizer"])
        model_config = model_config_from_dict(state["model_config"])
    else:
        tokenizer = _tokenizer(train_split, extra["vocab_size"], ctx)
        model_config = model_config_for(tokenizer, extra["preset"], kind,
                                        **given_settings(args, MODEL_FLAGS))
    _, train_data, val_data = prepare_run_data(
        train_split, val_split, tokenizer=tokenizer, max_tokens=config.max_tokens,
        max_len=model_config.max_len, seed=config.seed, limit=extra.get("train_limit"))
    for name, data in (("training", train_data), ("validation", val_data)):
        try:
            data.batch_indices(0)
        except ValueError as e:  # one sentence alone exceeds the token budget
            raise UsageError(f"--max-tokens {config.max_tokens}: too small for the {name} data "
                             f"({e}); raise --max-tokens") from None
    extra["tokenizer"] = tokenizer.to_str()
    return _fit(args, folder, state, ctx, config, model_config, train_data, val_data, extra)


def _fit(args, folder: Path, state, ctx, config, model_config, train_data, val_data,
         extra) -> int:
    """Build the model and the trainer, train (Ctrl-C: stop after the step, with a
    checkpoint), and say how it went."""
    import torch

    from transformer_book import describe_hardware
    from transformer_book.model import build_model
    from transformer_book.train import Trainer

    last = folder / "last.pt"
    torch.manual_seed(config.seed)
    model = build_model(model_config)
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
            warn("train", f"the run took {before} batches per step, now {per_step} "
                 f"({ctx.world_size} process(es) x --accumulate {config.accumulate}){keep}")
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
                  f"{last}. Resume with:\n  {resume_command(args)}", file=sys.stderr)
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
