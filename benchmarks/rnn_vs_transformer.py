"""Attention against recurrence on Multi30k: the book's Transformer and its recurrent translator
(bidirectional LSTM encoder, LSTM decoder with attention), trained on equal terms.

Both models go through the same code: the package's training loop (``Trainer``, the cpu recipe
``TrainConfig.cpu()``: linear schedule to zero when the time budget runs out, label smoothing
0.1, bf16 where the CPU has bf16 instructions), the same tokenizer (8,000 joint BPE pieces
learned on the whole training split), the same token-budget batches, greedy decoding on the
validation set, beam search (beam 4, length penalty 0.6) on test 2016 and cased sacreBLEU. Every
choice is made on the validation set; test 2016 is scored only in ``final`` and ``datasize``.

Parts (durations on 2 cores of an AMD EPYC; a slower CPU takes longer in the decoding only,
since training runs for its budget of seconds; but a faster or slower CPU trains more or fewer
steps in that budget, and so changes the results: compare runs made on one machine):

  screen      each model x learning rate (lr factor 0.225, 0.45, 0.9 of Eq. (3): peaks 1e-3,
              2e-3, 4e-3) x batch size (1,500 or 3,000 padded tokens), 300 s each, then
              greedy validation BLEU: 12 runs, about 70 minutes; where a model's best rate
              is the grid's highest (lowest), the rate doubled (halved) at the best run's
              batch size, up to twice: 6 minutes a run
  dropout     each model's best screening setting again with the other dropout of {0, 0.2}
              (the Transformer's preset has 0, the recurrent model's 0.2): 2 runs, ~12 minutes
  final       each model's chosen recipe for 1,150 s (the cpu budget) per seed, validation BLEU
              every 115 s of training (weights kept in memory, decoded after the run), test
              2016 with beam 4 at the end, 8 validation sentences' translations and attention
              weights: about 24 minutes per run (2 seeds: ~1.6 hours)
  longer      the alternatives that 300-s screening runs may have judged wrongly, for the full
              1,150 s, validation only (curve as in final), per seed: the Transformer's chosen
              setting with the paper's P_drop 0.1 (no dropout learns fastest, but may overfit
              in a longer run), then the recurrent model's at half its learning rate (the same
              factor reaches a higher rate in a longer run): about 22 minutes a run
  datasize    both chosen recipes on the first 1k, 3k and 10k training pairs (nested; the
              tokenizer stays the one learned on all 29k) with budgets of 600, 600 and 900 s,
              per seed (the 29k point is ``final``); validation BLEU after every fifth of the
              budget, and test 2016 scored once, with the weights whose validation BLEU was
              highest (early stopping): about 75 minutes per seed
  datasize_dropout  each chosen recipe with the other dropout of {0, 0.2} on the 1k and 3k
              subsets, as in datasize but validation only (does the dropout chosen on 29k
              pairs hold back either model on less?): about 42 minutes per seed
  throughput  target tokens/s of both models' training steps at 1 and 2 threads (and of the
              recurrent model without input feeding), 60 s each, two rounds: about 13 minutes
  precision   target tokens/s of both models' training steps (untrained, their chosen rates) on
              the first 9 batches, bf16 and float32, 2 and 1 threads, fastest of 3 rounds
              (transformer_lab.compare_train_rates, as chapter 9's live cell):
              about 3 minutes
  collect     merge every run file into rnn_vs_transformer.json (seconds)

Each run writes ``<results>/rnn_vs_transformer/<part>/<run>.json`` and ``<run>.log`` when it
ends; a run whose file exists is skipped, so an interrupted part resumes with the same command
(the run that was cut short starts again). ``collect`` then writes
``<results>/rnn_vs_transformer.json``: every run, each model's chosen recipe, and the summaries
the chapter reads.

    .venv/bin/python benchmarks/rnn_vs_transformer.py screen --machine cpu-2026-11-24
    .venv/bin/python benchmarks/rnn_vs_transformer.py final --machine cpu-2026-11-24 --seeds 0 1
    .venv/bin/python benchmarks/rnn_vs_transformer.py collect --machine cpu-2026-11-24
    .venv/bin/python benchmarks/rnn_vs_transformer.py screen --quick --machine /tmp/smoke
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import io
import json
import math
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
from flags import add_flags, results_folder, set_threads
from transformer_book import describe_hardware
from transformer_book.batching import collate
from transformer_book.config import (
    RecurrentConfig,
    TrainConfig,
    TransformerConfig,
    model_config_for,
)
from transformer_book.corpus import prepare_run_data
from transformer_book.data import load_multi30k
from transformer_book.decode import greedy_decode
from transformer_book.evaluation import corpus_bleu, translate
from transformer_book.files import atomic_write
from transformer_book.model import build_model
from transformer_book.tokenizer import load_or_train_tokenizer
from transformer_book.train import Trainer
from transformer_book.utils import cpu_identity

MODELS = ("transformer", "rnn")
LR_FACTORS = (0.225, 0.45, 0.9)  # x Eq. (3) at the end of a 200-step warm-up: 1e-3, 2e-3, 4e-3
BATCH_TOKENS = (1500, 3000)
DROPOUTS = (0.0, 0.2)
SCREEN_BUDGET = 300.0
FINAL_BUDGET = 1150.0  # TrainConfig.cpu()'s
LONGER_DROPOUT = 0.1  # the paper's P_drop (Sec. 5.4)
DATASIZE = ((1000, 600.0), (3000, 600.0), (10000, 900.0))  # (training pairs, budget in s)
SMALL = (1000, 3000)  # datasize_dropout: the subsets where over-fitting weighs most
THROUGHPUT_SECONDS = 60.0


@dataclasses.dataclass(frozen=True)
class Setting:
    """One training run: the model, its recipe's free choices, the data and the budget."""

    model: str  # "transformer" (TransformerConfig.cpu()) or "rnn" (RecurrentConfig.cpu())
    lr_factor: float = 0.45
    max_tokens: int = 1500
    dropout: float | None = None  # None: the preset's (Transformer 0, recurrent 0.2)
    seed: int = 0
    train_limit: int | None = None  # the first N training pairs; None: all
    budget: float = SCREEN_BUDGET
    input_feeding: bool = True  # the recurrent model's (Luong et al. Sec. 3.3)

    @property
    def name(self) -> str:
        drop = "preset" if self.dropout is None else f"{self.dropout:g}"
        pairs = "all" if self.train_limit is None else str(self.train_limit)
        return (f"{self.model}_lr{self.lr_factor:g}_tok{self.max_tokens}_drop{drop}"
                f"_pairs{pairs}_{self.budget:g}s_seed{self.seed}"
                + ("" if self.input_feeding else "_nofeed"))

    @property
    def epochs(self) -> int:
        """An upper bound the time budget always reaches first: TrainConfig.cpu()'s 30 passes
        over all 29k pairs, more on a subset (the linear schedule's step count is computed over
        them once, inside the budget: not a large number)."""
        return 30 if self.train_limit is None else -(-30 * 29_000 // self.train_limit)

    def model_config(self, tokenizer):
        changes = {} if self.dropout is None else {"dropout": self.dropout}
        if not self.input_feeding:
            changes["input_feeding"] = False
        return model_config_for(tokenizer, "cpu", self.model, **changes)

    def train_config(self, **changes) -> TrainConfig:
        return TrainConfig.cpu(lr_factor=self.lr_factor, max_tokens=self.max_tokens,
                               seed=self.seed, time_budget=self.budget, epochs=self.epochs,
                               checkpoint_dir=None, progress=False, log_epochs=True, **changes)


class CurveTrainer(Trainer):
    """The package's training loop, keeping a copy of the weights (in memory, outside the clock's
    concern: a copy takes milliseconds) each time training crosses ``every`` seconds, so the
    validation BLEU along the run can be measured after it without pausing it."""

    def __init__(self, *args, every: float | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.every, self.kept = every, []

    def after_step(self) -> None:
        mark = (len(self.kept) + 1) * (self.every or 0)
        if self.every and mark < self.config.time_budget and self.clock.read() >= mark:
            weights = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
            self.kept.append({"train_seconds": round(self.clock.read(), 1), "step": self.step,
                              "passes": round(self.passes(), 3), "weights": weights})

    def passes(self) -> float:
        """Passes over the training data so far."""
        return self.epoch + self.batch_in_epoch / self.train_data.num_batches(self.epoch)

    def target_tokens_seen(self) -> int:
        done = sum(sum(self.train_data.target_tokens(e)) for e in range(self.epoch))
        return done + sum(self.train_data.target_tokens(self.epoch)[: self.batch_in_epoch])


def bleu(model, tokenizer, corpus, beam_size: int = 1) -> tuple[float, str]:
    """Cased sacreBLEU of the model's translations (greedy, or beam search with Sec. 6.1's
    length penalty 0.6), and its signature."""
    model.eval()
    hyps = translate(model, tokenizer, corpus.src, beam_size=beam_size, length_penalty=0.6,
                     max_tokens=4096)
    score, signature = corpus_bleu(hyps, corpus.tgt)
    return round(score.score, 2), str(signature)


def examples(model, tokenizer, corpus, count: int) -> list[dict]:
    """The first ``count`` sentences of ``corpus`` (validation): source and output subwords, the
    greedy translation, the reference, and the cross-attention weights of every output position
    (the decoder re-run on its own output): per decoder layer and head for the Transformer,
    one alignment for the recurrent model; rounded to 3 decimals."""
    model.eval()
    device = next(model.parameters()).device  # the source goes where the model is (a GPU too)
    out = []
    with torch.no_grad():
        for text, ref in zip(corpus.src[:count], corpus.tgt[:count], strict=True):
            ids = tokenizer.encode(text)
            src = collate([ids], [[]], pad_id=tokenizer.pad_id, bos_id=tokenizer.bos_id,
                          eos_id=tokenizer.eos_id).src.to(device)
            hyp = greedy_decode(model, src, tokenizer.bos_id, tokenizer.eos_id)  # (1, 1 + T)
            _, weights = model(src, hyp[:, :-1], need_weights=True)
            cross = torch.stack([w[0] for w in weights["decoder_cross"]])  # (L, heads, T, S)
            out.append({
                "source": text, "reference": ref,
                "translation": tokenizer.decode(hyp[0].tolist()),
                "source_pieces": [tokenizer.backend.id_to_token(i) for i in src[0].tolist()],
                "output_pieces": [tokenizer.backend.id_to_token(i) for i in hyp[0, 1:].tolist()],
                "cross_attention": cross.float().round(decimals=3).tolist(),
            })
    return out


def train_one(setting: Setting, data: dict, tokenizer, *, curve_points: int = 0,
              test: bool = False, eval_every: int | None = None, validate: bool = True,
              keep: int = 0, weights_dir: Path | None = None, select_best: bool = False
              ) -> dict:
    """Train one setting with the package's loop; measure what the record holds. ``keep``:
    ``curve_points``: measure the validation BLEU
    after every 1/``curve_points`` of the budget (weights kept during the run, decoded after it);
    ``keep``: store that many validation examples (:func:`examples`); ``weights_dir``: save the final
    weights there (``<run name>.pt``, not part of the record); ``select_best``: test the weights
    (of the curve's points and the final ones) with the best validation BLEU."""
    config = setting.train_config(eval_every=eval_every)
    model_config = setting.model_config(tokenizer)
    _, train, val = prepare_run_data(data["train"], data["val"], tokenizer=tokenizer,
                                     max_tokens=config.max_tokens, max_len=model_config.max_len,
                                     seed=config.seed, limit=setting.train_limit)
    torch.manual_seed(config.seed)
    model = build_model(model_config)
    trainer = CurveTrainer(model, train, config, model_config=model_config,
                           val_data=val if validate else None,
                           every=setting.budget / curve_points if curve_points else None)
    start = time.perf_counter()
    history = trainer.fit()
    wall = time.perf_counter() - start
    loss = [v for _, v in history.train_loss]
    if not loss or not all(map(math.isfinite, loss)):
        raise FloatingPointError(f"{setting.name}: training loss not finite")
    record = {
        "setting": dataclasses.asdict(setting), "name": setting.name,
        "model_config": model_config.to_dict(), "parameters": model.num_parameters(),
        "training_pairs": len(train), "train_seconds": round(trainer.clock.read(), 1),
        "wall_seconds": round(wall, 1), "steps": trainer.step,
        "passes": round(trainer.passes(), 3), "target_tokens": trainer.target_tokens_seen(),
        "tokens_per_second": round(trainer.target_tokens_seen() / trainer.clock.read()),
        "tokens_per_second_epochs": [[s, round(v)] for s, v in history.tokens_per_second],
        "val_loss": [[s, round(v, 4)] for s, v in history.val_loss],
        "train_loss_last": round(loss[-1], 4), "peak_lr": max(v for _, v in history.lr),
        "bf16": trainer.amp_dtype == torch.bfloat16, "threads": torch.get_num_threads(),
    }
    final = {k: v.detach().clone() for k, v in model.state_dict().items()}
    if trainer.kept:
        curve = []
        trainer_weights = []
        for point in trainer.kept:
            trainer_weights.append(point.pop("weights"))
            model.load_state_dict(trainer_weights[-1])
            t0 = time.perf_counter()
            point["val_bleu_greedy"] = bleu(model, tokenizer, data["val"])[0]
            point["decode_seconds"] = round(time.perf_counter() - t0, 1)
            curve.append(point)
            print(f"  {point['train_seconds']:6.0f} s  step {point['step']:5}  "
                  f"val BLEU {point['val_bleu_greedy']:5.2f}", flush=True)
        record["val_curve"] = curve
        model.load_state_dict(final)
    if validate:
        t0 = time.perf_counter()
        record["val_bleu_greedy"], _ = bleu(model, tokenizer, data["val"])
        record["val_decode_seconds"] = round(time.perf_counter() - t0, 1)
    if select_best and trainer.kept:  # early stopping on validation BLEU (the final weights too)
        points = [*record["val_curve"], {"train_seconds": record["train_seconds"], "step": trainer.step,
                           "val_bleu_greedy": record["val_bleu_greedy"], "final": True}]
        pick = max(range(len(points)), key=lambda i: points[i]["val_bleu_greedy"])
        record["selected"] = {k: points[pick][k] for k in ("train_seconds", "step",
                                                           "val_bleu_greedy")}
        if pick < len(trainer_weights):
            model.load_state_dict(trainer_weights[pick])
    if keep:
        record["examples"] = examples(model, tokenizer, data["val"], keep)
    if weights_dir is not None:
        weights_dir.mkdir(parents=True, exist_ok=True)
        torch.save({"model_config": model_config.to_dict(), "model": final,
                    "tokenizer": tokenizer.to_str()}, weights_dir / f"{setting.name}.pt")
    if test:
        t0 = time.perf_counter()
        record["test2016_bleu_beam4"], record["sacrebleu_signature"] = bleu(
            model, tokenizer, data["test"], beam_size=4)
        record["test_decode_seconds"] = round(time.perf_counter() - t0, 1)
    return record


# --------------------------------------------------------------------------- the parts


def screen_settings(args) -> list[Setting]:
    return [Setting(m, lr, tok, budget=args.budget or SCREEN_BUDGET, seed=0)
            for m in MODELS for lr in LR_FACTORS for tok in BATCH_TOKENS]


def extensions(folder: Path, args) -> list[Setting]:
    """Where a model's best screening run has the grid's highest (or lowest) learning rate, the
    optimum may lie beyond it: the next doubling (or halving), at that run's batch size, for
    that model. Empty when every model's best rate is inside its grid."""
    out = []
    for m in MODELS:
        records = [r for r in read_part(folder, "screen") if r["setting"]["model"] == m]
        rates = sorted({r["setting"]["lr_factor"] for r in records})
        winner = best(records, m)["setting"]
        top = winner["lr_factor"]
        if top not in (rates[0], rates[-1]):
            continue
        lr = top * 2 if top == rates[-1] else top / 2
        out.append(Setting(m, lr, winner["max_tokens"], budget=args.budget or SCREEN_BUDGET,
                           seed=0))
    return out


def best(records: list[dict], model: str) -> dict:
    """The model's record with the highest validation BLEU (ties: the first)."""
    mine = [r for r in records if r["setting"]["model"] == model]
    if not mine:
        raise SystemExit(f"no screening run of {model} yet: run the screen part first")
    return max(mine, key=lambda r: r["val_bleu_greedy"])


def read_part(folder: Path, part: str) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((folder / part).glob("*.json"))]


def preset_dropout(model: str) -> float:
    return (TransformerConfig.cpu() if model == "transformer" else RecurrentConfig.cpu()).dropout


def other_dropout(s: Setting) -> float:
    """The dropout of {0, 0.2} that the setting does not use (None: its preset's)."""
    mine = preset_dropout(s.model) if s.dropout is None else s.dropout
    return next(d for d in DROPOUTS if d != mine)


def dropout_settings(args, folder: Path) -> list[Setting]:
    out = []
    for m in MODELS:
        s = Setting(**best(read_part(folder, "screen"), m)["setting"])
        out.append(dataclasses.replace(s, dropout=other_dropout(s)))
    return out


def chosen(folder: Path, model: str) -> Setting:
    """The model's recipe chosen on validation BLEU: the best screening run, with the dropout
    of the dropout part where that scored higher; seed and budget reset."""
    screened = best(read_part(folder, "screen"), model)
    candidates = [screened] + [r for r in read_part(folder, "dropout")
                               if r["setting"]["model"] == model]
    winner = max(candidates, key=lambda r: r["val_bleu_greedy"])
    return Setting(**{**winner["setting"], "seed": 0, "budget": FINAL_BUDGET})


def final_settings(args, folder: Path) -> list[Setting]:
    return [dataclasses.replace(chosen(folder, m), seed=s, budget=args.budget or FINAL_BUDGET)
            for s in args.seeds for m in MODELS]


def longer_settings(args, folder: Path) -> list[Setting]:
    budget = args.budget or FINAL_BUDGET
    tf, rnn = chosen(folder, "transformer"), chosen(folder, "rnn")
    return [setting for s in args.seeds for setting in (
        dataclasses.replace(tf, dropout=LONGER_DROPOUT, seed=s, budget=budget),
        dataclasses.replace(rnn, lr_factor=rnn.lr_factor / 2, seed=s, budget=budget))]


def datasize_settings(args, folder: Path) -> list[Setting]:
    sizes = DATASIZE if not args.sizes else [(n, b) for n, b in DATASIZE if n in args.sizes]
    return [dataclasses.replace(chosen(folder, m), seed=s, train_limit=n,
                                budget=args.budget or b)
            for s in args.seeds for n, b in sizes for m in MODELS]


def datasize_dropout_settings(args, folder: Path) -> list[Setting]:
    """Each model's recipe with the other dropout of {0, 0.2} on the small subsets: the recipes
    were chosen on all 29k pairs, and the dropout that suits them may differ with less data."""
    budgets = dict(DATASIZE)
    sizes = [n for n in SMALL if not args.sizes or n in args.sizes]
    out = []
    for s in args.seeds:
        for n in sizes:
            for m in MODELS:
                c = chosen(folder, m)
                out.append(dataclasses.replace(c, dropout=other_dropout(c), seed=s, train_limit=n,
                                               budget=args.budget or budgets[n]))
    return out


def run_part(args, part: str, settings: list[Setting], data, tokenizer, folder: Path,
             **train_kwargs) -> None:
    out = folder / part
    out.mkdir(parents=True, exist_ok=True)
    for i, s in enumerate(settings, 1):
        path = out / f"{s.name}.json"
        if path.exists():
            print(f"[{part} {i}/{len(settings)}] {s.name}: done before, skipped", flush=True)
            continue
        print(f"[{part} {i}/{len(settings)}] {s.name}", flush=True)
        log = io.StringIO()
        with contextlib.redirect_stdout(Tee(log, sys.stdout)):
            record = train_one(s, data, tokenizer, **train_kwargs)
        record.update(part=part, **provenance(args))
        with atomic_write(out / f"{s.name}.log") as f:
            f.write(log.getvalue().encode())
        with atomic_write(path) as f:
            f.write((json.dumps(record, indent=1) + "\n").encode())
        test = (f", test {record['test2016_bleu_beam4']:.2f}" if "test2016_bleu_beam4" in record
                else "")
        print(f"  -> val BLEU {record.get('val_bleu_greedy', float('nan')):.2f}{test}, "
              f"{record['steps']} steps, {record['passes']:.2f} passes, "
              f"{record['tokens_per_second']:,} tok/s", flush=True)


def pending(folder: Path, name: str) -> Path | None:
    """``folder/throughput/name``, to be written; None (and a message) when it exists."""
    path = folder / "throughput" / name
    if path.exists():
        print(f"{path}: done before, skipped")
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def throughput(args, data, tokenizer, folder: Path) -> None:
    """Target tokens/s of the training steps (no validation), both models at their chosen
    recipes (and the recurrent one without input feeding), 1 and 2 threads, two rounds
    interleaved so that drift on the machine hits every model alike."""
    path = pending(folder, "throughput.json")
    if path is None:
        return
    seconds = args.budget or THROUGHPUT_SECONDS
    rows, log = [], io.StringIO()
    with contextlib.redirect_stdout(Tee(log, sys.stdout)):
        for round_ in range(2):
            for threads in (2, 1):
                torch.set_num_threads(threads)
                for m, feeding in (("transformer", True), ("rnn", True), ("rnn", False)):
                    s = dataclasses.replace(chosen(folder, m), budget=seconds,
                                            input_feeding=feeding)
                    r = train_one(s, data, tokenizer, validate=False)
                    m = m if feeding else "rnn_no_input_feeding"
                    rows.append({"model": m, "threads": threads, "round": round_,
                                 "setting": r["setting"], "steps": r["steps"],
                                 "train_seconds": r["train_seconds"],
                                 "tokens_per_second": r["tokens_per_second"],
                                 "bf16": r["bf16"]})
                    print(f"round {round_} {threads} thread(s) {m}: "
                          f"{r['tokens_per_second']:,} tok/s", flush=True)
    torch.set_num_threads(args.threads)
    record = {"part": "throughput", "seconds_each": seconds, "rows": rows, **provenance(args)}
    with atomic_write(path.with_suffix(".log")) as f:
        f.write(log.getvalue().encode())
    with atomic_write(path) as f:
        f.write((json.dumps(record, indent=1) + "\n").encode())


def precision(args, data, tokenizer, folder: Path) -> None:
    """Training-step throughput of both models in bf16 and float32, at 2 and 1 threads, the
    measurement chapter 9 repeats live on the reader's machine."""
    import itertools

    from transformer_lab import compare_train_rates

    path = pending(folder, "precision.json")
    if path is None:
        return
    settings = {m: chosen(folder, m) for m in MODELS}
    train = prepare_run_data(data["train"], None, tokenizer=tokenizer,
                             max_tokens=settings["transformer"].max_tokens,
                             max_len=settings["transformer"].model_config(tokenizer).max_len).train
    # --quick (the tests): 1 untimed and 2 timed batches, one round
    batches = list(itertools.islice(train.batches(epoch=0), 3 if args.quick else 9))
    rows = []
    for threads in (2, 1):
        torch.set_num_threads(threads)
        for amp in (torch.bfloat16, None):
            models = {}
            for m, s in settings.items():
                torch.manual_seed(0)
                models[m] = (build_model(s.model_config(tokenizer)), s.lr_factor)
            rates = compare_train_rates(models, batches, amp_dtype=amp,
                                        rounds=1 if args.quick else 3)
            rows.append({"threads": threads, "precision": "bf16" if amp else "float32",
                         **{m: round(v) for m, v in rates.items()},
                         "ratio": round(rates["rnn"] / rates["transformer"], 3)})
            print(rows[-1], flush=True)
    torch.set_num_threads(args.threads)
    record = {"part": "precision", "batches": len(batches), "rows": rows,
              "cpu_capability": torch.backends.cpu.get_cpu_capability(), **provenance(args)}
    with atomic_write(path) as f:
        f.write((json.dumps(record, indent=1) + "\n").encode())


def spread(values: list[float]) -> dict:
    return {"mean": round(statistics.fmean(values), 2), "min": min(values), "max": max(values),
            "n": len(values)}


def collect(args, folder: Path) -> dict:
    """Every run, each model's chosen recipe, and the summaries the chapter reads."""
    parts = {p: read_part(folder, p) for p in ("screen", "dropout", "final", "longer", "datasize",
                                               "datasize_dropout")}
    out = {"description": __doc__.split("\n\n")[0], "machine": folder.name, "runs": parts}
    tp = folder / "throughput" / "throughput.json"
    if tp.exists():
        out["throughput"] = json.loads(tp.read_text())
    pr = folder / "throughput" / "precision.json"
    if pr.exists():
        out["precision"] = json.loads(pr.read_text())
    if parts["screen"]:
        out["chosen"] = {m: dataclasses.asdict(chosen(folder, m)) for m in MODELS
                         if any(r["setting"]["model"] == m for r in parts["screen"])}
    summary = {}
    for m in MODELS:
        finals = [r for r in parts["final"] if r["setting"]["model"] == m]
        if finals:
            summary[m] = {k: spread([r[k] for r in finals]) for k in
                          ("test2016_bleu_beam4", "val_bleu_greedy", "tokens_per_second",
                           "steps", "passes")}
            summary[m]["parameters"] = finals[0]["parameters"]
    out["final_summary"] = summary
    sizes = {}
    for r in parts["datasize"] + parts["final"]:
        key = f"{r['setting']['model']}/{r['training_pairs']}"
        sizes.setdefault(key, []).append(r["test2016_bleu_beam4"])
    out["datasize_summary"] = {k: spread(v) for k, v in sorted(sizes.items())}
    path = folder.parent / "rnn_vs_transformer.json"
    with atomic_write(path) as f:
        f.write((json.dumps(out, indent=1) + "\n").encode())
    print(f"wrote {path}")
    return out


# --------------------------------------------------------------------------- plumbing


class Tee(io.TextIOBase):
    def __init__(self, *streams):
        self.streams = streams

    def write(self, text: str) -> int:
        for s in self.streams:
            s.write(text)
        return len(text)

    def flush(self) -> None:
        for s in self.streams:
            s.flush()


def provenance(args) -> dict:
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, cwd=Path(__file__).parent, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = None
    return {"date": datetime.date.today().isoformat(), "device": describe_hardware("cpu"),
            "cpu": cpu_identity(), "torch": torch.__version__, "commit": commit, "note": args.note,
            "command": "python " + shlex.join([sys.argv[0], *args.argv])}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("part", choices=("screen", "dropout", "final", "longer", "datasize",
                                    "datasize_dropout",
                                    "throughput", "precision", "collect"))
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    p.add_argument("--sizes", type=int, nargs="+", default=None,
                   help="datasize: only these subset sizes (of 1000 3000 10000)")
    p.add_argument("--budget", type=float, default=None,
                   help="seconds per run instead of the part's own (for trying the script)")
    p.add_argument("--weights-dir", type=Path, default=None,
                   help="final: also save each run's final weights here (not in the results)")
    p.add_argument("--data-dir", default=None, help="Multi30k files (default: $MULTI30K_DIR)")
    p.add_argument("--note", default="", help="what else ran on the machine, for the record")
    # --quick: 400 training pairs, 8 validation and test sentences, 10 s per run
    add_flags(p, "threads", "machine", "quick", threads=2)
    args = p.parse_args(argv)
    if args.machine is None:
        p.error("--machine is required: the results folder of the parts' runs")
    args.argv = list(sys.argv[1:] if argv is None else argv)
    set_threads(args)
    folder = results_folder(args.machine) / "rnn_vs_transformer"
    if args.part == "collect":
        collect(args, folder)
        return
    data = {split: load_multi30k(name, args.data_dir) for split, name in
            (("train", "train"), ("val", "val"), ("test", "test_2016_flickr"))}
    tokenizer = load_or_train_tokenizer(data["train"], vocab_size=8000)  # on all 29k pairs
    if args.quick:
        data = {k: dataclasses.replace(v, src=v.src[:n], tgt=v.tgt[:n])
                for (k, v), n in zip(data.items(), (400, 8, 8), strict=True)}
        args.budget = args.budget or 10.0
    if args.part == "screen":
        run_part(args, "screen", screen_settings(args), data, tokenizer, folder)
        for _ in range(2):  # at most two steps beyond the grid
            more = extensions(folder, args)
            if not more:
                break
            run_part(args, "screen", more, data, tokenizer, folder)
    elif args.part == "dropout":
        run_part(args, "dropout", dropout_settings(args, folder), data, tokenizer, folder)
    elif args.part == "final":
        run_part(args, "final", final_settings(args, folder), data, tokenizer, folder,
                 curve_points=10, test=True, keep=8,
                 weights_dir=args.weights_dir)
    elif args.part == "longer":
        run_part(args, "longer", longer_settings(args, folder), data, tokenizer, folder,
                 curve_points=10)
    elif args.part == "datasize":
        run_part(args, "datasize", datasize_settings(args, folder), data, tokenizer, folder,
                 test=True, eval_every=50, curve_points=5, select_best=True)
    elif args.part == "datasize_dropout":  # validation only: a check of the recipes' dropout
        run_part(args, "datasize_dropout", datasize_dropout_settings(args, folder), data,
                 tokenizer, folder, eval_every=50, curve_points=5, select_best=True)
    elif args.part == "precision":
        precision(args, data, tokenizer, folder)
    else:
        throughput(args, data, tokenizer, folder)


if __name__ == "__main__":
    main()
