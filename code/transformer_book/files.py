"""Files the package writes and reads (not in the paper): atomic writes (:func:`atomic_write`),
UTF-8 text line by line (:func:`utf8_lines`), and a lock that keeps two training runs out of one
folder (:class:`DirectoryLock`)."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

BOM = b"\xef\xbb\xbf"  # the UTF-8 byte-order mark some editors put at the start of a file


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike) -> Iterator[BinaryIO]:
    """A binary file to write ``path`` through; it replaces ``path`` only once complete.

    The temporary file (``.NAME.PID.RANDOM.tmp`` beside ``path``, the folder created if
    missing) gets mode 0o666 minus the umask, like any new file, and is synced to disk before
    ``os.replace`` moves it over ``path``. If anything fails, or the block raises (Ctrl-C
    included), the temporary file is removed and ``path`` keeps its previous content; an
    OSError goes to the caller, who names the cause.
    """
    path = Path(path)
    tmp = path.parent / f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0),
                 0o666)  # the umask applies, as for any file the user creates
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise


def write_json(path: str | os.PathLike, data) -> None:
    """``data`` as indented JSON (one space, a final newline), through :func:`atomic_write`."""
    with atomic_write(path) as f:
        f.write((json.dumps(data, indent=1) + "\n").encode())


class CheckpointError(ValueError):
    """A checkpoint file cannot be used; the message says why and what to do."""


class CheckpointWriteError(OSError):
    """A checkpoint could not be written (disk full, permission denied, ...); the previous
    file at that path, if any, is intact."""


class DirectoryLockedError(RuntimeError):
    """Another process holds the lock of a folder."""


class NotUTF8Error(ValueError):
    """A line holds a byte that is not UTF-8: ``line`` and ``column`` (from 1), ``byte``."""

    def __init__(self, line: int, column: int, byte: int):
        super().__init__(f"line {line}: byte {byte:#04x} at column {column} is not UTF-8")
        self.line, self.column, self.byte = line, column, byte


def utf8_lines(lines: Iterable[bytes], *, errors: str = "strict",
               replaced: Callable[[int], None] | None = None) -> Iterator[str]:
    """Decode lines of bytes (e.g. a file opened in binary mode) as UTF-8, each without its
    line end (``\\n`` or ``\\r\\n``) and nothing else stripped; a leading byte-order mark is
    dropped. ``errors="strict"``: :class:`NotUTF8Error` at the first bad byte; ``"replace"``:
    such bytes become U+FFFD and ``replaced(line_number)`` is called."""
    if errors not in ("strict", "replace"):
        raise ValueError(f"errors must be 'strict' or 'replace', got {errors!r}")
    for number, raw in enumerate(lines, start=1):
        raw = raw.removesuffix(b"\n").removesuffix(b"\r")
        if number == 1:
            raw = raw.removeprefix(BOM)
        try:
            yield raw.decode("utf-8")
        except UnicodeDecodeError as err:
            if errors == "strict":
                raise NotUTF8Error(number, err.start + 1, raw[err.start]) from None
            if replaced is not None:
                replaced(number)
            yield raw.decode("utf-8", errors="replace")


# --------------------------------------------------------------------------- locking


class DirectoryLock:
    """An exclusive OS lock on ``folder/.lock`` for as long as a training run writes there.

    ``fcntl.flock`` (Linux, macOS) or ``msvcrt.locking`` (Windows): the OS releases it when the
    process ends in any way, ``kill -9`` included, so a stale lock file never blocks a later run
    (on network file systems, ``flock`` may only see processes of the same machine).
    :meth:`acquire` raises DirectoryLockedError when another process holds the lock.
    """

    def __init__(self, folder: str | os.PathLike):
        self.path = Path(folder) / ".lock"
        self._fd: int | None = None

    def acquire(self) -> DirectoryLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            _lock(fd)
        except OSError:
            holder = ""
            with contextlib.suppress(OSError), open(self.path) as f:
                holder = f.read().strip()
            os.close(fd)
            raise DirectoryLockedError(
                f"{self.path.parent} is in use by another training run"
                f"{f' ({holder})' if holder else ''}; wait for it to finish, stop it, or choose "
                "another folder"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()} on {socket.gethostname()} since "
                     f"{time.strftime('%Y-%m-%d %H:%M:%S')}".encode())
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, 0)
            os.close(self._fd)  # closing releases the lock
            self._fd = None

    def __enter__(self) -> DirectoryLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def _lock(fd: int) -> None:
    try:
        import fcntl
    except ImportError:  # Windows
        import msvcrt

        os.lseek(fd, 0, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
    else:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
