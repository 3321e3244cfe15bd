"""What the commands share: argument types, flags built from a config dataclass, checks of
paths and devices, and errors (one line on stderr, with its exit status)."""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import typing
from pathlib import Path

from transformer_book.config import in_interval

PROG = "python -m transformer_book"
DEBUG_ENV = "TRANSFORMER_BOOK_DEBUG"


class UsageError(Exception):
    """A bad argument: one line on stderr, exit status 2."""

    status = 2


class CLIError(Exception):
    """A failure while running: one line on stderr, exit status 1 (or ``status``)."""

    def __init__(self, message: str, status: int = 1):
        super().__init__(message)
        self.status = status


def warn(command: str, message: str) -> None:
    print(f"{PROG} {command}: warning: {message}", file=sys.stderr)


# --------------------------------------------------------------------------- parsing


class Parser(argparse.ArgumentParser):
    """argparse, with its error as one line (no usage block) and exit status 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def number_in(interval: str, kind: type = float):
    """An argparse type: a number of type ``kind`` in ``interval``, written as in mathematics:
    ``"[1, inf)"`` (a positive integer), ``"(0, inf)"``, ``"[0, 1)"``."""
    low_open = interval[0] == "("
    low, high = (float(x) for x in interval[1:-1].split(","))

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            what = "an integer" if kind is int else "a number"
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if in_interval(value, interval):
            return value
        if kind is int and not low_open and high == math.inf:
            what = "a positive integer" if low == 1 else f"an integer >= {low:g}"
            raise argparse.ArgumentTypeError(f"must be {what}, got {value}")
        raise argparse.ArgumentTypeError(f"must be in {interval}, got {text}")

    parse.__name__ = kind.__name__  # argparse names the type in some messages
    return parse


positive_int = number_in("[1, inf)", int)


def add_common(p) -> None:
    p.add_argument("--device", help="cpu, cuda, cuda:1, mps ... (default: CUDA when available)")
    add_debug(p)


def add_debug(p) -> None:
    p.add_argument("--debug", action="store_true",
                   help=f"show the traceback of an error (or set {DEBUG_ENV}=1)")


# --------------------------------------------------------------------------- config flags


def flag_name(name: str) -> str:
    """The flag of a config field: ``max_tokens`` -> ``--max-tokens``."""
    return "--" + name.replace("_", "-")


def config_fields(cls, *, flag: bool | None = None, resume: bool | None = None) -> list[str]:
    """The fields of the config dataclass ``cls`` whose metadata (see
    :func:`transformer_book.config._setting`) has the given ``flag`` / ``resume`` value."""
    return [f.name for f in dataclasses.fields(cls)
            if (flag is None or bool(f.metadata.get("flag")) == flag)
            and (resume is None or bool(f.metadata.get("resume")) == resume)]


def add_config_flags(p, cls, names) -> None:
    """Add ``--NAME`` for each field of ``cls`` in ``names``, help, type and valid values from
    its metadata, default None (left out: the config's or the checkpoint's value stays)."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for name in names:
        field, meta = fields[name], fields[name].metadata
        kind = field_type(cls, name)
        shown = "" if field.default is None or kind is bool else f" (default: {field.default})"
        kwargs = {"help": meta["help"] + shown}
        if kind is bool:  # --NAME / --no-NAME; left out: the config's (or checkpoint's) value
            kwargs.update(action=argparse.BooleanOptionalAction, default=None)
        elif isinstance(meta.get("valid"), tuple):
            kwargs["choices"] = meta["valid"]
        else:
            kwargs["type"] = number_in(meta["valid"], kind) if meta.get("valid") else kind
        if meta.get("metavar"):
            kwargs["metavar"] = meta["metavar"]
        p.add_argument(flag_name(name), **kwargs)


def field_type(cls, name: str) -> type:
    """The type of the dataclass field ``cls.name`` (``int | None`` -> ``int``)."""
    hint = typing.get_type_hints(cls)[name]
    return next(t for t in (*typing.get_args(hint), hint) if t is not type(None))


def add_override_flags(p, cls, names) -> None:
    """Add ``--NAME`` for each field of ``cls`` (a model config) in ``names``, typed as the field
    (a bool: ``--NAME`` / ``--no-NAME``), default None: left out, the preset's value stays."""
    for name in names:
        kind = field_type(cls, name)
        if kind is bool:
            p.add_argument(flag_name(name), action=argparse.BooleanOptionalAction, default=None,
                           help="override the preset's value")
        else:
            p.add_argument(flag_name(name), type=kind, metavar=name.upper(),
                           help="override the preset's value")


def given_settings(args, names) -> dict:
    """The settings among ``names`` that the command line gives (flags left out are None)."""
    return {n: getattr(args, n) for n in names if getattr(args, n, None) is not None}


# --------------------------------------------------------------------------- checks


def check_device(name: str | None) -> None:
    if name is None:
        return
    import torch

    try:
        device = torch.device(name)
    except (RuntimeError, ValueError):
        raise UsageError(f"--device {name}: not a device name; use cpu, cuda, cuda:0 or mps") \
            from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise UsageError(f"--device {name}: CUDA is not available on this machine; "
                             "use --device cpu")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise UsageError(f"--device {name}: this machine has {torch.cuda.device_count()} "
                             "CUDA device(s)")
    elif device.type == "mps" and not torch.backends.mps.is_available():
        raise UsageError(f"--device {name}: MPS is not available on this machine; "
                         "use --device cpu")


def check_data_dir(folder: str | None) -> None:
    if folder is not None and not Path(folder).is_dir():
        raise UsageError(f"--data-dir {folder}: no such folder")


# --------------------------------------------------------------------------- errors


def error_message(exc: BaseException) -> tuple[str, int]:
    """One line saying what went wrong (and what to do), and the exit status."""
    from transformer_book.corpus import CorpusError
    from transformer_book.data import Multi30kError
    from transformer_book.files import CheckpointError, CheckpointWriteError, DirectoryLockedError

    if isinstance(exc, UsageError | CLIError):
        return str(exc), exc.status
    if isinstance(exc, CheckpointWriteError):
        return exc.strerror, 1
    if isinstance(exc, CheckpointError | DirectoryLockedError | Multi30kError | CorpusError
                  | FloatingPointError):
        return str(exc), 1
    if isinstance(exc, OSError):
        where = f"{exc.filename}: " if exc.filename else ""
        return f"{where}{exc.strerror or exc}", 1
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted", 130
    return (f"unexpected {type(exc).__name__}: {exc}; run again with --debug for the "
            "traceback, and please report it"), 1
