"""A Hugging Face translation dataset as the corpus, streamed: the way to train on the paper's
own data, WMT 2014 (Sec. 5.1). Needs the optional ``datasets`` package
(``pip install 'transformer-book[hf]'``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from transformer_book.data import CorpusError

__all__ = ["HF_INSTALL", "PairStream", "hf_translation_pairs", "languages"]

HF_INSTALL = "pip install 'transformer-book[hf]'"


class PairStream:
    """(source, target) pairs, ``open_pairs()`` read afresh on every pass, never all held at
    once; ``name`` is shown in errors. A pass that yields no pair raises CorpusError."""

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
        raise CorpusError("reading a Hugging Face dataset needs the `datasets` package, which is "
                          f"not installed; install it with {HF_INSTALL}") from None
    return datasets


def languages(config: str | None, src_lang: str | None, tgt_lang: str | None) -> tuple[str, str]:
    """The (source, target) language keys: those given, else the config's (``"de-en"``: German
    -> English); CorpusError when a key is missing and the config names no two languages."""
    if src_lang and tgt_lang:
        return src_lang, tgt_lang
    parts = (config or "").split("-")
    if len(parts) == 2 and all(parts):  # "de-en": the book's direction, German -> English
        return src_lang or parts[0], tgt_lang or parts[1]
    said = "no config names them" if config is None else f"the config {config!r} does not name them"
    raise CorpusError(f"give the source and target language ({said} as e.g. 'de-en')")


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split()) or type(err).__name__


def _open_hf_split(datasets, dataset: str, config: str | None, split: str, streaming: bool):
    """The split as a datasets.Dataset (memory-mapped Arrow) or IterableDataset (streamed)."""
    where = f"Hugging Face dataset {dataset}" + (f" ({config})" if config else "")
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
                                  "choose one of these splits")
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
                                      f"{src!r} and {tgt!r}; choose the source and target "
                                      "languages among them")
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
    ``{"translation": {"de": ..., "en": ...}}`` (or with a ``"de"`` and an ``"en"`` column),
    never all held at once. ``dataset`` may also be a local folder: written by ``save_to_disk``
    (read memory-mapped), or of data files ``load_dataset`` reads (e.g. ``train.jsonl``).

    Args:
        dataset, config, split: as ``datasets.load_dataset`` takes them (``"wmt14"``, ``"de-en"``).
        src_lang, tgt_lang: the source and target keys (default: from a config like ``"de-en"``).
        streaming: False downloads and caches the whole split first (``datasets``' default).

    Raises:
        CorpusError: ``datasets`` is missing, the dataset or split cannot be loaded (at once),
            or its rows do not hold the two languages (while iterating).
    """
    datasets = _import_datasets()
    src, tgt = languages(config, src_lang, tgt_lang)
    name = f"Hugging Face dataset {dataset}" + (f" ({config})" if config else "") + f", split {split}"

    # opened now, so a wrong name or split is reported before any work; each pass iterates it
    # afresh (a streamed IterableDataset restarts from its first row)
    ds = _open_hf_split(datasets, dataset, config, split, streaming)
    return PairStream(lambda: _hf_rows(ds, name, src, tgt), name=name, src_lang=src,
                      tgt_lang=tgt)
