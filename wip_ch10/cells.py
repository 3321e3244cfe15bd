# ruff: noqa
md(r'''
# Making training fast

How long does it take to train a translator that is good enough? The paper puts training cost
beside quality: its Table 2 gives the FLOPs each model cost to train next to its BLEU, and Sec.
5.2 reports about 0.4 seconds per step for the base model on eight P100 GPUs
{cite:p}`vaswani2017attention`. What a reader can measure on the machine in front of them is the
end-to-end figure: the seconds of training until the translations reach a given BLEU. Steps per
second, FLOPs and kernel times only matter through it. This chapter measures it on the machine
most readers have, a CPU, with a goal: **test 2016 BLEU of at least 30 after at most 600 seconds
of training on 2 CPU cores**, the model of chapter 8 trained from scratch.

The chapter first profiles chapter 8's training step on a CPU to find where its time goes, then
climbs a ladder of changes, each timed against the one before on the same batches over repeated
rounds, and then compares the resulting recipe with `torch.nn.Transformer` on the clock: validation
BLEU against seconds of training. A last section says what a GPU changes, from stored GPU runs
only.

```{note}
The cells run on the machine running this notebook (a short version, seconds per measurement:
CI runs it). The stored figures come from two machines, and each cell that reads one names it:

- `benchmarks/results/cpu-2026-11-24/`, 2 cores of an AMD EPYC (Zen 4, AVX-512 with
  AVX512_BF16), torch 2.13.0+cpu, on 2026-11-24: the speed run `time_to_bleu.json` and its log
  (`benchmarks/time_to_bleu.py`), the screening runs and probes that
  chose its recipe (`speedrun/`, with a README), the ladder `cpu_ladder.json` and the profile
  `cpu_profile.json` (`benchmarks/cpu_ladder.py`), and chapter 8's 20-minute cpu run
  (`chapter8_cpu_run.json`);
- `benchmarks/results/h100-2026-11-22/`, one NVIDIA H100 80GB HBM3, torch 2.11.0+cu130, on
  2026-11-22: chapter 8's full configuration run in the chapter (`chapter8_full_run.json`) and
  the time and profile of a training step (`train_throughput_profile.txt`, `train_throughput.txt`).
```
''')

code(r'''
import json
import re
import statistics
from pathlib import Path

import matplotlib.pyplot as plt
import torch
import transformer_book
from torch.profiler import profile
from transformer_book import benchmark
from transformer_book.benchmark import cpu_ladder
from transformer_book.benchmark.cpu_ladder import CPU_LADDER, CpuRung
from transformer_book.batching import Batch
from transformer_book.benchmark.timing import format_table
from transformer_book.config import TransformerConfig
from transformer_book.corpus import prepare_corpus
from transformer_book.data import load_multi30k
from transformer_book.model import Transformer
from transformer_book.step import native_cpu_bf16
from transformer_book.train import TrainConfig, Trainer, TrainStep

transformer_book.set_seed(0)
device = transformer_book.get_device()
on_gpu = device.type == "cuda"
native_bf16 = native_cpu_bf16()  # AVX512_BF16 or AMX: bf16 matrix products in hardware
RESULTS = Path("../benchmarks/results")  # stored runs (absent in a copy without the repository)
CPU_RUN, H100_RUN = RESULTS / "cpu-2026-11-24", RESULTS / "h100-2026-11-22"
STORED = CPU_RUN.exists() and H100_RUN.exists()
NOT_STORED = "(the stored runs live in the book's repository, under benchmarks/results/)"


def stored_json(path: Path) -> dict:
    return json.loads(path.read_text())
''')

code(r'''
# NBVAL_IGNORE_OUTPUT
# The machine this notebook runs on; every live timing below was measured here.
print(transformer_book.describe_hardware(torch.device("cpu")))
print(f"bf16 instructions (AVX512_BF16 or AMX): {native_bf16}")
''')

code(r'''
# The stored speed run: benchmarks/time_to_bleu.py on the 2-core AMD EPYC. Did the recipe
# ("fast") reach the goal?
GOAL_BLEU, GOAL_SECONDS = 30.0, 600.0
if STORED:
    speed_run = stored_json(CPU_RUN / "time_to_bleu.json")
    runs = {r["recipe"]["name"]: r for r in speed_run["results"]}
    fast = runs["fast"]
    # the budget ends at the first step after 600 s: allow that step
    met = fast["test2016_bleu_beam4"] >= GOAL_BLEU and fast["train_seconds"] <= GOAL_SECONDS + 1
    print(f"{speed_run['device']}, {speed_run['date']}")
    print(f"recipe 'fast': test 2016 BLEU {fast['test2016_bleu_beam4']:.2f} (beam 4) after "
          f"{fast['train_seconds']:.0f} s of training: goal {'met' if met else 'NOT met'}")
    assert speed_run["threads"] == 2 and fast["recipe"]["time_budget"] == GOAL_SECONDS
    assert met and (fast["test2016_bleu_beam4"], fast["steps"], fast["train_seconds"]) == (
        30.50, 1442, 600.3)
    assert fast["evaluations"][-1]["val_bleu_greedy"] == 27.51 and not fast["reached_val_target"]
else:
    print(NOT_STORED)
''')

md(r'''
The stored run met the goal, by half a BLEU point: 30.50 on test 2016 after 600 seconds of
training (1,442 steps; the clock is read after each step, hence 600.3 s). Its validation BLEU
ended at 27.51, under the threshold of 30 that would have stopped it early, so it used the whole
budget. How much such a figure moves from one run to the next, and what the recipe owes to each
of its changes, is the rest of this chapter.

## Where the time goes

Before changing anything, measure. PyTorch's profiler records every operator a training step
runs and the time the CPU spent in it. The step profiled is chapter 8's, as the package runs it
(`TrainStep`: forward pass, label-smoothed loss, backward pass, Adam and the schedule), on the
model of chapter 8's cpu configuration (`TransformerConfig.cpu()`: $d_\text{model} = 256$, 4
heads, 3 + 3 layers, $d_{ff} = 1024$, the shared 8,000-token vocabulary, 7.6 million
parameters), on real Multi30k batches of its recipe: the first batches of the shuffled training
set, at most 1,500 padded tokens each (`TrainConfig.cpu().max_tokens`).

Three settings are profiled. The first is the paper's recipe in float32, with dropout
$P_{drop} = 0.1$ (Sec. 5.4). The second runs the forward pass in bfloat16 (bf16) under
`torch.autocast`, as mixed precision does on a GPU {cite:p}`micikevicius2018mixed` (the weights
and Adam's moments stay float32). The third is chapter 8's cpu configuration as it runs on a CPU
with bf16 instructions: bf16, attention through PyTorch's plain kernel, and no dropout (why, the
ladder below shows).

The first steps are not recorded: `schedule(wait=1, warmup=1, active=2)` lets one step run
without the profiler, profiles a second one and discards it, and records the next two, so that
one-time costs (Adam creating its state, the first call of each kernel) stay out. The table adds
up the operators' own time (without the operators they call) in groups: the matrix products of
the linear layers (`aten::mm`, `aten::addmm`; the output layer is one of them), attention (the
fused kernel `_scaled_dot_product_flash_attention_for_cpu` and its backward, or the plain
kernel's batched products and softmax), dropout's random masks (`aten::bernoulli_`), the output
layer's log-softmax and its backward, everything Adam's update runs, and the rest (layer norm,
additions, copies, the embedding). It runs on one thread, the steadiest setting on a shared
machine:
''')

code(r'''
# Real batches of the cpu recipe: the first 6 of the shuffled training set (seed 0)
batches, tokenizer = cpu_ladder.real_batches(6, max_tokens=TrainConfig.cpu().max_tokens)
cpu_cfg = TransformerConfig.cpu(src_vocab_size=tokenizer.vocab_size,
                                tgt_vocab_size=tokenizer.vocab_size, pad_id=tokenizer.pad_id)
assert all(b.src.numel() <= 1500 and b.tgt_in.numel() <= 1500 for b in batches)
n_params = sum(p.numel() for p in Transformer(cpu_cfg).parameters())
assert round(n_params / 1e6, 1) == 7.6
print(f"TransformerConfig.cpu(): {n_params:,} parameters, dropout {cpu_cfg.dropout}")
print("batches (sentences x padded length):", ", ".join(
    f"{b.src.shape[0]} x {b.src.shape[1]}" for b in batches))
print(f"target tokens per batch: {statistics.mean(b.num_tgt_tokens for b in batches):,.0f} "
      "on average")
''')

code(r'''
# NBVAL_IGNORE_OUTPUT
# Warm steps profiled here, on one thread (seconds per step: this machine's, under the profiler)
PROFILED = [
    CpuRung("fp32, P_drop 0.1"),
    CpuRung("bf16 autocast, P_drop 0.1", precision="bf16 fused"),
    CpuRung("chapter 8 here", precision="bf16", dropout=0.0),
]
live_profiles = {r.name: cpu_ladder.profile_cpu_step(r, cpu_cfg, batches, wait=1, warmup=1,
                                                      active=2) for r in PROFILED}
print(cpu_ladder.format_profile_groups(list(live_profiles.values())))
''')

md(r'''
`benchmarks/cpu_ladder.py` ran the same profile with ten recorded steps on the idle 2-core AMD
EPYC, on one thread and on two (the operators' own time, seconds per step, and each group's
share):
''')

code(r'''
# The stored profile (benchmarks/cpu_ladder.py, the 2-core AMD EPYC, 2026-11-24)
if STORED:
    stored_profile = stored_json(CPU_RUN / "cpu_profile.json")
    print(f"{stored_profile['hardware']}, torch {stored_profile['torch']}, "
          f"{stored_profile['date']}: {stored_profile['active']} profiled steps per setting")
    by_threads = {}
    for p in stored_profile["profiles"]:
        by_threads.setdefault(p["threads"], []).append(p)
    for threads, profiles in by_threads.items():
        print(f"\n{threads} thread(s):")
        print(cpu_ladder.format_profile_groups(profiles, ["fp32, P_drop 0.1",
                                                          "bf16 autocast, P_drop 0.1",
                                                          "chapter 8 here"]))
    one, two = by_threads[1], by_threads[2]  # fp32, bf16 with the fused kernel, chapter 8 here

    def share(p, group):
        return p["groups"][group] / p["total"]

    assert [round(share(p[0], "matrix products"), 2) for p in (one, two)] == [0.69, 0.61]
    assert all(share(p[0], g) < 0.08 for p in (one, two)
               for g in ("attention", "dropout", "log-softmax (output layer)", "Adam"))
    assert [round(p[1]["groups"]["matrix products"] / p[0]["groups"]["matrix products"], 2)
            for p in (one, two)] == [0.44, 0.42]
    assert [round(p[1]["sdpa_backward"] / p[0]["sdpa_backward"], 1) for p in (one, two)] == [
        6.1, 3.6]
    assert [round(p[2]["total"] / p[0]["total"], 2) for p in (one, two)] == [0.68, 0.56]
    assert all(share(p[2], "attention") < 0.1 and p[2]["groups"]["dropout"] == 0 for p in (one, two))
else:
    print(NOT_STORED)
''')

code(r'''
# What holds on any CPU, checked on the live profile: in float32 the matrix products are the
# largest group (held beside a program keeping a core busy, and with PyTorch's and MKL's
# portable kernels: ATEN_CPU_CAPABILITY=default MKL_CBWR=COMPATIBLE)
fp32_groups = live_profiles["fp32, P_drop 0.1"]["groups"]
largest = max(fp32_groups, key=fp32_groups.get)
print(f"float32: the largest group is {largest}")
assert largest == "matrix products", fp32_groups
assert fp32_groups["dropout"] > 0 and live_profiles["chapter 8 here"]["groups"]["dropout"] == 0
''')

code(r'''
# NBVAL_IGNORE_OUTPUT
# What bf16 changes depends on the CPU: checked only where it has bf16 instructions.
fp32_p, fused_p, ours_p = (live_profiles[r.name] for r in PROFILED)
if native_bf16:
    grows = fused_p["sdpa_backward"] / fp32_p["sdpa_backward"]
    products = ours_p["groups"]["matrix products"] / fp32_p["groups"]["matrix products"]
    print(f"fused attention's backward in bf16: {grows:.1f} times its float32 time; "
          f"matrix products in bf16: {products:.2f} of their float32 time")
    assert grows > 2 and products < 0.8, (grows, products)
else:
    print("skipped: this CPU has no bf16 instructions, bf16 arithmetic runs in software here")
''')

md(r'''
In float32 the matrix products of the linear layers take most of the step: 69% of the
operators' own time on one thread, 61% on two. Every other group takes a few per cent (dropout's
masks, attention, the output layer's log-softmax, Adam: under 8% each), and the rest, some
thousand small operators (layer norm, additions, copies, the embedding), 15 to 20%. Two
levers follow. The products run faster in a narrower number format: this CPU multiplies bf16
numbers in hardware (AVX512_BF16), and under autocast they take 0.42 to 0.44 of their float32
time. But the fused attention kernel goes the other way: its backward pass takes 3.6 times as
long in bf16 as in float32 on two threads (6.1 times on one), which eats much of the gain.
PyTorch's plain kernel computes attention as batched matrix products and a softmax, which bf16
speeds up like the other products; that is the package's CPU bf16 path
(`transformer_book.step.autocast`). With it, and without dropout (chapter 8's cpu configuration
on this CPU), attention is back under a tenth of the step, and the operators take 0.56 of the
float32 step's time on two threads (0.68 on one). On a CPU without bf16 instructions bf16 is
converted in software and slower than float32, and `TrainConfig.cpu()` (`cpu_amp=None`) then
trains in float32.

## The ladder on this machine

The profile says where the time goes; the ladder measures what each change buys. Each rung keeps
every change above it, and every rung runs the package's `TrainStep` on the same real batches
with the same model (`transformer_book.benchmark.cpu_ladder`):

1. **fp32, 1 thread**: the starting point, float32 with $P_{drop} = 0.1$.
2. **2 threads**: the reader's two cores (`torch.set_num_threads(2)`).
3. **bf16 autocast**: the forward pass under `torch.autocast("cpu", torch.bfloat16)`; attention
   keeps PyTorch's default CPU kernel, the fused one.
4. **bf16, plain attention**: the package's CPU bf16 path, `TrainStep(amp_dtype=torch.bfloat16)`
   (`TrainConfig(cpu_amp=True)`): attention through the plain ("math") kernel of
   `scaled_dot_product_attention`, batched matrix products and a softmax, which bf16 speeds up
   like the other products.
5. **no dropout**: $P_{drop} = 0$. This is a change of the *recipe*, not of the arithmetic's
   speed alone: the model computes something else. Its worth is judged on the clock below.
6. **torch.compile**: forward pass and loss through `torch.compile(fullgraph=True)`, PyTorch's
   compiler (its inductor backend generates fused C++ kernels for the CPU). Compiling takes time
   before the first step and again for new batch shapes; it is reported apart.

The rungs take turns: each round runs every rung on the same 10 batches (about 13,000 target
tokens), so a slow spell of the machine hits all of them, and each rung is compared with the rung
above it round by round. `benchmarks/cpu_ladder.py --machine cpu-2026-11-24 --rounds 5` ran 5 timed
rounds after a warm-up round on the 2-core AMD EPYC, with nothing else running on purpose:
''')

code(r'''
# The stored ladder (benchmarks/cpu_ladder.py, the 2-core AMD EPYC, 2026-11-24)
LADDER_COLUMNS = [
    ("rung", "rung", "s"), ("target tok/s", "median_tokens_per_second", ",.0f"),
    ("sentences/s", "median_sentences_per_second", ",.0f"), ("vs above", "vs_above", ".2f"),
    ("lowest", "vs_above_low", ".2f"), ("highest", "vs_above_high", ".2f"),
    ("vs first", "vs_first", ".2f"), ("spread", "spread", ".0%")]
if STORED:
    ladder = stored_json(CPU_RUN / "cpu_ladder.json")
    summary = {s["rung"]: s for s in ladder["summary"]}
    print(f"{ladder['hardware']}, torch {ladder['torch']}, {ladder['date']}: {ladder['rounds']} "
          f"rounds of {ladder['steps']} steps; medians over the rounds, 'vs above' the median of "
          "the round-by-round ratios to the rung above (lowest, highest), 'spread' the slowest "
          "round against the fastest")
    print(format_table(ladder["summary"], LADDER_COLUMNS))
    assert [s["rung"] for s in ladder["summary"]] == [r.name for r in CPU_LADDER]
    assert ladder["rounds"] == 5 and ladder["steps"] == 10 and ladder["native_bf16"]
    below = ladder["summary"][1:]
    assert all(s["faster_every_round"] for s in below)  # each rung beat the one above, every round
    assert [round(s["vs_above"], 2) for s in below] == [1.63, 1.25, 1.20, 1.13, 1.19]
    assert [round(s["vs_above_low"], 2) for s in below] == [1.42, 1.13, 1.12, 1.01, 1.05]
    assert round(summary["no dropout"]["vs_first"], 1) == 2.8
    assert round(summary["torch.compile"]["vs_first"], 1) == 3.1
    assert round(max(s["spread"] for s in ladder["summary"]), 2) == 0.36
    assert round(summary["bf16, plain attention"]["median_tokens_per_second"]
                 / summary["2 threads"]["median_tokens_per_second"], 2) == 1.45
else:
    print(NOT_STORED)
''')

code(r'''
if STORED:
    fig, ax = plt.subplots(figsize=(7.5, 3.4))
    rows = ladder["rows"]
    ys = range(len(rows))
    medians = [statistics.median(r["tokens_per_second"]) for r in rows]
    lows = [m - min(r["tokens_per_second"]) for m, r in zip(medians, rows)]
    highs = [max(r["tokens_per_second"]) - m for m, r in zip(medians, rows)]
    colors = ["tab:orange" if r["recipe_change"] else "tab:blue" for r in rows]
    ax.barh(list(ys), medians, xerr=[lows, highs], color=colors, capsize=3)
    ax.set_yticks(list(ys), [r["rung"] for r in rows])
    ax.invert_yaxis()
    ax.set_xlabel("target tokens per second (median of the rounds; bars: slowest to fastest)")
    ax.set_title("The CPU ladder, each rung keeping the ones above\n"
                 f"({ladder['hardware']}, 2 threads from the second rung; orange: a recipe change)")
    fig.tight_layout()
    plt.show()
''', tags=["hide-input"], alt="Horizontal bars of training throughput in target tokens per "
   "second for the six rungs of the CPU ladder (fp32 on one thread, two threads, bf16 autocast, "
   "bf16 with plain attention, no dropout, torch.compile), each with whiskers from its slowest to "
   "its fastest round; the no-dropout rung is coloured as a recipe change.")

md(r'''
Every rung was faster than the rung above it in every one of the 5 rounds, though by very
different margins. The second core buys the most, 1.63 times the throughput (the median of the
rounds; 1.42 to 1.84). bf16 autocast adds a factor of 1.25, and moving attention to the plain
kernel another 1.20, as the profile predicted: the package's CPU bf16 path together makes 1.45
times the float32 throughput on two cores. Removing dropout adds 1.13, but its lowest round gained
only 1%: on a shared machine that is within the noise of a single round, and it is a change of
the recipe, judged on validation BLEU below (the speed run chose it there, not here). The slowest
round of a rung was up to 36% slower than its fastest (the 'spread' column): the machine's pace
varied during the run by more than some of the gains, and that is why each rung is compared with
the rung above it round by round, never across rounds. Chapter 8's cpu configuration (the rung "no
dropout") runs at 2.8 times the float32 single-thread step.

`torch.compile` is the one change that costs time before it saves any. Whether it pays off in a
run of 600 seconds is arithmetic on the ladder's figures: compiling takes $C$ seconds of the budget,
and the compiled step is $s$ times as fast as the eager one, so the work of 600 eager seconds takes
$C + 600/s$ seconds:
''')

code(r'''
# torch.compile against a 600 s budget, from the stored ladder and the speed run's compile probe
if STORED:
    compiled = summary["torch.compile"]
    payoff = cpu_ladder.compile_payoff(compiled["compile_seconds"], compiled["vs_above"])
    print(f"stored ladder: {compiled['compile_seconds']:.0f} s of compiling, then "
          f"x{compiled['vs_above']:.2f} over the eager step (rounds: "
          f"x{compiled['vs_above_low']:.2f} to x{compiled['vs_above_high']:.2f}): saves "
          f"{payoff['saved_seconds']:.0f} s of a 600 s run, "
          f"{'pays off' if payoff['pays_off'] else 'does not pay off'}"
          f" (break-even after {payoff['break_even_seconds']:,.0f} s of training)")
    probe = (CPU_RUN / "speedrun" / "probes" / "compile_probe_bf16.log").read_text()
    warm = int(re.search(r"compile warm-up: 60 steps in (\d+) s", probe).group(1))
    rates = {k: [int(x) for x in re.findall(rf"^{k} \d (\d+) tok/s", probe, re.M)]
             for k in ("eager", "compiled")}
    probe_gain = statistics.median(c / e for c, e in zip(rates["compiled"], rates["eager"]))
    print(f"speed-run probe (fused attention, 60 steps of compiling and recompiling): {warm} s, "
          f"then x{probe_gain:.2f} (median of 3 rounds)")
    assert round(compiled["compile_seconds"]) == 94 and round(compiled["vs_above"], 2) == 1.19
    assert payoff["pays_off"] and 550 < payoff["break_even_seconds"] < 600
    assert 80 < 1150 * (1 - 1 / compiled["vs_above"]) - compiled["compile_seconds"] < 100
    assert "BF16Forward" in compiled["note"]  # see the text
    assert warm == 157 and round(probe_gain, 2) == 1.07
else:
    print(NOT_STORED)
''')

md(r'''
On the stored ladder compiling took 94 seconds (the warm-up round's time beyond a timed round),
and the compiled step then ran 1.19 times as fast as the eager one: the work of 600 eager seconds
takes $94 + 600/1.19 \approx 598$ seconds. Within a budget of 600 seconds that is a draw (the
break-even is at about 590 s of training); in chapter 8's 20-minute budget it would save about
a minute and a half. Two things speak against counting on it. The ladder's rounds use 10
batches, so the compiler met 10 batch shapes; a real run meets many more, and recompiles for
some (the speed run's probe, with the fused attention kernel, compiled and recompiled for 157 s
during its first 60 steps, then gained only a factor of 1.07). And when the ladder ran, the
package's CPU bf16 step did not compile with `fullgraph=True`: `transformer_book.step.autocast`
combined the two contexts in a `contextlib.ExitStack`, which `torch.compile` cannot trace. The
ladder compiled the same computation with the two contexts written as `with` statements
(`cpu_ladder.BF16Forward`; its record says so). The package's step now nests them the same way,
so `TrainConfig(compile=True, cpu_amp=True)` compiles; the speed run's recipe has not been timed
compiled end to end.

The same ladder runs here in a short version (2 batches per round, 3 rounds; no
`torch.compile`, which would take minutes), with the spread of its rounds. On a shared machine
and with so few steps its figures are indicative only: nothing below is asserted from a single
round.
''')

code(r'''
# NBVAL_IGNORE_OUTPUT
live_rows = cpu_ladder.measure_cpu_ladder(cpu_cfg, batches[:2], rungs=CPU_LADDER[:-1], rounds=3)
live_summary = cpu_ladder.summarize_ladder(live_rows)
print(format_table(live_summary, LADDER_COLUMNS))
print("torch.compile: skipped here (minutes of compiling); see the stored ladder")
''')

code(r'''
# NBVAL_IGNORE_OUTPUT
# The live ladder: every rung ran; the gain of the package's bf16 path on this CPU
assert all(len(r["seconds"]) == 3 and min(r["tokens_per_second"]) > 0 for r in live_rows)
if native_bf16:
    plain_vs_fp32 = statistics.median(
        a / b for a, b in zip(live_rows[3]["tokens_per_second"], live_rows[1]["tokens_per_second"]))
    # printed, not asserted: with 2 steps per round on a shared machine the 2-thread rungs can
    # swing by more than this gain (the stored ladder's rounds are the evidence)
    print(f"bf16 with plain attention against fp32, both on 2 threads: x{plain_vs_fp32:.2f}")
else:
    print("skipped: this CPU has no bf16 instructions")
''')

md(r'''
## Time to BLEU

Throughput is a means. The end is the BLEU a recipe reaches in the time there is, and that
depends on what the steps do as much as on how many there are. `benchmarks/time_to_bleu.py`
measures it: it trains a recipe from scratch, stops the clock every 60 seconds of training to
translate the **validation** set greedily and score it (cased sacreBLEU), and ends when the
budget of 600 seconds is spent or the validation BLEU reaches 30; only then does it translate
test 2016 once, with beam search (beam 4, length penalty 0.6), so the test set makes no choice.
In the same run it trains `torch.nn.Transformer` with two standard recipes, on the same data and
vocabulary, scoring every 150 seconds:

- **fast**, the speed run's recipe: chapter 8's cpu configuration (the model above; batches of
  at most 1,500 padded tokens; Adam with a 200-step warm-up towards 0.45 times Eq. (3)'s rate,
  then a linear decay that reaches 0 when the budget runs out, a schedule made for training on a
  budget {cite:p}`li2020budgeted`), in bf16 with the plain attention kernel, without dropout;
- **standard**, `nn.Transformer` of the same shape trained as the paper says (Sec. 5.3, 5.4):
  Eq. (3) with its 4,000 warm-up steps, batches of 4,096 tokens, $P_{drop} = 0.1$, label
  smoothing 0.1;
- **tutorial**, `nn.Transformer` as PyTorch's tutorial "Language Translation with
  nn.Transformer" trains it on Multi30k: 3 + 3 layers of width 512 with $d_{ff} = 512$, Adam at a
  constant $10^{-4}$, about 128 sentence pairs per batch, no label smoothing.

The run of the tutorial's recipe was stopped while it translated test 2016 (beam search with
a model that keeps no cache of earlier steps, and writes to the length limit when undertrained:
after 20 minutes it had not finished), so its record is the log's lines, without a test score:
''')

code(r'''
# The stored speed run: one line per recipe (the 2-core AMD EPYC, 2026-11-24); the tutorial's
# recipe from the run's log (it was stopped before its record was written)
TTB_COLUMNS = [("recipe", "name", "s"), ("model", "model", "s"), ("params", "params", ",d"),
               ("train s", "train_seconds", ".0f"), ("steps", "steps", ",d"),
               ("best val", "best_val", ".2f"), ("test 2016", "test", ".2f")]


def log_curve(path: Path, recipe: str) -> list[tuple[float, int, float]]:
    # (seconds, step, validation BLEU) of each evaluation a time_to_bleu.py log printed
    found = re.findall(rf"^\[{recipe}\]\s+(\d+) s\s+step\s+(\d+).*val BLEU \(greedy\)\s+([\d.]+)",
                       path.read_text(), re.M)
    return [(float(s), int(n), float(b)) for s, n, b in found]


def json_curve(run: dict) -> list[tuple[float, int, float]]:
    return [(e["train_seconds"], e["step"], e["val_bleu_greedy"]) for e in run["evaluations"]]


if STORED:
    standard = runs["standard"]
    log = (CPU_RUN / "time_to_bleu.log").read_text()
    tutorial = log_curve(CPU_RUN / "time_to_bleu.log", "tutorial")
    first_final = log_curve(CPU_RUN / "speedrun" / "5_first_final_run_uncommitted_tree.log",
                            "fast")
    tutorial_params = int(re.search(r"^\[tutorial\] ([\d,]+) parameters", log, re.M)
                          .group(1).replace(",", ""))
    table = [{"name": r["recipe"]["name"], "model": r["recipe"]["model"],
              "params": r["parameters"], "train_seconds": r["train_seconds"], "steps": r["steps"],
              "best_val": max(e["val_bleu_greedy"] for e in r["evaluations"]),
              "test": r["test2016_bleu_beam4"]} for r in (fast, standard)]
    table.append({"name": "tutorial", "model": "nn.Transformer", "params": tutorial_params,
                  "train_seconds": tutorial[-1][0], "steps": tutorial[-1][1],
                  "best_val": max(b for _, _, b in tutorial), "test": None})
    print(f"{speed_run['device']}, {speed_run['date']}; validation BLEU greedy, test 2016 beam 4")
    print(format_table(table, TTB_COLUMNS))
    assert [r["recipe"]["name"] for r in speed_run["results"]] == ["fast", "standard"]
    assert (standard["steps"], standard["test2016_bleu_beam4"]) == (324, 0.02)
    assert standard["tokens_per_second"] == 2004 and fast["tokens_per_second"] == 3288
    assert standard["steps"] < standard["recipe"]["warmup_steps"] / 12  # early in its warm-up
    assert (tutorial[-1][1], max(b for _, _, b in tutorial), tutorial_params) == (344, 4.13,
                                                                                  16_718_848)
    assert "stopped by the lead" in log.splitlines()[-1]
    assert json_curve(fast)[0] == (60.0, 166, 3.32)
    assert max(b for _, _, b in json_curve(fast)) == 27.94
    first_test = re.search(r"^\[fast\] test 2016 BLEU ([\d.]+)",
                           (CPU_RUN / "speedrun" / "5_first_final_run_uncommitted_tree.log")
                           .read_text(), re.M).group(1)
    assert (first_final[-1], float(first_test)) == ((600.0, 1557, 29.93), 30.93)
else:
    print(NOT_STORED)
''')

code(r'''
if STORED:
    fig, ax = plt.subplots(figsize=(7.5, 4))
    curves = [(json_curve(fast), f"fast: test 2016 {fast['test2016_bleu_beam4']:.1f}",
               "tab:blue", "-"),
              (first_final, "fast, an earlier run (speedrun/ 5): test 2016 30.9", "tab:blue",
               "--"),
              (json_curve(standard), "nn.Transformer, standard: test 2016 "
               f"{standard['test2016_bleu_beam4']:.2f}", "tab:red", "-"),
              (tutorial, "nn.Transformer, tutorial (test not scored)", "tab:green", "-")]
    for curve, label, color, style in curves:
        ax.plot([0] + [s for s, _, _ in curve], [0] + [b for _, _, b in curve], style,
                marker="o", ms=3, color=color, label=label)
    ax.axhline(GOAL_BLEU, color="gray", lw=0.8, ls=":")
    ax.set_xlabel("seconds of training (evaluation excluded)")
    ax.set_ylabel("validation BLEU (greedy)")
    ax.set_title(f"Time to BLEU on 2 CPU cores ({speed_run['device'].split(',')[0]}, "
                 f"{speed_run['date']})")
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    plt.show()
''', tags=["hide-input"], alt="Validation BLEU against seconds of training on two CPU cores for "
   "the fast recipe (the stored run and an earlier run of the same settings), and for "
   "nn.Transformer with the paper's recipe and with the PyTorch tutorial's recipe, with a dotted "
   "line at 30 BLEU.")

md(r'''
The recipe's validation BLEU climbs from 3.3 after one minute to 27.94 at 540 s (27.51 at the
end), and its test 2016 score is 30.50; an earlier run of the same settings and seed (dashed)
ended at 29.93 on validation and 30.93 on test 2016. `nn.Transformer` with the paper's recipe
learns next to nothing in the same 600 s: its 324 steps (batches of 4,096 tokens, 2,004 target
tokens/s in float32 against the recipe's 3,288 in bf16) are less than a twelfth of its 4,000
warm-up steps, so its learning rate never got past a twelfth of its peak, and it scores 0.02 on
test 2016. The tutorial's recipe, a constant rate on a model of 16.7 million parameters, made 344
steps and reached 4.13 on validation. These runs compare recipes, not models: `nn.Transformer`
was not trained with the fast recipe.

One caveat the stored records show, found while writing this chapter: after each evaluation,
`time_to_bleu.py` starts the epoch it was in over from its first batch (it asks the corpus for
the epoch's batches again, without the position it had reached). A run that makes fewer steps
between two evaluations than an epoch has batches therefore trains, again and again, on the
first batches of its shuffled training set only:
''')

code(r'''
# Steps between two evaluations against batches per epoch, for each recipe of the stored run;
# the tokenizer and the batching are the runs' own (the 8,000-token vocabulary, each recipe's
# max_tokens; the tutorial's 2,150 is its recipe in benchmarks/time_to_bleu.py)
if STORED:
    train_pairs = load_multi30k("train")
    coverage = {}
    for name, curve, max_tokens in (("fast", json_curve(fast), fast["recipe"]["max_tokens"]),
                                    ("standard", json_curve(standard),
                                     standard["recipe"]["max_tokens"]),
                                    ("tutorial", tutorial, 2150)):
        corpus = prepare_corpus(tokenizer, train_pairs, max_tokens, seed=0)
        steps = [0] + [n for _, n, _ in curve]
        between = max(b - a for a, b in zip(steps, steps[1:]))
        coverage[name] = (between, corpus.num_batches(0))
        if name == "fast":  # the sentence pairs in the batches the fast run went through
            seen = sum(len(idx) for idx in corpus.batch_indices(0)[:between])
        print(f"{name:8}: at most {between:3} steps between two evaluations, an epoch has "
              f"{corpus.num_batches(0)} batches")
    print(f"fast: {seen:,} of the {len(train_pairs):,} training pairs seen; epochs completed "
          f"in the stored record: fast {fast['epochs']}, standard {standard['epochs']}")
    assert all(between < per_epoch for between, per_epoch in coverage.values())
    assert fast["epochs"] == standard["epochs"] == 0
    assert coverage["fast"] == (166, 323) and round(seen, -3) == 15_000
else:
    print(NOT_STORED)
''')

md(r'''
The fast recipe made at most 166 steps between two evaluations, about half of the 323 batches
of an epoch: the stored run went ten times through the same first half of its shuffled training
set, about 15,000 of the 29,000 sentence pairs, and never completed an epoch, and so did the
references. The figures above are those of that loop. A loop that goes on where it stopped
would show the recipe all the data in the same 600 seconds; whether it then reaches 30 BLEU
sooner has not been measured.

How far does such a curve move between two runs? The screening runs that chose the recipe
(`speedrun/`, its README says which command made each and what else ran on the machine) include
two earlier runs of the same settings and seed, made on the same idle machine:
''')

code(r'''
# The same recipe and seed in earlier runs: run 4 of the screening (scored every 150 s) and the
# first final run (every 60 s; its log only), beside the stored run
def near(curve, t):
    """The (seconds, BLEU) score taken closest to t seconds of training (within 31 s), or None."""
    s, b = min(curve, key=lambda p: abs(p[0] - t))
    return (s, b) if abs(s - t) <= 31 else None


if STORED:
    speedrun = CPU_RUN / "speedrun"
    screening = stored_json(speedrun / "4_no_dropout.json")["results"][0]
    curves = {
        "screening run 4": [(e["train_seconds"], e["val_bleu_greedy"])
                            for e in screening["evaluations"]],
        "first final run": [(s, b) for s, _, b in first_final],
        "stored run": [(s, b) for s, _, b in json_curve(fast)],
    }
    print("validation BLEU (greedy) near 150, 300, 450 and 600 s of training:")
    for name, curve in curves.items():
        found = [near(curve, t) for t in (150, 300, 450, 600)]
        print(f"{name:20}: " + ", ".join(f"{p[1]:5.2f} at {p[0]:3.0f} s" if p else " " * 14
                                          for p in found))
    # the same settings and seed (the stored recipe has two fields more, unused by "fast")
    assert all(runs["fast"]["recipe"][k] == v for k, v in screening["recipe"].items())
    run4_steps = [0] + [e["step"] for e in screening["evaluations"]]
    assert min(b - a for a, b in zip(run4_steps, run4_steps[1:])) > 323  # more than an epoch
    assert max(b - a for a, b in zip([0] + [n for _, n, _ in first_final],
                                     [n for _, n, _ in first_final])) < 323
    assert near(curves["screening run 4"], 450) == (450.2, 31.82)
    assert [near(curves[k], 480)[1] for k in ("first final run", "stored run")] == [26.86, 26.56]
    stored_steps_per_minute = [b - a for a, b in zip([0] + [n for _, n, _ in json_curve(fast)],
                                                     [n for _, n, _ in json_curve(fast)])]
    assert min(stored_steps_per_minute) == 91 and sorted(stored_steps_per_minute)[1] >= 135
else:
    print(NOT_STORED)
''')

md(r'''
Screening run 4, scored every 150 seconds (about 400 steps between two scores, more than an
epoch, so it went through all the data and through the first batches of each epoch twice), was
ahead at every point and reached 31.82 at 450 s, where the threshold of 30 stopped it. The two
runs scored every minute, which saw half the data, stayed close to each other until 480 s (26.86
and 26.56), then ended 2.4 BLEU apart on validation (29.93 and 27.51) and 0.43 apart on test
2016 (30.93 and 30.50). The gap to run 4 may owe more to the data the loop showed than to chance;
these runs cannot separate the two. Between the two minute-by-minute runs the spread is that of
a schedule that reads the clock: the linear decay sets the learning rate from the seconds spent,
so the rate at a given step depends on the machine's pace, and two runs with the same seed are
not bit-identical. The stored run took 1,442 steps against the earlier run's 1,557; in one of
its minutes it made 91 steps instead of about 150, its machine busy with something else. One
seed has been run: the spread between seeds has not been measured.

## What a GPU would change (stored results only)

This section cites only results stored in the repository, measured on one NVIDIA H100 on
2026-11-22; what has not been measured on a GPU is listed under "Still to run on a GPU" in
`benchmarks/README.md`, with the commands that would measure it.
''')

code(r'''
# Chapter 8's full configuration on the H100, and chapter 8's cpu configuration on 2 cores
if STORED:
    gpu_run = stored_json(H100_RUN / "chapter8_full_run.json")
    cpu_run = stored_json(CPU_RUN / "chapter8_cpu_run.json")
    gpu_test = next(b["bleu"] for b in gpu_run["bleu"] if b["split"] == "test_2016_flickr"
                    and b["decoding"] == "beam 4" and b["weights"] == "last epoch")
    cpu_test = next(b["BLEU"] for b in cpu_run["bleu"] if b["split"] == "test_2016_flickr"
                    and b["decoding"] == "beam 4" and b["weights"] == "last epoch")
    print(f"{gpu_run['hardware']} ({gpu_run['date']}): chapter 8's full configuration, "
          f"{gpu_run['parameters'] / 1e6:.1f}M parameters, {gpu_run['epochs']} epochs in "
          f"{gpu_run['train_minutes']} minutes, {gpu_run['last_epoch_tokens_per_second']:,} "
          f"target tokens/s in the last epoch: test 2016 BLEU {gpu_test:.2f}")
    print(f"{cpu_run['hardware']} ({cpu_run['date']}): chapter 8's cpu configuration, "
          f"{cpu_run['parameters'] / 1e6:.1f}M parameters, {cpu_run['passes']:.1f} passes in "
          f"{cpu_run['train_seconds'] / 60:.1f} minutes, {cpu_run['tokens_per_second']:,} target "
          f"tokens/s: test 2016 BLEU {cpu_test:.2f}")
    assert (gpu_test, gpu_run["train_minutes"], gpu_run["epochs"]) == (41.28, 4.5, 40)
    assert round(gpu_run["parameters"] / 1e6, 1) == 26.2
    assert round(gpu_run["parameters"] / cpu_run["parameters"], 1) == 3.5
    assert round(gpu_run["last_epoch_tokens_per_second"] / cpu_run["tokens_per_second"]) == 25
    assert (cpu_test, round(cpu_run["train_seconds"] / 60, 1)) == (37.93, 19.2)
else:
    print(NOT_STORED)
''')

md(r'''
On the H100, chapter 8 trains a model three and a half times as large (width 512, 26.2 million
parameters) for 40 epochs in 4.5 minutes, at about 25 times the CPU run's target tokens per
second, and reaches 41.28 BLEU on test 2016; the CPU's 20-minute run of the small model reaches
37.93. On a GPU the question of this chapter changes. The arithmetic is so fast that a small step
can take longer for the *host*, the Python process that queues the GPU's kernels, than for the
GPU itself. The stored H100 profile (`benchmarks/train_throughput.py --profile`) shows it for a
small step: the `small` shape (width 256, 3 + 3 layers, a vocabulary of 8,000) on 32 sentences of
24 tokens, in bf16, against the paper's base model on 256 sentences of 64 tokens:
''')

code(r'''
# The stored H100 runs of benchmarks/train_throughput.py: the step of transformer_book timed
# without the profiler, and (with --profile) the GPU's time in kernels per profiled step
def stored_steps(path: Path) -> list[dict]:
    """One dict per model in a train_throughput.py output: batch, step time, GPU kernel time."""
    steps = []
    for part in re.split(r"\n(?=Config '|The paper's base model)", path.read_text())[1:]:
        batch, tgt_len = map(int, re.search(r"batch (\d+) x \(source \d+, target (\d+)\)",
                                            part).groups())
        step = {"batch": batch, "tgt_len": tgt_len,
                "step_ms": float(re.search(r"^transformer_book\s+([\d.]+)", part, re.M).group(1))}
        if "Profile of transformer_book" in part:
            ours = part.split("Profile of transformer_book")[1].split("Profile of")[0]
            n = int(re.search(r"\((\d+) steps", ours).group(1))
            step["gpu_ms"] = float(re.search(r"Self CUDA time total: ([\d.]+)ms", ours).group(1)) / n
        steps.append(step)
    return steps


if STORED:
    text = (H100_RUN / "train_throughput_profile.txt").read_text()
    small, base = stored_steps(H100_RUN / "train_throughput_profile.txt")
    other_small, other_base = stored_steps(H100_RUN / "train_throughput.txt")
    print(text.splitlines()[0])
    for name, s, o in (("small", small, other_small), ("base", base, other_base)):
        print(f"{name}, batch {s['batch']} x {s['tgt_len']}: step {s['step_ms']:.1f} ms "
              f"({o['step_ms']:.1f} ms in another run), GPU in kernels {s['gpu_ms']:.1f} ms: "
              f"busy {s['gpu_ms'] / s['step_ms']:.0%} of the step")
    assert "d_model=256, heads=4, layers=3, d_ff=1024, vocab=8000" in text
    assert (small["batch"], small["tgt_len"], base["batch"], base["tgt_len"]) == (32, 24, 256, 64)
    assert [round(small[k], 1) for k in ("step_ms", "gpu_ms")] == [23.7, 2.8]
    assert round(small["gpu_ms"] / small["step_ms"], 2) == 0.12
    assert all(small["gpu_ms"] / s["step_ms"] < 0.15 for s in (small, other_small))
    assert all(base["gpu_ms"] / s["step_ms"] > 0.7 for s in (base, other_base))
    assert round(base["gpu_ms"] / base["step_ms"], 2) == 0.75
else:
    print(NOT_STORED)
''')

md(r'''
The small step keeps the GPU busy for 2.8 ms of its 23.7 ms, 12%: it is *host-bound*, and an
infinitely fast GPU would shorten it by those 2.8 ms at most. The base model's step, with 21
times the target tokens, keeps the GPU busy 75% of the time. For a host-bound step the remedies
are on the host, and the first is never to make it *wait*. Reading a value computed on the GPU
(`float(loss)`, `int(t.max())`) makes the host stop until every queued kernel has run (a *host
sync*), and the queue that was hiding the host's own time is empty afterwards. PyTorch's
profiler records each such read as `aten::item`. One plain step of a tiny model (the `tiny` shape
with a vocabulary of 1,000, 16 sentences of 16 tokens) reads back five values when the loop reads
its loss; the sync-free step, whose ids are checked on the host before the batch is copied and
whose losses stay on the device until the loop reads a few of them at once, reads none:
''')

code(r'''
cfg = TransformerConfig.tiny(src_vocab_size=1000, tgt_vocab_size=1000, dropout=0.1)
host_batches = [Batch(*benchmark.synthetic_batch(16, 16, 16, 1000, seed=s)) for s in range(2)]
batch = host_batches[0].to(device)


def in_optimizer(event) -> bool:
    """Whether a profiled operator ran inside an optimiser's step."""
    while event is not None:
        if event.name.startswith("Optimizer.step"):
            return True
        event = event.cpu_parent
    return False


def count_reads(model: Transformer, read_loss: bool) -> int:
    """Values one training step (forward, loss, backward, Adam) reads back from the device."""
    model.train()
    optimizer = torch.optim.Adam(model.parameters())
    step = TrainStep(model, optimizer, label_smoothing=0.1, pad_id=0)
    with benchmark.memory._quiet_stderr(), profile() as prof:
        loss = step(batch)
        if read_loss:
            float(loss)  # chapter 8's loop: the loss of every step, for the progress bar
    # Adam's own item() calls read the step counts it keeps in host memory: no device involved
    assert all(state["step"].device.type == "cpu" for state in optimizer.state.values())
    return sum(e.name == "aten::item" and not in_optimizer(e) for e in prof.events())


torch.manual_seed(0)
model = Transformer(cfg).to(device)
eager_reads = count_reads(model, read_loss=True)
model.check_token_ids = False  # the ids are checked on the host instead
fast_reads = count_reads(model, read_loss=False)
print(f"values read back from the device per step: eager {eager_reads}, without syncs {fast_reads}")
assert eager_reads == 5 and fast_reads == 0, (eager_reads, fast_reads)
''')

md(r'''
Four of the five reads come from a check that looks harmless: the model's `forward` makes sure
every token id lies inside the vocabulary, with `int(tokens.min())` and `int(tokens.max())` for
the source and the target. The fifth is the loss. On a CUDA device chapter 8's `Trainer` takes
the sync-free path by itself: ids checked on the host (`transformer_book.batching.check_token_ids`)
and the model's check off, pinned batches copied ahead (`non_blocking`), losses read every 50
steps, Adam's fused update (`TrainConfig`'s `sync_every`, `prefetch` and `fused_adam` default
to "on where CUDA is"; `torch.compile` and CUDA graphs stay opt-in). On a CPU there is no queue
to drain, and the defaults keep the plain loop:
''')

code(r'''
plain_data = prepare_corpus(tokenizer, load_multi30k("train"), 512, seed=0, limit=400)
trainer = Trainer(Transformer(cpu_cfg), plain_data, TrainConfig(device=device.type, progress=False),
                  d_model=cpu_cfg.d_model)
print(f"{device.type}: losses read every {trainer.sync_every} step(s), batches copied ahead: "
      f"{trainer.prefetch}, fused Adam: {bool(trainer.optimizer.defaults['fused'])}")
assert (trainer.sync_every, trainer.prefetch) == ((50, True) if on_gpu else (1, False))
assert bool(trainer.optimizer.defaults["fused"]) == on_gpu
''')

md(r'''
The sync-free loop changes when values are read, not what is computed. On a CPU, where both
loops run the very same kernels, a few steps of it (losses read every 2 steps, ids checked on the
host, the model's own check off) end with exactly the weights and losses of the plain loop:
''')

code(r'''
def train_briefly(sync_every: int, prefetch: bool) -> Trainer:
    torch.manual_seed(0)
    trainer = Trainer(Transformer(cfg.replace(src_vocab_size=tokenizer.vocab_size,
                                              tgt_vocab_size=tokenizer.vocab_size)),
                      plain_data,
                      TrainConfig(device=device.type, progress=False, max_steps=5,
                                  warmup_steps=5, sync_every=sync_every, prefetch=prefetch),
                      d_model=cfg.d_model)
    trainer.fit()
    return trainer


slow, fast_loop = train_briefly(sync_every=1, prefetch=False), train_briefly(2, prefetch=True)
fast_weights = fast_loop.model.state_dict()
same = all(torch.equal(w, fast_weights[name]) for name, w in slow.model.state_dict().items())
print(f"{slow.step} steps each: same weights {same}, "
      f"same losses {slow.history.train_loss == fast_loop.history.train_loss}")
# On a GPU some kernels may add in a different order each run (PyTorch's notes on randomness
# name cuDNN's attention and the backward of gather, which the loss uses).
assert on_gpu or (same and slow.history.train_loss == fast_loop.history.train_loss)
''')

md(r'''
## Summary

- The end-to-end measure is the time to BLEU on the reader's machine. The stored speed run on 2
  cores of an AMD EPYC met the goal: **30.50 BLEU on test 2016 after 600 s of training** (beam
  4; an earlier run of the same settings: 30.93), with chapter 8's cpu configuration in bf16
  without dropout. `nn.Transformer` trained with the paper's recipe or the PyTorch tutorial's
  reached 0.02 on test 2016 and 4.13 on validation in the same time, far from the goal. The
  stored runs trained on half of the data (the script started its epoch over at each evaluation),
  and one seed has been run.
- On a CPU a training step goes into arithmetic: in float32 the matrix products take 61% of the
  operators' time on two threads, each other group a few per cent. bf16 takes the products to
  less than half their float32 time on a CPU with bf16 instructions, but the fused attention
  kernel's backward pass grows several times in bf16, which the plain attention kernel avoids.
- The ladder, each rung timed against the one above round by round: a second thread x1.63, bf16
  autocast x1.25, the plain attention kernel x1.20, no dropout (a recipe change) x1.13,
  `torch.compile` x1.19 after 94 s of compiling, which breaks even at about 590 s of training;
  every rung beat the one above in each of 5 rounds, and the slowest round of a rung was up to 36%
  slower than its fastest.
- A GPU changes the question: on the H100 chapter 8's full configuration trained in 4.5 minutes
  to 41.28 BLEU, and a small step there is host-bound (the GPU busy 12% of it). The remedy starts
  with no host syncs: the sync-free step reads no device value, and on a CPU it gives the plain
  loop's weights bit for bit. What remains to be measured on a GPU is listed in
  `benchmarks/README.md`.

## Exercises

1. Count the values one training step reads back when the model keeps its token check but the
   loop no longer reads the loss every step. Which reads remain, and how would you remove them
   without losing the clear error message for a bad id?
2. From the stored ladder: from how many seconds of training on would `torch.compile` pay off on
   that machine? And if compiling took half as long?
3. How much of a training step's arithmetic does the output layer (`Transformer.generator`, a
   $d_\text{model} \times V$ matrix applied at every target position) take? Count the FLOPs
   with `torch.utils.flop_counter.FlopCounterMode` for the cpu configuration on a batch of 100
   sentences of 15 tokens, with the vocabulary of 8,000 and with one of 4,000.
''')

code(r'''
# Solution 1: the model's own check remains: int(min) and int(max) of source and target.
torch.manual_seed(0)
reads = count_reads(Transformer(cfg).to(device), read_loss=False)
print(f"reads per step with the model's check and no loss read: {reads}")
assert reads == 4
# Remove them by checking the batch on the host before the copy, where reading costs nothing:
from transformer_book.batching import check_token_ids  # noqa: E402

check_token_ids(host_batches[0], cfg.src_vocab_size, cfg.tgt_vocab_size)  # passes: ids < 1000
bad = Batch(host_batches[0].src.clone(), host_batches[0].tgt_in, host_batches[0].tgt_out)
bad.src[0, 0] = 5000
with transformer_book.expect_error(ValueError):
    check_token_ids(bad, cfg.src_vocab_size, cfg.tgt_vocab_size)
''', tags=["hide-input"])

code(r'''
# Solution 2: break-even training time of torch.compile, C / (1 - 1/s)
if STORED:
    for factor in (1.0, 0.5):
        got = cpu_ladder.compile_payoff(factor * compiled["compile_seconds"], compiled["vs_above"])
        print(f"compiling in {factor * compiled['compile_seconds']:.0f} s: pays off from "
              f"{got['break_even_seconds']:,.0f} s of training on")
    assert round(cpu_ladder.compile_payoff(compiled["compile_seconds"],
                                           compiled["vs_above"])["break_even_seconds"]) == 587
else:
    print(NOT_STORED)
''', tags=["hide-input"])

code(r'''
# Solution 3: the output layer's share of a training step's FLOPs (forward and backward)
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402
from transformer_book.loss import label_smoothing_loss  # noqa: E402


def output_layer_share(vocab: int) -> float:
    torch.manual_seed(0)
    model = Transformer(TransformerConfig.cpu(src_vocab_size=vocab, tgt_vocab_size=vocab))
    src, tgt_in, tgt_out = benchmark.synthetic_batch(100, 15, 15, vocab)
    counter = FlopCounterMode(display=False)
    with counter, sdpa_kernel(SDPBackend.MATH):  # the counter knows the plain kernel's products
        label_smoothing_loss(model(src, tgt_in), tgt_out, 0.1, 0).backward()
    return sum(counter.get_flop_counts()["Transformer.generator"].values()) / counter.get_total_flops()


shares = {vocab: output_layer_share(vocab) for vocab in (8000, 4000)}
for vocab, share in shares.items():
    print(f"vocabulary {vocab:,}: the output layer does {share:.0%} of the step's FLOPs")
assert 0.2 < shares[8000] < 0.35 and shares[4000] < shares[8000]
''', tags=["hide-input"])
