"""Bring your own corpus: parallel plain-text files, one sentence per line (issue 19).

``load_parallel_text("train.de", "train.en")`` gives the same :class:`ParallelCorpus` that
:func:`~transformer_book.data.load_multi30k` gives for Multi30k, so everything downstream
(tokenizer, batching, training, BLEU) works unchanged. The two files are read side by side, line
by line (:func:`iter_parallel_text` streams them without holding either in memory), and every way
they can be wrong stops with one line naming the file and the line: a missing file, bytes that are
not UTF-8, an empty file, files of different lengths.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from pathlib import Path

from transformer_book.data import ParallelCorpus

__all__ = ["CorpusError", "iter_parallel_text", "load_parallel_text"]


class CorpusError(ValueError):
    """A parallel text file is missing, unreadable, not UTF-8, empty, or of the wrong length."""


def _lines(path: Path) -> Iterator[str]:
    """The lines of ``path`` without their line ends; a clear error for bytes that are not UTF-8."""
    try:
        f = open(path, "rb")  # closed by the with below; bytes, to name the line a bad byte is on
    except FileNotFoundError:
        raise CorpusError(f"{path}: no such file; give the path of a UTF-8 text file, one sentence "
                          "per line") from None
    except OSError as err:
        raise CorpusError(f"{path}: cannot be read ({err.strerror})") from None
    with f:
        for number, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                raise CorpusError(f"{path}, line {number}: not UTF-8 (byte {raw[err.start]:#04x} at "
                                  f"column {err.start + 1}); convert the file, e.g. with "
                                  f"`iconv -f latin1 -t utf-8`") from None
            yield line.rstrip("\r\n") if number > 1 else line.rstrip("\r\n").removeprefix("\ufeff")


def iter_parallel_text(src_path: str | os.PathLike, tgt_path: str | os.PathLike
                       ) -> Iterator[tuple[str, str]]:
    """(source, target) sentence pairs of two parallel files, streamed line by line.

    Raises:
        CorpusError: a file is missing or unreadable, a line is not UTF-8 (file and line number
            named), or one file ends before the other (both line counts named).
    """
    src_path, tgt_path = Path(src_path), Path(tgt_path)
    sentinel = object()
    count = 0
    for src, tgt in itertools.zip_longest(_lines(src_path), _lines(tgt_path), fillvalue=sentinel):
        if src is sentinel or tgt is sentinel:
            short, long_ = (src_path, tgt_path) if src is sentinel else (tgt_path, src_path)
            raise CorpusError(f"{short} has {count:,} lines but {long_} has more; parallel files "
                              "need one sentence per line on both sides, in the same order")
        count += 1
        yield src, tgt


def load_parallel_text(src_path: str | os.PathLike, tgt_path: str | os.PathLike, *,
                       name: str = "train", src_lang: str = "src", tgt_lang: str = "tgt"
                       ) -> ParallelCorpus:
    """Read two parallel UTF-8 files into a :class:`ParallelCorpus` (line ends removed).

    Raises:
        CorpusError: as :func:`iter_parallel_text`, and for files with no line at all.
    """
    src, tgt = [], []
    for s, t in iter_parallel_text(src_path, tgt_path):
        src.append(s)
        tgt.append(t)
    if not src:
        raise CorpusError(f"{src_path} and {tgt_path} are empty; a corpus needs at least one "
                          "sentence pair")
    return ParallelCorpus(name=name, src_lang=src_lang, tgt_lang=tgt_lang, src=src, tgt=tgt)
