"""Bring your own corpus: parallel plain-text files, one sentence per line, or a Hugging Face
dataset; and a compact tokenised corpus for corpora of millions of pairs (issue 19).

``load_parallel_text("train.de", "train.en")`` gives the same :class:`ParallelCorpus` that
:func:`~transformer_book.data.load_multi30k` gives for Multi30k, so everything downstream
(tokenizer, batching, training, BLEU) works unchanged. The two files are read side by side, line
by line (:func:`iter_parallel_text` streams them without holding either in memory), and every way
they can be wrong stops with one line naming the file and the line: a missing file, bytes that are
not UTF-8, an empty file, files of different lengths.

A Hugging Face translation dataset (``wmt14`` ``de-en``, or a local folder) is read with
:func:`hf_translation_pairs`, streamed, when the optional ``datasets`` package is installed
(``pip install 'transformer-book[hf]'``).

For a corpus that large the token ids matter more than the text: as Python lists of lists they
cost about 36 bytes per token (WMT 2014 en-de, ~280M subwords, would need ~10 GB).
:func:`encode_pairs` tokenises a stream of pairs chunk by chunk into :class:`TokenIds`, one
flat uint16 array plus offsets (2 bytes per token), and :func:`prepare_compact_corpus` batches
it exactly as :func:`~transformer_book.train.prepare_corpus` batches lists.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np

from transformer_book.batching import BatchedCorpus
from transformer_book.data import ParallelCorpus

__all__ = ["CompactBatchedCorpus", "CorpusError", "PairStream", "TokenIds", "encode_pairs",
           "hf_translation_pairs", "iter_parallel_text", "load_parallel_text",
           "prepare_compact_corpus"]


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


# --------------------------------------------------------------------------- compact token ids

def id_dtype(vocab_size: int) -> np.dtype:
    """The smallest integer type that holds every id: uint16 up to 65,536 ids, else int32."""
    return np.dtype(np.uint16) if vocab_size <= 1 << 16 else np.dtype(np.int32)


class TokenIds(Sequence):
    """The token ids of many sentences in one flat array: sentence ``i`` is
    ``flat[offsets[i]:offsets[i + 1]]``.

    A Python list of lists costs about 36 bytes per token on a 64-bit machine (an 8-byte pointer
    and a 28-byte int object for every id above 256); this costs the id's own 2 bytes (uint16,
    see :func:`id_dtype`) plus 8 bytes of offset per *sentence*. ``ids[i]`` gives sentence ``i``
    as a list of ints, so code written for lists of lists (:func:`~transformer_book.batching.
    collate`) reads it unchanged. :meth:`save` / :meth:`load` keep it in two ``.npy`` files that
    load memory-mapped, so a corpus larger than memory is paged in from disk as batches need it.
    """

    def __init__(self, flat: np.ndarray, offsets: np.ndarray):
        # (np.asarray would turn a memory map from load() into a plain view of it)
        flat = flat if isinstance(flat, np.ndarray) else np.asarray(flat)
        offsets = offsets if isinstance(offsets, np.ndarray) else np.asarray(offsets)
        if flat.ndim != 1 or offsets.ndim != 1 or len(offsets) == 0 or offsets[0] != 0 \
                or offsets[-1] != len(flat) or (len(offsets) > 1 and np.any(np.diff(offsets) < 0)):
            raise ValueError("offsets must rise from 0 to len(flat), both one-dimensional")
        self.flat, self.offsets = flat, offsets

    @classmethod
    def from_lists(cls, seqs: Iterable[Sequence[int]], vocab_size: int = 1 << 16) -> TokenIds:
        """Pack id lists (e.g. from ``encode_batch``) into one array of :func:`id_dtype`."""
        seqs = list(seqs)
        lengths = np.fromiter((len(s) for s in seqs), dtype=np.int64, count=len(seqs))
        flat = np.fromiter(itertools.chain.from_iterable(seqs), dtype=id_dtype(vocab_size),
                           count=int(lengths.sum()))
        return cls(flat, np.concatenate([[0], np.cumsum(lengths)]))

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

    def save(self, folder: str | os.PathLike) -> None:
        """Write ``ids.npy`` and ``offsets.npy`` into ``folder``, each atomically."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        for name, array in (("ids", self.flat), ("offsets", self.offsets)):
            tmp = folder / f".{name}.{os.getpid()}.{os.urandom(4).hex()}.npy"
            try:
                np.save(tmp, array)
                os.replace(tmp, folder / f"{name}.npy")
            finally:
                tmp.unlink(missing_ok=True)

    @classmethod
    def load(cls, folder: str | os.PathLike, mmap: bool = True) -> TokenIds:
        """Read what :meth:`save` wrote; ``mmap=True`` maps the ids from disk instead of reading."""
        folder = Path(folder)
        mode = "r" if mmap else None
        return cls(np.load(folder / "ids.npy", mmap_mode=mode),
                   np.load(folder / "offsets.npy", mmap_mode=mode))


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
    """Tokenise (source, target) pairs into two :class:`TokenIds`, streaming.

    The pairs are read ``chunk_size`` at a time and encoded (in parallel, by ``tokenizers``);
    only the compact ids are kept, so the raw text need never be in memory all at once.

    Args:
        tokenizer: a :class:`~transformer_book.tokenizer.SubwordTokenizer`.
        pairs: any iterable of (source, target) strings: a ParallelCorpus, a :class:`PairStream`.
        max_len: drop pairs whose source or target has more subwords (None keeps all), as
            :func:`~transformer_book.train.prepare_corpus` does.
        limit: read only the first ``limit`` pairs (before dropping long ones).
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
    """A :class:`~transformer_book.batching.BatchedCorpus` over :class:`TokenIds`: the same
    batches, in the same order, from ~2 bytes per token instead of ~36.

    (``BatchedCorpus.__init__`` copies its inputs with ``list()``, which would unpack the compact
    ids into one list per sentence; this keeps them as given. The rest is inherited.)
    """

    def __init__(self, src_ids: TokenIds, tgt_ids: TokenIds, max_tokens: int, *,
                 pad_id: int = 0, bos_id: int = 1, eos_id: int = 2, shuffle: bool = True,
                 seed: int = 0, widths: Sequence[int] | None = None):
        if len(src_ids) != len(tgt_ids):
            raise ValueError(f"{len(src_ids)} sources but {len(tgt_ids)} targets")
        if len(src_ids) == 0:
            raise ValueError("no sentence pairs to batch")
        self.src_ids, self.tgt_ids = src_ids, tgt_ids
        self.max_tokens = max_tokens
        self.pad_id, self.bos_id, self.eos_id = pad_id, bos_id, eos_id
        self.shuffle, self.seed = shuffle, seed
        self.widths = None if widths is None else tuple(sorted(widths))
        # lengths below 257 are Python's shared small ints: 8 bytes per sentence in these lists
        self._src_lens = src_ids.lengths.tolist()
        self._tgt_lens = tgt_ids.lengths.tolist()


def prepare_compact_corpus(tokenizer, pairs: Iterable[tuple[str, str]], max_tokens: int, *,
                           shuffle: bool = True, seed: int = 0, max_len: int | None = None,
                           limit: int | None = None) -> CompactBatchedCorpus:
    """:func:`~transformer_book.train.prepare_corpus` for corpora of any size: the same batches,
    tokenised by streaming (:func:`encode_pairs`) into compact arrays.

    Args:
        pairs: a ParallelCorpus or any iterable of (source, target) strings (e.g. a
            :class:`PairStream` over a Hugging Face dataset).
        limit: use only the first ``limit`` pairs (``train --train-limit``).

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
                                shuffle=shuffle, seed=seed)


# --------------------------------------------------------------------------- Hugging Face datasets

HF_INSTALL = "pip install 'transformer-book[hf]'"


class PairStream:
    """(source, target) pairs read afresh on every pass, never all held at once.

    Args:
        open_pairs: a function returning a new iterator over the pairs.
        name: shown in errors, e.g. ``"wmt14 de-en, split train"``.
        src_lang, tgt_lang: language codes.

    Raises (while iterating):
        CorpusError: a pass yields no pair at all.
    """

    def __init__(self, open_pairs: Callable[[], Iterable[tuple[str, str]]], *, name: str,
                 src_lang: str = "src", tgt_lang: str = "tgt"):
        self.open_pairs, self.name = open_pairs, name
        self.src_lang, self.tgt_lang = src_lang, tgt_lang

    def __iter__(self) -> Iterator[tuple[str, str]]:
        empty = True
        for pair in self.open_pairs():
            empty = False
            yield pair
        if empty:
            raise CorpusError(f"{self.name}: no sentence pairs; a corpus needs at least one")

    def __repr__(self) -> str:
        return f"PairStream({self.name}, {self.src_lang}->{self.tgt_lang})"


def _import_datasets():
    try:
        import datasets
    except ImportError:
        raise CorpusError("--hf-dataset needs the Hugging Face `datasets` package, which is not "
                          f"installed; install it with {HF_INSTALL}") from None
    return datasets


def _languages(config: str | None, src_lang: str | None, tgt_lang: str | None) -> tuple[str, str]:
    if src_lang and tgt_lang:
        return src_lang, tgt_lang
    parts = (config or "").split("-")
    if len(parts) == 2 and all(parts):  # "de-en": the book's direction, German -> English
        return src_lang or parts[0], tgt_lang or parts[1]
    said = "no config names them" if config is None else f"the config {config!r} does not name them"
    raise CorpusError(f"--hf-src/--hf-tgt: give the source and target language ({said} as e.g. "
                      "'de-en')")


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split()) or type(err).__name__


def _open_hf_split(datasets, dataset: str, config: str | None, split: str, streaming: bool):
    """The split as a datasets.Dataset (memory-mapped Arrow) or IterableDataset (streamed)."""
    where = f"--hf-dataset {dataset}" + (f" --hf-config {config}" if config else "")
    folder = Path(dataset)
    if folder.is_dir() and ((folder / "dataset_dict.json").is_file()
                            or (folder / "state.json").is_file()):  # from save_to_disk
        try:
            loaded = datasets.load_from_disk(str(folder))
        except Exception as err:
            raise CorpusError(f"{where}: cannot be read ({_one_line(err)})") from None
        if isinstance(loaded, datasets.DatasetDict):
            if split not in loaded:
                raise CorpusError(f"{where}: no split {split!r} (it has {', '.join(loaded)}); "
                                  "choose one with --hf-split / --hf-valid-split")
            loaded = loaded[split]
        return loaded
    try:
        return datasets.load_dataset(dataset, config, split=split, streaming=streaming)
    except Exception as err:
        raise CorpusError(f"{where}, split {split}: cannot be loaded ({_one_line(err)})") from None


def _hf_rows(ds, name: str, src: str, tgt: str,
             batch_size: int = 1024) -> Iterator[tuple[str, str]]:
    row = 0
    for batch in ds.iter(batch_size=batch_size):
        if "translation" in batch:
            pairs = []
            for t in batch["translation"]:
                if src not in t or tgt not in t:
                    raise CorpusError(f"{name}: its translations are in {sorted(t)}, not both "
                                      f"{src!r} and {tgt!r}; choose --hf-src/--hf-tgt among them")
                pairs.append((t[src], t[tgt]))
        elif src in batch and tgt in batch:
            pairs = zip(batch[src], batch[tgt], strict=True)
        else:
            raise CorpusError(f"{name}: no 'translation' column and no columns {src!r} and "
                              f"{tgt!r} (its columns: {', '.join(batch)})")
        for s, t in pairs:
            if not isinstance(s, str) or not isinstance(t, str):
                raise CorpusError(f"{name}, row {row}: the text is {s!r} -> {t!r}, not two "
                                  "strings")
            row += 1
            yield s, t


def hf_translation_pairs(dataset: str, config: str | None = None, *, split: str = "train",
                         src_lang: str | None = None, tgt_lang: str | None = None,
                         streaming: bool = True) -> PairStream:
    """The (source, target) pairs of a Hugging Face translation dataset, streamed.

    ``hf_translation_pairs("wmt14", "de-en")`` reads rows like
    ``{"translation": {"de": ..., "en": ...}}`` (or rows with a ``"de"`` and an ``"en"``
    column) with ``datasets.load_dataset(..., streaming=True)``: nothing is downloaded ahead and
    no row is kept after it is read, so a corpus of millions of pairs fits. ``dataset`` may also
    be a local folder: one written by ``Dataset.save_to_disk`` / ``DatasetDict.save_to_disk``
    (read memory-mapped with ``datasets.load_from_disk``), or one of data files that
    ``load_dataset`` understands (e.g. ``train.jsonl``, ``validation.jsonl``).

    Needs the optional ``datasets`` package (``pip install 'transformer-book[hf]'``).

    Args:
        dataset, config: as ``datasets.load_dataset`` takes them, e.g. ``"wmt14"``, ``"de-en"``.
        split: e.g. ``"train"``, ``"validation"``.
        src_lang, tgt_lang: the source and target keys; by default read from a config such as
            ``"de-en"`` (German -> English).
        streaming: False downloads and caches the whole split first (``datasets``' default).

    Raises:
        CorpusError: ``datasets`` is not installed, the dataset or split cannot be loaded
            (raised at once), or its rows do not hold the two languages (raised while
            iterating); each in one line, what to do named.
    """
    datasets = _import_datasets()
    src, tgt = _languages(config, src_lang, tgt_lang)
    name = f"--hf-dataset {dataset}" + (f" {config}" if config else "") + f", split {split}"

    # opened now, so a wrong name or split is reported before any work; each pass iterates it
    # afresh (a streamed IterableDataset restarts from its first row)
    ds = _open_hf_split(datasets, dataset, config, split, streaming)
    return PairStream(lambda: _hf_rows(ds, name, src, tgt), name=name, src_lang=src,
                      tgt_lang=tgt)
