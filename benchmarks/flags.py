"""The flags the benchmark scripts share, each with one meaning and one help text:
``--threads``, ``--device``, ``--machine`` and ``--quick``; and the results folder ``--machine``
names.

A script adds the ones it takes, with its own default where it has one::

    from flags import add_flags, results_folder, set_threads
    add_flags(p, "threads", "device", "machine", "quick", threads=2)
    args = p.parse_args(argv)
    set_threads(args)

(A script in this folder imports this module by name: Python puts the script's folder on
``sys.path``; the tests put this folder there through ``pythonpath`` in pyproject.toml.)
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from transformer_book.cli.common import positive_int

RESULTS = Path(__file__).resolve().parent / "results"

#: name -> (argparse settings, what a script that sets no default of its own does)
FLAGS = {
    "threads": ({"type": positive_int, "metavar": "N",
                 "help": "CPU threads PyTorch computes with (torch.set_num_threads); 1 is "
                 "steadier on a busy machine"}, "PyTorch's choice, all cores"),
    "device": ({"help": "cpu, cuda, cuda:1, mps ..."},
               "$TRANSFORMER_BOOK_DEVICE, else CUDA when available"),
    "machine": ({"help": "where the results go: the folder benchmarks/results/MACHINE (e.g. "
                 "cpu-2026-11-24), or MACHINE itself when it is an absolute path"},
                "no file written"),
    "quick": ({"action": "store_true",
               "help": "a smoke test: tiny data, model and budget; seconds to run, and numbers "
               "that mean nothing"}, None),
}


def add_flags(p: argparse.ArgumentParser, *names: str, **defaults) -> None:
    """Add the shared flags ``names`` (keys of :data:`FLAGS`) to ``p``; ``defaults`` gives a
    script's own default for some of them (e.g. ``threads=2``, ``machine="local"``)."""
    unknown = set(defaults) - set(names)
    if unknown:
        raise TypeError(f"defaults for flags not added: {', '.join(sorted(unknown))}")
    for name in names:
        spec, otherwise = FLAGS[name]
        spec = dict(spec)
        if name in defaults:
            spec["default"] = otherwise = defaults[name]
        if otherwise is not None:
            spec["help"] += f" (default: {otherwise})"
        p.add_argument(f"--{name}", **spec)


def set_threads(args: argparse.Namespace) -> None:
    """``torch.set_num_threads(args.threads)`` when ``--threads`` was given."""
    if args.threads:
        torch.set_num_threads(args.threads)


def results_folder(machine: str | None) -> Path | None:
    """The folder ``--machine`` names (None: no folder)."""
    if machine is None:
        return None
    return Path(machine) if Path(machine).is_absolute() else RESULTS / machine
