import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell

P = '/work/main/chapters/10_making_training_fast.ipynb'
nb = nbformat.read(P, 4)
C = nb.cells
assert C[0].source.startswith("# Making training fast") and len(C) == 27

C[0].source = r"""# Making training fast

How long should a training step take? The paper puts training cost beside quality: its Table 2
gives the FLOPs each model cost to train next to its BLEU, and Sec. 5.2 reports about 0.4
seconds per step for the base model on eight P100 GPUs {cite:p}`vaswani2017attention`. On a GPU
a step can take much longer than its arithmetic needs, because the GPU waits for the host that
issues its work. This chapter measures that wait, finds its causes with a profiler, and shows
the package's remedy for each. Nothing in this chapter changes the model or the recipe: every
speed feature is a flag of the same model and the same training step, and on a CPU the
sync-free loop gives bit-identical weights to the plain loop (a cell below checks it, and so do
the package's tests).

```{note}
The cells run on the machine running this notebook. The only GPU figures in this chapter are
read from two files stored in `benchmarks/results/h100-2026-11-22/`, measured on one NVIDIA
H100 80GB HBM3 with torch 2.11.0+cu130 on 2026-11-22: `train_throughput_profile.txt` (the time
and the profile of a training step of two model sizes on synthetic batches, in bf16) and
`train_throughput.txt` (another run of the same timing, without the profile). The throughput
ladder of this chapter, and the time to 40 BLEU, have not been measured on a GPU yet; the only
stored ladder is a CPU run (`benchmarks/results/cpu-2026-11-23/throughput_ladder.json`).
```"""

C[4].source = r"""## The symptom: a GPU that waits

A GPU runs kernels that the host (the Python process on the CPU) queues for it. As long as the
host queues work faster than the GPU finishes it, the GPU never idles and the host's own time is
hidden. When the host is slower, the GPU waits between kernels, and the step takes as long as
the host needs to issue it: the loop is *host-bound*.

The stored H100 profile (`benchmarks/train_throughput.py --profile`, the file
`h100-2026-11-22/train_throughput_profile.txt`) times the training step of two models on
synthetic batches in bf16, then profiles three steps of each: the `small` shape ($d_\text{model}
= 256$, 3 + 3 layers, $d_{ff} = 1024$, a vocabulary of 8,000) on 32 sentences of 24 source and
24 target tokens, and the paper's base model ($d_\text{model} = 512$, 6 + 6 layers, $d_{ff} =
2048$, a vocabulary of 37,000) on 256 sentences of 64 tokens. Neither is what chapter 8 trains on
a GPU (width 512 with 3 + 3 layers, batches of real sentences of at most 4,096 padded tokens),
and that step has not been profiled; in tokens per batch, 768 and 16,384 target tokens, the two
profiled steps lie on either side of it. For each, the cell reads the step's time without the
profiler (and from `train_throughput.txt`, the other run's), the time the GPU spent in kernels,
and the time the host spent in PyTorch operators per profiled step:"""

C[5].source = r'''# The stored H100 runs of benchmarks/train_throughput.py: for each model, the step of
# transformer_book timed without the profiler, then (with --profile) the totals of the
# profiler's table: host (CPU) time in operators and GPU (CUDA) time in kernels.
# Skipped in a copy without the repository.
import re

h100 = RESULTS / "h100-2026-11-22"


def stored_steps(path: Path) -> list[dict]:
    """One dict per model in a train_throughput.py output: batch, step time, profiled totals."""
    runs = []
    for part in re.split(r"\n(?=Config '|The paper's base model)", path.read_text())[1:]:
        batch, tgt_len = map(int, re.search(r"batch (\d+) x \(source \d+, target (\d+)\)",
                                            part).groups())
        step_ms = float(re.search(r"^transformer_book\s+([\d.]+)", part, re.M).group(1))
        run = {"batch": batch, "tgt_len": tgt_len, "step_ms": step_ms}
        if "Profile of transformer_book" in part:  # --profile: totals over the profiled steps
            ours = part.split("Profile of transformer_book")[1].split("Profile of")[0]
            n = int(re.search(r"\((\d+) steps", ours).group(1))
            run["host_ms"] = float(re.search(r"Self CPU time total: ([\d.]+)ms", ours).group(1)) / n
            run["gpu_ms"] = float(re.search(r"Self CUDA time total: ([\d.]+)ms", ours).group(1)) / n
        runs.append(run)
    return runs


if (h100 / "train_throughput_profile.txt").exists():
    profiled = stored_steps(h100 / "train_throughput_profile.txt")
    other = stored_steps(h100 / "train_throughput.txt")
    hardware = (h100 / "train_throughput_profile.txt").read_text().splitlines()[0]
    print(f"{h100.name}: {hardware.removeprefix('Hardware: ')}")
    for name, p, o in zip(["small", "base"], profiled, other, strict=True):
        print(f"{name}, batch {p['batch']} x {p['tgt_len']}: step {p['step_ms']:.1f} ms without the "
              f"profiler ({o['step_ms']:.1f} ms in the other run); GPU in kernels {p['gpu_ms']:.1f} "
              f"ms, {p['gpu_ms'] / p['step_ms']:.0%} of the step; host in operators "
              f"{p['host_ms']:.1f} ms under the profiler")
    small, base = profiled
    assert (small["batch"], small["tgt_len"], base["batch"], base["tgt_len"]) == (32, 24, 256, 64)
    assert small["batch"] * small["tgt_len"] < 4096 < base["batch"] * base["tgt_len"]
    # the small step is host-bound in both runs: the GPU is busy for less than 15% of it
    assert all(small["gpu_ms"] / s["step_ms"] < 0.15 for s in (small, other[0]))
    assert small["host_ms"] > max(small["step_ms"], other[0]["step_ms"])  # the profiler's cost
    # the base model's step keeps the GPU busy for most of it, in both runs
    assert all(base["gpu_ms"] / s["step_ms"] > 0.7 for s in (base, other[1]))
    assert [round(small[k], 1) for k in ("step_ms", "gpu_ms", "host_ms")] == [23.7, 2.8, 39.0]
    assert [round(base[k], 1) for k in ("step_ms", "gpu_ms")] == [65.1, 48.7]
    assert [round(o["step_ms"], 1) for o in other] == [25.2, 59.3]
else:
    print("(the stored profile lives in the book's repository, under benchmarks/results/)")
'''

C[6].source = r"""In the small model's step the GPU works for 2.8 ms of 23.7 ms (25.2 ms in the other run): it is
busy about 12% of the time and idle the rest, so even an infinitely fast GPU would shorten the
step by those 2.8 ms at most. (Under the profiler the host's time in operators grows to 39 ms
per step, more than the whole step takes without it: recording every operator costs host time
too.) The base model's step, a wider and deeper model on a batch with 21 times as many target
tokens, keeps the GPU busy 75% of its 65.1 ms. A step is host-bound when each kernel gets little
work, and then the fixes are on the host: do less Python per step, and above all never make the
host *wait* for the GPU, since every such wait empties the queue that was hiding the host's own
time.

## Profile the step

Where does the host wait? Reading a value computed on the GPU (`float(loss)`, `int(t.max())`,
`if tensor:`) makes the host stop until every queued kernel has finished, because the value does
not exist before that: a *host sync*. PyTorch's profiler records each such read as an
`aten::item` operator. Here is the plain training step (the model's `forward` and the loss, then
reading the loss back, as a loop that reports every step's loss does), on a small model: the
`tiny` shape with a vocabulary of 1,000, on a batch of 16 sentences of 16 tokens:"""

C[8].source = r"""Five reads per step, and on a GPU each one drains the queue. Four come from a check that looks
harmless: the model's `forward` makes sure every token id lies inside the vocabulary, with
`int(tokens.min())` and `int(tokens.max())` for the source and for the target (an exercise
below counts them). The fifth is the loss, read for the progress bar. The rest of the host's
time goes into issuing operators: the forward pass and the loss alone call some two hundred
PyTorch operators from Python, each paying for Python and dispatch before any arithmetic starts,
and the backward pass and the optimiser add more:"""

C[9].source = r"""# NBVAL_IGNORE_OUTPUT
# Operators in the profile of the forward pass and the loss above (the count may change with
# the version of PyTorch).
events = eager_profile.events()
from_python = sum(e.name.startswith("aten::") and e.cpu_parent is None for e in events)
print(f"operators called from Python: {from_python} "
      f"({sum(e.name.startswith('aten::') for e in events)} with the ones they call)")
assert 150 < from_python < 300, from_python"""

new_md_profile = new_markdown_cell(r"""On a GPU that overhead is all the host does for an operator, because the arithmetic is queued;
on a CPU the host also does the arithmetic. Where does a CPU's time go? The next cell profiles
whole training steps (forward, loss, backward, Adam) of chapter 8's cpu configuration
(`TransformerConfig.cpu()`, 7.6 million parameters) on a batch of the cpu recipe's size: 100
sentences of 15 tokens a side, the 1,500 padded tokens of `TrainConfig.cpu()` at the 14 to 15
subwords of a Multi30k sentence (chapter 8). The ids are random, since the speed depends on the
shapes, not on which ids the tokens are. The first steps are not recorded: the profiler's
`schedule(wait=1, warmup=1, active=2)` lets one step run without it, profiles a second one and
discards it, and records the next two, so that one-time costs (Adam creating its state, the
first call of each kernel) do not mix with the steady state. The table sorts the operators by
the host's own time in each; its percentages change from run to run and from machine to
machine, so the cell asserts only what held in every run we tried:""")

new_code_profile = new_code_cell(r"""# NBVAL_IGNORE_OUTPUT
from torch.profiler import schedule
from transformer_book.train import make_optimizer

cpu_cfg = TransformerConfig.cpu(src_vocab_size=8000, tgt_vocab_size=8000)
assert 100 * 15 == TrainConfig.cpu().max_tokens
torch.manual_seed(0)
cpu_model = Transformer(cpu_cfg).to(device)
optimizer, scheduler = make_optimizer(cpu_model, cpu_cfg.d_model, warmup_steps=200)
cpu_step = TrainStep(cpu_model, optimizer, scheduler, label_smoothing=0.1, pad_id=0)
cpu_batches = [Batch(*benchmark.synthetic_batch(100, 15, 15, 8000, seed=s)).to(device)
               for s in range(2)]
with benchmark.memory._quiet_stderr(), profile(
        schedule=schedule(wait=1, warmup=1, active=2)) as warm_profile:
    for i in range(4):
        float(cpu_step(cpu_batches[i % 2]))
        warm_profile.step()  # the schedule counts steps here
print(warm_profile.key_averages().table(sort_by="self_cpu_time_total", row_limit=8,
                                        max_name_column_width=40))
ops = sorted(warm_profile.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
total = sum(e.self_cpu_time_total for e in ops)
matmul = sum(e.self_cpu_time_total for e in ops
             if e.key in ("aten::mm", "aten::addmm", "aten::bmm")) / total
print(f"matrix products (aten::mm, addmm, bmm): {matmul:.0%} of the operators' own time, "
      f"on {torch.get_num_threads()} thread(s)")
# Held in every run tried: 1 and 2 threads, a busy CPU, ATEN_CPU_CAPABILITY=default
assert ops[0].key == "aten::mm", [e.key for e in ops[:3]]
assert matmul > 0.25, matmul
assert torch.get_num_threads() > 1 or matmul > 0.5, matmul""")

new_md_after_profile = new_markdown_cell(r"""On this machine's CPU the step goes into arithmetic: the matrix products (`aten::mm`, and
`aten::addmm`, a product with a linear layer's bias added in the same call) lead the table. On
one thread, the setting of this notebook, they take more than half of the operators' own time;
in our runs with two threads on a busy CPU their share fell to about a third, and `aten::mm`
still came first. There is no second device here for the host to keep busy, so the remedies
below, which remove waiting, have little to remove on a CPU; the CPU's remedy is less
arithmetic or faster arithmetic.""")

C[16].source = r"""## The ladder on this machine

The throughput ladder climbs one rung at a time, keeping everything the rungs above switched on,
and times ours against `torch.nn.Transformer` in the same loop (same sizes, dropouts, batches,
loss and optimiser; the two take turns, and the fastest of the timed rounds of each is kept).
Rungs that only exist on a GPU are reported as skipped on a CPU, and so is `torch.compile`
unless asked for (`compile_on_cpu=True`, `--compile-on-cpu`), because compiling on a CPU takes
long. This is the tiny model of the profile above, with a few steps per round, so the figures
are only indicative; the last column says how much slower the slowest timed round was than the
fastest, a measure of the noise:"""

C[17].source = r"""# NBVAL_IGNORE_OUTPUT
def both_models():
    torch.manual_seed(0)
    return {"transformer_book": Transformer(cfg),
            "nn.Transformer": benchmark.TorchTransformerBaseline(cfg)}


ladder_rows = benchmark.measure_ladder(both_models, batch=16, src_len=16, tgt_len=16,
                                       device=device, amp_dtype=torch.bfloat16 if on_gpu else None,
                                       steps=3, rounds=2, config_name="tiny, batch 16 x 16")
table = benchmark.ladder_table_rows(ladder_rows)
spread = {(r["rung"], r["model"]): r["spread"] for r in ladder_rows if r["ms_per_step"]}
for t in table:
    t["spread"] = (f"{spread[t['rung'], 'transformer_book']:.0%} / "
                   f"{spread[t['rung'], 'nn.Transformer']:.0%}" if t["ours_tok_s"] else "-")
print(benchmark.format_table(table, [c for c in benchmark.LADDER_COLUMNS
                                    if on_gpu or "MFU" not in c[0]]
                             + [("slowest round", "spread", "s")]))"""

C[20].source = r"""On a CPU there is no separate device to wait for: the "device" is the host itself, so a read
waits for nothing that was not already done, and there is no queue for copies ahead to overlap
with. The rungs that remove syncs have nothing to remove here. Nor does the table above show
what the other rungs are worth: with a few steps per round on a CPU shared with other programs,
the differences between rungs change from run to run, so this chapter asserts none of them (only
that every rung a CPU can run was measured). The stored CPU ladder
(`benchmarks/throughput_ladder.py --threads 1 --steps 3 --rounds 4`, on this project's 2-core
CPU while other programs ran) shows how large that noise can be:"""

new_code_stored_cpu = new_code_cell(r"""# The stored CPU ladder: the spread of its timed rounds, and two rungs that cannot differ on a
# CPU. Skipped in a copy without the repository.
import statistics

cpu_ladder_file = RESULTS / "cpu-2026-11-23" / "throughput_ladder.json"
if cpu_ladder_file.exists():
    cpu_ladder = json.loads(cpu_ladder_file.read_text())
    timed = [r for r in cpu_ladder["rows"] if r["ms_per_step"]]
    spreads = sorted(r["spread"] for r in timed)
    median_spread = statistics.median(spreads)
    print(f"{cpu_ladder['hardware']} ({cpu_ladder['date']}): {len(timed)} rows timed, "
          f"fastest of {cpu_ladder['rounds']} rounds of {cpu_ladder['steps']} steps")
    print(f"slowest round against the fastest of the same row: up to {spreads[-1]:.0%} slower "
          f"(median {median_spread:.0%})")
    ms = {(r["config"], r["rung"]): r["ms_per_step"] for r in timed
          if r["model"] == "transformer_book"}
    eager, no_syncs = ms["small, batch 32 x 24", "eager baseline"], ms["small, batch 32 x 24", "no host syncs"]
    print(f"small, batch 32 x 24, transformer_book: eager baseline {eager:,.0f} ms/step, "
          f"no host syncs {no_syncs:,.0f} ms/step ({no_syncs / eager:.1f} times as long)")
    assert cpu_ladder["threads"] == 1
    assert round(spreads[-1], 2) == 2.65 and round(median_spread, 2) == 0.73
    assert round(no_syncs / eager, 1) == 3.6
else:
    print("(the stored ladder lives in the book's repository, under benchmarks/results/)")""")

new_md_gpu = new_markdown_cell(r"""The rung without host syncs runs the same arithmetic as the eager baseline on a CPU, yet it
took 3.6 times as long: on that machine the rows of different rungs are not comparable, and the
stored CPU ladder supports no claim about what any rung is worth.

## On a GPU

The GPU ladder has not been run yet. It is one command on a machine with a CUDA GPU, and it
writes its results (hardware, date, and one row per model, configuration and rung, with the
spread of its timed rounds) beside the others in `benchmarks/results/`:

    .venv/bin/python benchmarks/throughput_ladder.py --machine h100-<date>

`benchmarks/time_to_bleu.py` then measures what matters in the end: the training time until the
**validation** BLEU (beam 4, the mean of the last 5 epochs' weights) reaches a target, 40 by
default, for ours and for `nn.Transformer` in the same loop. Only when a model has stopped does
it translate test 2016, once, and report that BLEU, so the test set makes no choice. It has not
been run on a GPU yet either. The next cell lists the stored ladder and time-to-BLEU results,
with the hardware and the date of each:""")

C[21].source = r"""stored = sorted(RESULTS.glob("*/throughput_ladder.json")) if RESULTS.exists() else []
for path in stored:
    result = json.loads(path.read_text())
    devices = sorted({r["device"] for r in result["rows"]})
    print(f"{path.parent.name}: {result['hardware']} ({result['date']}), devices {devices}, "
          f"{len(result['rows'])} rows")
gpu_results = [p for p in stored if "cuda" in {r["device"] for r in json.loads(p.read_text())["rows"]}]
time_to_bleu = sorted(RESULTS.glob("*/time_to_bleu.json")) if RESULTS.exists() else []
if not gpu_results:
    print("no GPU ladder stored yet: run benchmarks/throughput_ladder.py on a GPU")
if not time_to_bleu:
    print("no time-to-BLEU result stored yet: run benchmarks/time_to_bleu.py on a GPU")
# The text above says none is stored: a stored GPU result should be shown here instead.
assert not RESULTS.exists() or (not gpu_results and not time_to_bleu), (gpu_results, time_to_bleu)"""

C[24].source = C[24].source  # edited below
s = C[24].source
old_sum = s[:s.index("## Exercises")]
new_sum = r"""## Summary

- A training step on a GPU is **host-bound** when the host needs longer to issue the kernels
  than the GPU needs to run them. The stored H100 profile shows it for a small model on a small
  batch (the `small` shape, 32 x 24 tokens, bf16): a step of 23.7 ms in which the GPU works for
  2.8 ms. The paper's base model on a batch of 256 x 64 tokens keeps the GPU busy 75% of its
  step. Chapter 8's own GPU step has not been profiled.
- Every read of a device value (`float(loss)`, `int(t.max())`) is a **host sync** that drains
  the GPU's queue. The plain step has five, four of them from the model's token-id check;
  without them, none: losses stay on the device and are read in one transfer every few steps,
  and token ids are checked on the host before the copy.
- The other remedies: pinned batches copied ahead, fused Adam, fused attention kernels,
  `torch.compile` of the step as one graph (no breaks), CUDA graphs on batches padded to a few
  fixed widths, and larger batches. Each is a flag; none changes the model or the recipe (fused
  and compiled kernels may round differently), and on a CPU the sync-free loop gives the same
  weights as the plain one, bit for bit.
- On a CPU there is no second device to keep busy: a warm step of chapter 8's cpu configuration
  spends most of its time in matrix products, and the sync-free rungs have nothing to remove.
  The ladder's timings on a shared CPU are too noisy to rank the rungs (the stored CPU ladder's
  rounds differ by up to 265%). The GPU ladder and the time to 40 BLEU are measured by
  `benchmarks/throughput_ladder.py` and `benchmarks/time_to_bleu.py`; neither has been run on a
  GPU yet.

"""
C[24].source = new_sum + s[s.index("## Exercises"):]

# insert new cells (from the end, so that indices stay valid)
C.insert(21, new_md_gpu)
C.insert(21, new_code_stored_cpu)
C.insert(10, new_md_after_profile)
C.insert(10, new_code_profile)
C.insert(10, new_md_profile)
for c in C:
    c.pop("id", None) if False else None
nbformat.validate(nb)
nbformat.write(nb, P)
print(len(C))
