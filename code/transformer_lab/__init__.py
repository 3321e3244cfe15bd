"""The book's measuring lab: what the Transformer costs in wall time, peak memory and throughput
(Sec. 4, Table 1). A package of its own, installed with ``transformer_book`` (which it measures
and never is imported by): the teaching package holds what a learner builds, this one the
instruments of chapters 9-11 and of the scripts in ``benchmarks/``.

The scripts in ``benchmarks/`` and the chapters "What attention costs" and "Making training
fast" call these functions, so the figures printed by the command-line tables and the figures in
the book come from the same code. One module per question:

- :mod:`~transformer_lab.timing`: how long a call takes (the fastest of several
  calls, CUDA synchronised), log-log slopes, GPU peaks, plain-text tables;
- :mod:`~transformer_lab.memory`: how much memory a call allocates at its peak, and
  which operators it ran (read from ``torch.profiler``);
- :mod:`~transformer_lab.attention_cost`: attention and one sequence layer against
  the sequence length (chapter 10);
- :mod:`~transformer_lab.throughput`: training steps per second, ours against
  ``torch.nn.Transformer``, and their model FLOPs;
- :mod:`~transformer_lab.ladder`: the GPU-oriented throughput ladder, one speed
  feature switched on per rung, ours against ``torch.nn.Transformer``;
- :mod:`~transformer_lab.cpu_ladder`: chapter 11's CPU ladder and profile, on real
  Multi30k batches of the cpu recipe (import it as a module: ``benchmark.cpu_ladder``);
- :mod:`~transformer_lab.decoding`: greedy and beam-search decoding speed.

Everything is importable from here too (``import transformer_lab as benchmark;
benchmark.time_call(...)``, as the chapters do). Nothing here is a timed test: timings depend on the machine and on
what else runs on it, so every table puts a ratio measured in the same run beside the raw
figures.
"""

from transformer_lab import cpu_ladder  # noqa: F401 (chapter 11)
from transformer_lab.attention_cost import (
    attention_implementations,
    measure_attention,
    measure_sequence_layers,
)
from transformer_lab.decoding import (
    make_eos_unreachable,
    measure_decoding,
    source_batches,
)
from transformer_lab.ladder import (
    LADDER,
    LADDER_COLUMNS,
    Rung,
    ladder_table_rows,
    measure_ladder,
)
from transformer_lab.memory import (
    _cpu_peak_bytes,  # noqa: F401 (tests use it)
    operator_names,
    peak_memory_bytes,
)
from transformer_lab.throughput import (
    TorchTransformerBaseline,
    compare_train_rates,
    count_train_flops,
    matched_configs,
    measure_train_throughput,
    profile_train_step,
    synthetic_batch,
)
from transformer_lab.timing import (
    GPU_PEAK_BF16_TFLOPS,
    format_bytes,
    format_table,
    gpu_peak_tflops,
    loglog_slope,
    sync,
    time_call,
)

__all__ = [
    "GPU_PEAK_BF16_TFLOPS",
    "LADDER",
    "LADDER_COLUMNS",
    "Rung",
    "TorchTransformerBaseline",
    "attention_implementations",
    "compare_train_rates",
    "count_train_flops",
    "format_bytes",
    "format_table",
    "gpu_peak_tflops",
    "ladder_table_rows",
    "loglog_slope",
    "make_eos_unreachable",
    "matched_configs",
    "measure_attention",
    "measure_decoding",
    "measure_ladder",
    "measure_sequence_layers",
    "measure_train_throughput",
    "operator_names",
    "peak_memory_bytes",
    "profile_train_step",
    "source_batches",
    "sync",
    "synthetic_batch",
    "time_call",
]
