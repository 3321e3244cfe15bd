"""``python -m transformer_book plot RUN_DIR``: chapter 8's curves (training and validation
loss, learning rate) from a run's ``metrics.jsonl``, into an image file."""

from __future__ import annotations

from pathlib import Path

from transformer_book.cli.common import CLIError, UsageError, add_debug


def add_parser(sub) -> None:
    p = sub.add_parser("plot", help="draw a run's curves from its metrics.jsonl",
                       description="Draw the training and validation loss and the learning rate "
                       "of a run, as chapter 8 does, from RUN_DIR/metrics.jsonl (written by "
                       "train beside its checkpoints).")
    p.add_argument("run_dir", metavar="RUN_DIR", help="a train --checkpoint-dir")
    p.add_argument("--out", help="image file to write (default RUN_DIR/curves.png)")
    add_debug(p)


def run(args) -> int:
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
        raise CLIError(f"{e} (train --checkpoint-dir)") from None
    print(out)
    return 0
