"""Time to BLEU: train from scratch until the validation BLEU reaches a target, on the machine
you have.

Trains a recipe (default: the book's CPU speed-run recipe, ``fast``) and, in the same loop, on
the same data and tokenizer, ``torch.nn.Transformer`` with two standard recipes, one after the
other: ``standard`` (the paper's schedule: same shape as ``fast``, Eq. (3) with its 4,000-step
warm-up, label smoothing 0.1, batches of 4,096 tokens) and ``tutorial`` (the PyTorch tutorial "Language
Translation with nn.Transformer": 3+3 layers, d_model 512, 8 heads, d_ff 512, Adam at a constant
1e-4, about 128 sentence pairs per batch, no label smoothing). Every ``--eval-every`` seconds of
training (``--reference-eval-every`` for the two references) the clock stops and the
**validation** set is translated
with greedy decoding and scored (cased sacreBLEU); the first evaluation at or above
``--val-target`` (default: the target) ends the run, and so does the recipe's time budget.
Only then is test 2016 translated, once, with beam search (beam 4, length penalty 0.6, Sec. 6.1):
the test set makes no choice. ``nn.Transformer`` keeps no key/value cache; its weights are copied
into the book's model, which computes the same function, to decode.

``train_seconds`` is the wall time of the training steps alone (data batching included;
evaluation excluded); with ``--compile`` the compilation, done before the clock starts on one
batch of every shape, is reported as ``compile_seconds``.

Writes ``benchmarks/results/<machine>/time_to_bleu.json`` (or ``--out``): the hardware, torch,
the command, and per run the recipe, the evaluations (step, seconds, validation BLEU), the
reached test BLEU, train seconds, steps, target tokens, tokens/s.

    .venv/bin/python benchmarks/time_to_bleu.py --quick                       # a smoke test
    .venv/bin/python benchmarks/time_to_bleu.py --machine cpu-2026-11-24 --threads 2
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import shlex
import sys
import time
from pathlib import Path

import torch
from flags import add_flags, results_folder, set_threads
from torch import nn
from transformer_book import describe_hardware, get_device, set_seed
from transformer_book.config import TransformerConfig
from transformer_book.corpus import prepare_run_data
from transformer_book.data import load_multi30k
from transformer_book.evaluation import corpus_bleu, translate
from transformer_book.files import atomic_write
from transformer_book.model import Transformer
from transformer_book.tokenizer import load_or_train_tokenizer
from transformer_book.train import Clock, TrainConfig, TrainStep, make_optimizer
from transformer_book.utils import cpu_identity
from transformer_lab import TorchTransformerBaseline, count_train_flops


@dataclasses.dataclass
class Recipe:
    """A model and how to train it, in seconds of training."""

    name: str
    model: str  # "transformer_book" or "nn.Transformer"
    d_model: int = 256
    num_heads: int = 4
    num_layers: int = 3
    d_ff: int = 1024
    dropout: float = 0.1
    embed_init: str = "normal"
    vocab_size: int = 8000
    max_tokens: int = 1500  # padded tokens per batch
    warmup_steps: int = 200
    lr_factor: float = 0.45
    # "linear": decays to 0 at time_budget; "noam": Eq. (3); "constant": Adam at `lr` throughout
    schedule: str = "linear"
    lr: float = 0.0  # the rate of schedule "constant"
    label_smoothing: float = 0.1
    time_budget: float = 600.0  # seconds of training
    # bf16 autocast of the forward pass (weights and Adam in fp32); on a CPU the step then runs
    # attention through PyTorch's plain kernel (transformer_book.step.autocast)
    bf16: bool = False
    compile: bool = False
    seed: int = 0


def from_presets(name: str, **changes) -> Recipe:
    """A recipe of the book's model with the cpu presets' settings
    (``TransformerConfig.cpu()``, ``TrainConfig.cpu()``), with ``changes``."""
    model, train = TransformerConfig.cpu(), TrainConfig.cpu()
    fields = {k: getattr(model, k) for k in ("d_model", "num_heads", "num_layers", "d_ff",
                                             "dropout", "embed_init")}
    fields |= {k: getattr(train, k) for k in ("max_tokens", "warmup_steps", "lr_factor",
                                              "schedule")}
    return Recipe(name, "transformer_book", **{**fields, **changes})


RECIPES = {
    # the CPU speed-run recipe (chapter 11): the cpu presets without dropout, in bf16 (the
    # forward pass; on a CPU without bf16 instructions that is slower, not faster), 600 s
    "fast": from_presets("fast", dropout=0.0, bf16=True, time_budget=600.0),
    # the cpu presets themselves (fp32 where the CPU lacks bf16 instructions), on 600 s
    "cpu": from_presets("cpu", time_budget=600.0),
    # nn.Transformer of the same shape with the paper's schedule and regularisation: Eq. (3) with
    # its warm-up of 4,000 steps and its rate, P_drop 0.1 (nn.Transformer's one dropout also
    # acts on the attention weights and inside the feed-forward network), label smoothing 0.1;
    # batches of 4,096 tokens (the paper's held about 25,000 source + 25,000 target tokens);
    # Xavier-uniform for every matrix (nn.Transformer's own initialisation; the embedding too)
    "standard": Recipe("standard", "nn.Transformer", dropout=0.1, embed_init="xavier",
                       max_tokens=4096, warmup_steps=4000, lr_factor=1.0, schedule="noam"),
    # nn.Transformer as the PyTorch tutorial trains it on Multi30k (beginner_source/
    # translation_transformer.py): its shape, Adam(lr=1e-4, betas=(0.9, 0.98), eps=1e-9) at a
    # constant rate, batches of 128 sentence pairs (here 2,150 padded tokens: 128 pairs on
    # average), cross-entropy without smoothing, Xavier-uniform for every matrix. Unlike the
    # tutorial: the book's shared 8k-piece vocabulary with tied embeddings, no output bias.
    "tutorial": Recipe("tutorial", "nn.Transformer", d_model=512, num_heads=8, num_layers=3,
                       d_ff=512, dropout=0.1, embed_init="xavier", max_tokens=2150,
                       schedule="constant", lr=1e-4, label_smoothing=0.0),
}
REFERENCES = ("standard", "tutorial")


def build_model(recipe: Recipe, tokenizer) -> tuple[nn.Module, TransformerConfig]:
    config = TransformerConfig(
        src_vocab_size=tokenizer.vocab_size, tgt_vocab_size=tokenizer.vocab_size,
        pad_id=tokenizer.pad_id, d_model=recipe.d_model, num_heads=recipe.num_heads,
        num_layers=recipe.num_layers, d_ff=recipe.d_ff, dropout=recipe.dropout,
        embed_init=recipe.embed_init)
    set_seed(recipe.seed)
    if recipe.model == "transformer_book":
        return Transformer(config), config
    model = TorchTransformerBaseline(config)  # its embedding drawn as embed_init says
    return model, config


def for_decoding(model: nn.Module) -> nn.Module:
    """The model that translates: ``nn.Transformer`` keeps no key/value cache, so its weights
    are copied into the book's model, which computes the same function and decodes with one
    (``TorchTransformerBaseline.to_book_model``, tested equal)."""
    return model.to_book_model() if isinstance(model, TorchTransformerBaseline) else model


def val_bleu(model, tokenizer, corpus, beam_size: int = 1) -> float:
    hyps = translate(for_decoding(model), tokenizer, corpus.src, beam_size=beam_size,
                     max_tokens=4096)
    return corpus_bleu(hyps, corpus.tgt)[0].score


def run(recipe: Recipe, args, data: dict, tokenizer) -> dict:
    model, config = build_model(recipe, tokenizer)
    model.to(args.device)
    train = prepare_run_data(data["train"], None, tokenizer=tokenizer,
                             max_tokens=recipe.max_tokens, max_len=config.max_len,
                             seed=recipe.seed).train
    clock = Clock()  # seconds of training steps only: stopped while evaluating
    elapsed = clock.read

    def optimizer_and_schedule():
        if recipe.schedule == "constant":
            optimizer = torch.optim.Adam(model.parameters(), lr=recipe.lr, betas=(0.9, 0.98),
                                         eps=1e-9)
            return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, lambda i: 1.0)
        return make_optimizer(
            model, config.d_model, recipe.warmup_steps, recipe.lr_factor,
            schedule=recipe.schedule,
            progress=lambda steps: min(1.0, elapsed() / recipe.time_budget))

    optimizer, scheduler = optimizer_and_schedule()
    step_fn = TrainStep(model, optimizer, scheduler, label_smoothing=recipe.label_smoothing,
                        pad_id=config.pad_id,
                        amp_dtype=torch.bfloat16 if recipe.bf16 else None,
                        compile=recipe.compile)
    sample = next(iter(train.batches(0))).to(args.device)
    flops_per_token = count_train_flops(model, sample.src, sample.tgt_in, sample.tgt_out,
                                        pad_id=config.pad_id) / sample.num_tgt_tokens
    compile_seconds = 0.0
    if recipe.compile:  # compile for every batch shape of the first epoch, then start again
        start, shapes = time.perf_counter(), set()
        state = {k: v.clone() for k, v in model.state_dict().items()}
        for batch in train.batches(0):
            batch = batch.to(args.device)
            if (batch.src.shape, batch.tgt_in.shape) not in shapes:
                shapes.add((batch.src.shape, batch.tgt_in.shape))
                step_fn(batch)
        model.load_state_dict(state)
        optimizer, scheduler = optimizer_and_schedule()
        step_fn.optimizer, step_fn.scheduler = optimizer, scheduler
        compile_seconds = time.perf_counter() - start
        set_seed(recipe.seed)
    # `position`: batches of `epoch` already trained on; an evaluation pauses the epoch there
    evals, steps, tokens, epoch, position = [], 0, 0, 0, 0
    per_epoch = train.num_batches(0)
    eval_every = args.reference_eval_every if recipe.name in REFERENCES else args.eval_every
    next_eval, reached, losses = eval_every, False, []
    print(f"[{recipe.name}] {sum(p.numel() for p in model.parameters()):,} parameters, "
          f"{len(train):,} training pairs, budget {recipe.time_budget:.0f} s", flush=True)
    while not reached and elapsed() < recipe.time_budget:
        clock.start()
        for batch in train.batches(epoch, start=position):
            losses.append(step_fn(batch.to(args.device)))
            steps, position = steps + 1, position + 1
            tokens += batch.num_tgt_tokens
            if elapsed() >= min(next_eval, recipe.time_budget):
                break
        if position == train.num_batches(epoch):  # the epoch is done: the next one, reshuffled
            epoch, position = epoch + 1, 0
        clock.stop()
        loss = float(torch.stack(losses).mean())
        if not math.isfinite(loss):
            raise FloatingPointError(f"[{recipe.name}] training loss {loss} at step {steps}")
        losses.clear()
        if elapsed() >= min(next_eval, recipe.time_budget):
            bleu = val_bleu(model, tokenizer, data["val"])
            evals.append({"train_seconds": round(elapsed(), 1), "step": steps,
                          "epoch": round(epoch + position / per_epoch, 2),
                          "train_loss": round(loss, 3),
                          "val_bleu_greedy": round(bleu, 2)})
            print(f"[{recipe.name}] {elapsed():6.0f} s  step {steps:5}  train loss {loss:.3f}  "
                  f"val BLEU (greedy) {bleu:5.2f}", flush=True)
            reached = bleu >= args.val_target
            next_eval += eval_every
    test_bleu, signature = None, None
    if not args.no_test:
        hyps = translate(for_decoding(model), tokenizer, data["test"].src, beam_size=4,
                         length_penalty=0.6)
        score, signature = corpus_bleu(hyps, data["test"].tgt)
        test_bleu = round(score.score, 2)
        print(f"[{recipe.name}] test 2016 BLEU {test_bleu:.2f} (beam 4)", flush=True)
    print(f"[{recipe.name}] {elapsed():.0f} s of training, {steps} steps, "
          f"{tokens / elapsed():,.0f} target tokens/s"
          + (f"; compiling took {compile_seconds:.0f} s" if recipe.compile else ""), flush=True)
    return {
        "recipe": dataclasses.asdict(recipe), "parameters": sum(p.numel() for p in model.parameters()),
        "reached_val_target": reached, "test2016_bleu_beam4": test_bleu,
        "reached_target": None if test_bleu is None else test_bleu >= args.target, "train_seconds": round(elapsed(), 1),
        "compile_seconds": round(compile_seconds, 1), "steps": steps,
        "epochs": round(epoch + position / per_epoch, 2), "batches_per_epoch": per_epoch,
        "target_tokens": tokens, "tokens_per_second": round(tokens / elapsed()),
        "flops_per_target_token": flops_per_token, "evaluations": evals,
        "sacrebleu_signature": signature,
    }


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--recipes", nargs="+", default=["fast", *REFERENCES], choices=RECIPES)
    p.add_argument("--set", nargs="*", default=[], metavar="FIELD=VALUE",
                   help="override fields of every recipe run except the references, e.g. "
                   "bf16=1 num_layers=2 time_budget=450 seed=1")
    p.add_argument("--reference-budget", type=float, default=600.0,
                   help="time budget of the nn.Transformer references (seconds)")
    p.add_argument("--target", type=float, default=30.0, help="test 2016 BLEU to reach")
    p.add_argument("--val-target", type=float, default=None,
                   help="validation BLEU (greedy) that stops training (default: --target)")
    p.add_argument("--eval-every", type=float, default=60.0, help="seconds of training")
    p.add_argument("--reference-eval-every", type=float, default=None,
                   help="seconds of training between the references' evaluations (default: "
                   "--eval-every; decoding an untrained model to the length limit is slow)")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--out", default=None, help="write the results here instead of the "
                   "--machine folder's time_to_bleu.json")
    p.add_argument("--note", default="", help="what else ran on the machine, for the record")
    p.add_argument("--no-test", action="store_true",
                   help="do not score test 2016 (screening runs: choices use validation only)")
    # --quick: 400 training pairs, 20 validation and test sentences, 10 s per recipe
    add_flags(p, "threads", "device", "machine", "quick")
    args = p.parse_args(argv)
    set_threads(args)
    args.device = get_device(args.device)
    args.val_target = args.target if args.val_target is None else args.val_target
    if args.reference_eval_every is None:
        args.reference_eval_every = args.eval_every
    data = {split: load_multi30k(name, args.data_dir) for split, name in
            (("train", "train"), ("val", "val"), ("test", "test_2016_flickr"))}
    if args.quick:
        data = {k: dataclasses.replace(v, src=v.src[:n], tgt=v.tgt[:n])
                for (k, v), n in zip(data.items(), (400, 20, 20), strict=True)}
        args.eval_every = args.reference_eval_every = 5.0
    path = (Path(args.out) if args.out else
            results_folder(args.machine) / "time_to_bleu.json" if args.machine else None)
    out = {"date": datetime.date.today().isoformat(), "device": describe_hardware(args.device),
           "cpu": cpu_identity(), "threads": torch.get_num_threads(), "torch": torch.__version__,
           "command": "python " + shlex.join([sys.argv[0], *(argv or sys.argv[1:])]),
           "note": args.note, "target_bleu": args.target, "val_target_bleu": args.val_target,
           "results": []}
    for name in args.recipes:
        recipe = dataclasses.replace(RECIPES[name])
        if name in REFERENCES:
            recipe.time_budget = args.reference_budget
        else:
            for item in args.set:
                field, value = item.split("=", 1)
                kind = type(getattr(recipe, field))
                setattr(recipe, field, bool(int(value)) if kind is bool else kind(value))
        if args.quick:
            recipe.time_budget = 10.0
            recipe.d_model, recipe.d_ff, recipe.num_layers = 64, 128, 1
        tokenizer = load_or_train_tokenizer(data["train"], vocab_size=recipe.vocab_size)
        out["results"].append(run(recipe, args, data, tokenizer))
        if path:  # after each run: a run cut short keeps the ones before it
            with atomic_write(path) as f:
                f.write((json.dumps(out, indent=1) + "\n").encode())
            print(f"wrote {path}", flush=True)
    return out


if __name__ == "__main__":
    main()
