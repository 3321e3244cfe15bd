"""Command line: ``python -m transformer_book train|translate|bleu|plot ...``.

    python -m transformer_book train --preset small --epochs 10 --checkpoint-dir runs/small
    python -m transformer_book train --checkpoint-dir runs/small --resume --epochs 20
    echo "Ein Hund läuft über die Wiese." | \\
        python -m transformer_book translate --checkpoint runs/small/last.pt --beam-size 4
    python -m transformer_book bleu --checkpoint runs/small/last.pt --split test_2016_flickr
    python -m transformer_book plot runs/small      # curves from runs/small/metrics.jsonl

One module per command, each with ``add_parser`` and ``run``. Errors are one line on stderr,
``python -m transformer_book <command>: error: <what and what to do>``, exit status 2 for bad
arguments and 1 for failures (``--debug``: the traceback too); Ctrl-C during training writes a
checkpoint and exits with 130.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback

from transformer_book.cli import bleu, plot, train, translate
from transformer_book.cli.common import DEBUG_ENV, PROG, Parser, error_message

COMMANDS = {"train": train, "translate": translate, "bleu": bleu, "plot": plot}


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog=PROG, description="Train and use the book's Transformer.")
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS.values():
        command.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    debug = args.debug or os.environ.get(DEBUG_ENV, "") not in ("", "0")
    try:
        return COMMANDS[args.command].run(args)
    except BrokenPipeError:  # e.g. `translate ... | head`: the reader left, nothing to say
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except (Exception, KeyboardInterrupt) as exc:
        if debug:
            traceback.print_exc()
        message, status = error_message(exc)
        message = " ".join(str(message).split())  # one line, whatever the exception held
        rank = (f" (rank {os.environ.get('RANK')})"  # under torchrun: which process said it
                if os.environ.get("WORLD_SIZE", "1") not in ("", "1") else "")
        print(f"{PROG} {args.command}{rank}: error: {message}", file=sys.stderr)
        return status
