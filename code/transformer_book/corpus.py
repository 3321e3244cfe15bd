"""Bring your own corpus: parallel UTF-8 files, one sentence per line, or a Hugging Face
dataset (:func:`~transformer_book.hf_dataset.hf_translation_pairs`, re-exported); and the
tokenised, batched corpus that training reads (Sec. 5.1).

:func:`load_parallel_text` gives the same :class:`ParallelCorpus` as
:func:`~transformer_book.data.load_multi30k`, so everything downstream works unchanged.
:func:`encode_pairs` tokenises a stream of pairs into compact :class:`TokenIds` and
:func:`prepare_corpus` batches them by token budget; every corpus the package trains on,
Multi30k included, is prepared this way.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np

from transformer_book.batching import BatchedCorpus
from transformer_book.data import CorpusError, ParallelCorpus
from transformer_book.files import NotUTF8Error, utf8_lines
from transformer_book.hf_dataset import PairStream, hf_translation_pairs  # noqa: F401 (re-exported)
from transformer_book.tokenizer import SubwordTokenizer, load_or_train_tokenizer

__all__ = ["CompactBatchedCorpus", "CorpusError", "PairStream", "TokenIds", "encode_pairs",
           "hf_translation_pairs", "iter_parallel_text", "load_parallel_text",
           "prepare_corpus", "prepare_run_data"]


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
        try:
            yield from utf8_lines(f)
        except NotUTF8Error as err:
            raise CorpusError(f"{path}, line {err.line}: not UTF-8 (byte {err.byte:#04x} at "
                              f"column {err.column}); convert the file, e.g. with "
                              f"`iconv -f latin1 -t utf-8`") from None


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


# --------------------------------------------------------------------------- compact token ids

def id_dtype(vocab_size: int) -> np.dtype:
    """The smallest integer type that holds every id: uint16 up to 65,536 ids, else int32."""
    return np.dtype(np.uint16) if vocab_size <= 1 << 16 else np.dtype(np.int32)


class TokenIds(Sequence):
    """The token ids of many sentences in one flat array: sentence ``i`` is
    ``flat[offsets[i]:offsets[i + 1]]``, and ``ids[i]`` gives it as a list of ints.

    A list of lists costs about 36 bytes per token (an 8-byte pointer and a 28-byte int above
    256); this costs 2 (uint16, :func:`id_dtype`) plus 8 bytes of offset per sentence.
    """

    def __init__(self, flat: np.ndarray, offsets: np.ndarray):
        flat, offsets = np.asarray(flat), np.asarray(offsets)
        if flat.ndim != 1 or offsets.ndim != 1 or len(offsets) == 0 or offsets[0] != 0 \
                or offsets[-1] != len(flat) or (len(offsets) > 1 and np.any(np.diff(offsets) < 0)):
            raise ValueError("offsets must rise from 0 to len(flat), both one-dimensional")
        self.flat, self.offsets = flat, offsets

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i):
        if isinstance(i, slice):
            raise TypeError("TokenIds takes one index at a time")
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"sentence {i} of {n}")
        i = int(i) % n
        return self.flat[self.offsets[i]:self.offsets[i + 1]].tolist()

    @property
    def lengths(self) -> np.ndarray:
        """Number of ids of each sentence."""
        return np.diff(self.offsets)

    @property
    def nbytes(self) -> int:
        """Bytes held by the two arrays."""
        return self.flat.nbytes + self.offsets.nbytes

    def __repr__(self) -> str:
        return f"TokenIds({len(self):,} sentences, {len(self.flat):,} ids, {self.flat.dtype})"


class _Growing:
    """A flat id array and its offsets, grown chunk by chunk (amortised doubling)."""

    def __init__(self, dtype: np.dtype):
        self.flat = np.empty(1 << 16, dtype=dtype)
        self.size = 0
        self.lengths: list[np.ndarray] = []

    def extend(self, seqs: list[list[int]]) -> None:
        lengths = np.fromiter((len(s) for s in seqs), dtype=np.int64, count=len(seqs))
        total = int(lengths.sum())
        while self.size + total > len(self.flat):
            self.flat = np.resize(self.flat, 2 * len(self.flat))
        self.flat[self.size:self.size + total] = np.fromiter(
            itertools.chain.from_iterable(seqs), dtype=self.flat.dtype, count=total)
        self.size += total
        self.lengths.append(lengths)

    def done(self) -> TokenIds:
        lengths = np.concatenate(self.lengths) if self.lengths else np.zeros(0, np.int64)
        offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        return TokenIds(self.flat[:self.size].copy(), offsets)


def encode_pairs(tokenizer, pairs: Iterable[tuple[str, str]], *, max_len: int | None = None,
                 limit: int | None = None, chunk_size: int = 8192) -> tuple[TokenIds, TokenIds]:
    """Tokenise an iterable of (source, target) strings into two :class:`TokenIds`,
    ``chunk_size`` pairs at a time: only the compact ids are kept, never the whole text.
    ``max_len``: drop pairs with a side of more subwords; ``limit``: read only the first pairs.
    """
    dtype = id_dtype(tokenizer.vocab_size)
    src, tgt = _Growing(dtype), _Growing(dtype)
    pairs = iter(pairs) if limit is None else itertools.islice(pairs, limit)
    while chunk := list(itertools.islice(pairs, chunk_size)):
        x = tokenizer.encode_batch([s for s, _ in chunk])
        y = tokenizer.encode_batch([t for _, t in chunk])
        if max_len is not None:
            keep = [i for i in range(len(x)) if len(x[i]) <= max_len and len(y[i]) <= max_len]
            x, y = [x[i] for i in keep], [y[i] for i in keep]
        src.extend(x)
        tgt.extend(y)
    return src.done(), tgt.done()


class CompactBatchedCorpus(BatchedCorpus):
    """A :class:`~transformer_book.batching.BatchedCorpus` over :class:`TokenIds`, kept as
    given (not copied into one list per sentence): the same batches, in the same order."""

    @staticmethod
    def _keep(ids: TokenIds) -> TokenIds:
        return ids

    @staticmethod
    def _lengths(ids: TokenIds) -> list[int]:
        # lengths below 257 are Python's shared small ints: 8 bytes per sentence in these lists
        return ids.lengths.tolist()


def prepare_corpus(tokenizer, pairs: Iterable[tuple[str, str]], max_tokens: int, *,
                   shuffle: bool = True, seed: int = 0, max_len: int | None = None,
                   limit: int | None = None, widths: Sequence[int] | None = None
                   ) -> CompactBatchedCorpus:
    """Tokenise sentence pairs and batch them by token budget (Sec. 5.1).

    The pairs are tokenised by streaming (:func:`encode_pairs`) into compact arrays, so a
    corpus of any size fits; the batches are those of a
    :class:`~transformer_book.batching.BatchedCorpus` of the same ids.

    Args:
        tokenizer: a :class:`~transformer_book.tokenizer.SubwordTokenizer`.
        pairs: a :class:`~transformer_book.data.ParallelCorpus` or any iterable of (source,
            target) strings (e.g. a :class:`~transformer_book.hf_dataset.PairStream` over a
            Hugging Face dataset).
        max_tokens: padded tokens per batch.
        shuffle, seed, widths: see :class:`~transformer_book.batching.BatchedCorpus`.
        max_len: drop pairs whose source or target has more subwords (None keeps all).
        limit: use only the first ``limit`` pairs (before dropping long ones).

    Raises:
        CorpusError: no pair is left (an empty corpus, or every pair longer than ``max_len``).
    """
    src, tgt = encode_pairs(tokenizer, pairs, max_len=max_len, limit=limit)
    if len(src) == 0:
        what = getattr(pairs, "name", "the corpus")
        longer = f" (every pair has a side longer than {max_len} subwords)" if max_len else ""
        raise CorpusError(f"{what}: no sentence pairs to train on{longer}")
    return CompactBatchedCorpus(src, tgt, max_tokens, pad_id=tokenizer.pad_id,
                                bos_id=tokenizer.bos_id, eos_id=tokenizer.eos_id,
                                shuffle=shuffle, seed=seed, widths=widths)


class RunData(NamedTuple):
    """What a training run reads: the tokenizer, and the batched training and validation data."""

    tokenizer: SubwordTokenizer
    train: CompactBatchedCorpus
    val: CompactBatchedCorpus | None


def prepare_run_data(train_pairs: Iterable[tuple[str, str]],
                     val_pairs: Iterable[tuple[str, str]] | None, *, max_tokens: int,
                     max_len: int, seed: int = 0, tokenizer: SubwordTokenizer | None = None,
                     vocab_size: int = 8000, limit: int | None = None) -> RunData:
    """The tokenizer and the batches a run trains and validates on (Sec. 5.1).

    Args:
        train_pairs, val_pairs: iterables of (source, target) strings; ``val_pairs=None``: no
            validation data.
        max_tokens: padded tokens per batch.
        max_len: the model's; a training pair with a side longer than ``max_len - 2`` subwords
            (room for ``<bos>`` / ``<eos>``) is left out.
        seed: the order of the training batches; validation keeps the corpus's order.
        tokenizer: None: the joint BPE vocabulary of ``vocab_size`` pieces learned on all of
            ``train_pairs`` (:func:`~transformer_book.tokenizer.load_or_train_tokenizer`).
        limit: train on the first ``limit`` pairs only (the tokenizer still learns from all).
    """
    if tokenizer is None:
        tokenizer = load_or_train_tokenizer(train_pairs, vocab_size=vocab_size)
    train = prepare_corpus(tokenizer, train_pairs, max_tokens, seed=seed, max_len=max_len - 2,
                           limit=limit)
    val = (None if val_pairs is None
           else prepare_corpus(tokenizer, val_pairs, max_tokens, shuffle=False))
    return RunData(tokenizer, train, val)
