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

Each run is the package's :class:`~transformer_book.train.Trainer`: the recipe's time budget
becomes a number of steps once, when the pace of its steps has settled, and the learning rate is a
function of the step. ``train_seconds`` is the wall time of the training steps alone (data
batching included; evaluation excluded), so it can end a little over or under the budget.
``torch.compile`` is not offered here: ``cpu_ladder.py`` measures it (compile time apart).

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
import shlex
import sys
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
from transformer_book.train import TrainConfig, Trainer
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
    # torch.set_flush_denormal: floats below 2^-126 computed as 0 (x86's FTZ/DAZ), for the run
    flush_denormal: bool = False
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
    # the CPU speed-run recipe (chapter 11): the cpu presets with 2 + 2 layers instead of 3 + 3,
    # in bf16 (the forward pass; on a CPU without bf16 instructions that is slower, not faster),
    # on a budget of 270 s (planned from the pace of the steps; the steps of its runs took
    # 253 to 269 s, within 300)
    "fast": from_presets("fast", num_layers=2, bf16=True, time_budget=270.0),
    # the cpu presets themselves (fp32 where the CPU lacks bf16 instructions), on 600 s
    "cpu": from_presets("cpu", time_budget=600.0),
    # chapter 8's full configuration (a GPU's: d_model 512, 8 heads, 3 + 3 layers, d_ff 2048,
    # P_drop 0.3, Xavier embedding, 4,096-token batches, Eq. (3) with a 1,000-step warm-up at half
    # its rate), on 300 s, bf16 autocast on CUDA; without chapter 8's averaging of the last epochs
    "full": Recipe("full", "transformer_book", d_model=512, num_heads=8, num_layers=3, d_ff=2048,
                   dropout=0.3, embed_init="xavier", max_tokens=4096, warmup_steps=1000,
                   lr_factor=0.5, schedule="noam", time_budget=300.0, bf16=True),
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


def configs(recipe: Recipe, tokenizer, device) -> tuple[TransformerConfig, TrainConfig]:
    """The recipe as the package's two configs: the model's, and a :class:`TrainConfig` whose
    time budget the :class:`Trainer` turns into a number of steps from the pace of the first
    steps (the linear schedule reaches 0 there). ``constant``: Adam at ``lr`` from step 1."""
    model = TransformerConfig(
        src_vocab_size=tokenizer.vocab_size, tgt_vocab_size=tokenizer.vocab_size,
        pad_id=tokenizer.pad_id, d_model=recipe.d_model, num_heads=recipe.num_heads,
        num_layers=recipe.num_layers, d_ff=recipe.d_ff, dropout=recipe.dropout,
        embed_init=recipe.embed_init)
    warmup, factor = recipe.warmup_steps, recipe.lr_factor
    if recipe.schedule == "constant":  # linear_lr's peak, factor * d_model^-0.5, is `lr`
        warmup, factor = 1, recipe.lr * recipe.d_model**0.5
    train = TrainConfig(
        max_tokens=recipe.max_tokens, epochs=10_000, warmup_steps=warmup, lr_factor=factor,
        schedule=recipe.schedule, time_budget=recipe.time_budget,
        label_smoothing=recipe.label_smoothing, seed=recipe.seed, device=str(device),
        amp=recipe.bf16, cpu_amp=recipe.bf16, progress=False)
    return model, train


def for_decoding(model: nn.Module) -> nn.Module:
    """The model that translates: ``nn.Transformer`` keeps no key/value cache, so its weights
    are copied into the book's model, which computes the same function and decodes with one
    (``TorchTransformerBaseline.to_book_model``, tested equal)."""
    return model.to_book_model() if isinstance(model, TorchTransformerBaseline) else model


def val_bleu(model, tokenizer, corpus, beam_size: int = 1) -> float:
    hyps = translate(for_decoding(model), tokenizer, corpus.src, beam_size=beam_size,
                     max_tokens=4096)
    return corpus_bleu(hyps, corpus.tgt)[0].score


class TimedRun(Trainer):
    """The package's :class:`Trainer`, scoring the validation set (greedy BLEU) every ``every``
    seconds of training, its clock stopped meanwhile; a score at or above ``target`` stops it."""

    def __init__(self, *args, score, every: float, target: float, name: str, **kwargs):
        super().__init__(*args, **kwargs)
        self.score, self.every, self.target, self.name = score, every, target, name
        self.next_eval, self.evaluations, self.reached = every, [], False

    def after_step(self) -> None:
        if self.clock.read() >= self.next_eval:
            self.clock.stop()
            self.record()
            self.clock.start()
            self.next_eval += self.every * (1 + int((self.clock.read() - self.next_eval)
                                                    // self.every))

    def record(self) -> None:
        """Score the validation set now (the clock stopped) and note it, with the mean training
        loss of the steps since the last score whose losses the loop has read."""
        since = self.evaluations[-1]["step"] if self.evaluations else 0
        losses = [v for s, v in self.history.train_loss if s > since]
        bleu = self.score(self.model)
        seconds, passes = self.clock.read(), self.epoch + self.batch_in_epoch / max(
            1, self.train_data.num_batches(self.epoch))
        loss = round(sum(losses) / len(losses), 3) if losses else None  # none read yet
        self.evaluations.append({"train_seconds": round(seconds, 1), "step": self.step,
                                 "epoch": round(passes, 2), "train_loss": loss,
                                 "val_bleu_greedy": round(bleu, 2)})
        print(f"[{self.name}] {seconds:6.0f} s  step {self.step:5}  train loss "
              f"{'  -  ' if loss is None else f'{loss:.3f}'}  val BLEU (greedy) {bleu:5.2f}",
              flush=True)
        self.reached = bleu >= self.target
        self.stop_requested = self.stop_requested or self.reached

    def target_tokens(self) -> int:
        """Target tokens of the batches trained on so far."""
        data = self.train_data
        return (sum(sum(data.target_tokens(e)) for e in range(self.epoch))
                + sum(data.target_tokens(self.epoch)[:self.batch_in_epoch]))


def run(recipe: Recipe, args, data: dict, tokenizer) -> dict:
    model_config, train_config = configs(recipe, tokenizer, args.device)
    torch.set_flush_denormal(recipe.flush_denormal)
    set_seed(recipe.seed)
    model = (Transformer(model_config) if recipe.model == "transformer_book"
             else TorchTransformerBaseline(model_config))  # its embedding drawn as embed_init says
    train = prepare_run_data(data["train"], None, tokenizer=tokenizer,
                             max_tokens=recipe.max_tokens, max_len=model_config.max_len,
                             seed=recipe.seed).train
    eval_every = args.reference_eval_every if recipe.name in REFERENCES else args.eval_every
    trainer = TimedRun(model, train, train_config, model_config=model_config,
                       score=lambda m: val_bleu(m, tokenizer, data["val"]), every=eval_every,
                       target=args.val_target, name=recipe.name)
    sample = next(iter(train.batches(0))).to(trainer.device)
    flops_per_token = count_train_flops(trainer.model, sample.src, sample.tgt_in, sample.tgt_out,
                                        pad_id=model_config.pad_id) / sample.num_tgt_tokens
    parameters = sum(p.numel() for p in model.parameters())
    print(f"[{recipe.name}] {parameters:,} parameters, {len(train):,} training pairs, "
          f"budget {recipe.time_budget:.0f} s", flush=True)
    trainer.fit()
    if not trainer.evaluations or trainer.evaluations[-1]["step"] != trainer.step:
        trainer.record()  # the end of the budget
    seconds, tokens = trainer.clock.read(), trainer.target_tokens()
    test_bleu, signature = None, None
    if not args.no_test:
        hyps = translate(for_decoding(trainer.model), tokenizer, data["test"].src, beam_size=4,
                         length_penalty=0.6)
        score, signature = corpus_bleu(hyps, data["test"].tgt)
        test_bleu = round(score.score, 2)
        print(f"[{recipe.name}] test 2016 BLEU {test_bleu:.2f} (beam 4)", flush=True)
    print(f"[{recipe.name}] {seconds:.0f} s of training, {trainer.step} steps (planned "
          f"{trainer.plan.steps} at {trainer.plan.pace or 0:.3f} s a step), "
          f"{tokens / seconds:,.0f} target tokens/s", flush=True)
    return {
        "recipe": dataclasses.asdict(recipe), "parameters": parameters,
        "reached_val_target": trainer.reached, "test2016_bleu_beam4": test_bleu,
        "reached_target": None if test_bleu is None else test_bleu >= args.target,
        "train_seconds": round(seconds, 1), "steps": trainer.step,
        "time_plan": trainer.plan.state(),
        "epochs": trainer.evaluations[-1]["epoch"],
        "batches_per_epoch": train.num_batches(0), "target_tokens": tokens,
        "tokens_per_second": round(tokens / seconds),
        "flops_per_target_token": flops_per_token, "evaluations": trainer.evaluations,
        "sacrebleu_signature": signature,
    }


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--recipes", nargs="+", default=["fast", *REFERENCES], choices=RECIPES)
    p.add_argument("--set", nargs="*", default=[], metavar="FIELD=VALUE",
                   help="override fields of every recipe run except the references, e.g. "
                   "bf16=1 num_layers=2 time_budget=450 seed=1")
    p.add_argument("--reference-budget", type=float, default=270.0,
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
