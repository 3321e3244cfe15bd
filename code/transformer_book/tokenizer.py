"""A joint German+English subword vocabulary (byte-pair encoding), as in Sec. 5.1 of the paper:
8,000 tokens by default, learnt from the *training* lines only, with the Hugging Face
``tokenizers`` library (chapter 8 explains the pipeline). Word boundaries are stored in the tokens
(``"▁"``), so decoding gives ordinary text for sacreBLEU: ``decode(encode(s))`` is
``" ".join(s.split())``.

Special tokens have fixed ids: ``<pad>`` = 0 (``TransformerConfig.pad_id``), ``<bos>`` = 1,
``<eos>`` = 2, ``<unk>`` = 3. :meth:`SubwordTokenizer.encode` adds none of them; the batching
code adds ``<bos>``/``<eos>`` where the model needs them.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

import tokenizers
from tokenizers import Regex, decoders, models, normalizers, pre_tokenizers, trainers

from transformer_book.files import atomic_write

SPECIAL_TOKENS = ("<pad>", "<bos>", "<eos>", "<unk>")
PAD, BOS, EOS, UNK = SPECIAL_TOKENS
#: Bump when the pipeline below changes, so cached vocabularies are retrained.
_PIPELINE_VERSION = 1


def _new_bpe() -> tokenizers.Tokenizer:
    tok = tokenizers.Tokenizer(models.BPE(unk_token=UNK))
    tok.normalizer = normalizers.Sequence(
        [normalizers.NFC(), normalizers.Replace(Regex(r"\s+"), " "), normalizers.Strip()]
    )
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always"),
            pre_tokenizers.Punctuation("isolated"),
        ]
    )
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    return tok


class SubwordTokenizer:
    """A trained BPE vocabulary with the book's special tokens and batch helpers.

    Args:
        tokenizer: a ``tokenizers.Tokenizer`` whose first four ids are ``<pad>``, ``<bos>``,
            ``<eos>``, ``<unk>`` (as :meth:`train` makes them).

    Raises:
        ValueError: the special tokens are missing or have other ids.
    """

    def __init__(self, tokenizer: tokenizers.Tokenizer):
        for expected_id, token in enumerate(SPECIAL_TOKENS):
            if tokenizer.token_to_id(token) != expected_id:
                raise ValueError(
                    f"special token {token} must have id {expected_id}, found "
                    f"{tokenizer.token_to_id(token)}; train the tokenizer with SubwordTokenizer.train"
                )
        self.backend = tokenizer

    pad_id = 0  # <pad>, = TransformerConfig.pad_id
    bos_id = 1  # <bos>, the first decoder input
    eos_id = 2  # <eos>, ends every sentence
    unk_id = 3  # <unk>, for characters unseen in training

    @property
    def vocab_size(self) -> int:
        """Number of ids, special tokens included (use for src/tgt_vocab_size)."""
        return self.backend.get_vocab_size()

    def __len__(self) -> int:
        return self.vocab_size

    def __repr__(self) -> str:
        return f"SubwordTokenizer(BPE, vocab_size={self.vocab_size})"

    @classmethod
    def train(
        cls, texts: Iterable[str], vocab_size: int = 8000, min_frequency: int = 2, *,
        length: int | None = None,
    ) -> SubwordTokenizer:
        """Learn a BPE vocabulary from ``texts`` (deterministic: same texts, same vocabulary).

        Args:
            texts: training sentences, German and English together for a joint vocabulary; any
                iterable, e.g. a generator over a corpus too large to hold as a list: the
                ``tokenizers`` trainer reads it once, in batches, and keeps only word counts.
            vocab_size: target number of ids, special tokens included.
            min_frequency: a pair must occur this often to be merged.
            length: the number of sentences, if known (only a hint for the trainer).
        """
        if vocab_size <= len(SPECIAL_TOKENS):
            raise ValueError(f"vocab_size must exceed {len(SPECIAL_TOKENS)}, got {vocab_size}")
        # Streamed, not materialised: a corpus of millions of sentences passes through once.
        texts = iter(texts)
        first = next(texts, None)
        if first is None:
            raise ValueError("cannot train a tokenizer on no text")
        texts = itertools.chain([first], texts)
        tok = _new_bpe()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            min_frequency=min_frequency,
            special_tokens=list(SPECIAL_TOKENS),
            show_progress=False,
        )
        tok.train_from_iterator(texts, trainer=trainer, length=length)
        return cls(tok)

    def encode(self, text: str) -> list[int]:
        """Token ids of one sentence, without ``<bos>``/``<eos>``."""
        return self.backend.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids of many sentences (computed in parallel by ``tokenizers``)."""
        return [e.ids for e in self.backend.encode_batch(list(texts), add_special_tokens=False)]

    def tokens(self, text: str) -> list[str]:
        """The subword strings of one sentence, e.g. ``["▁Zwei", "▁Männer", "."]``."""
        return self.backend.encode(text, add_special_tokens=False).tokens

    def _strip(self, ids: Sequence[int]) -> list[int]:
        ids = [int(i) for i in ids]
        if self.eos_id in ids:  # everything after <eos> is padding or noise
            ids = ids[: ids.index(self.eos_id)]
        return [i for i in ids if i not in (self.pad_id, self.bos_id)]

    def decode(self, ids: Sequence[int]) -> str:
        """Detokenised text: stops at the first ``<eos>``, drops ``<pad>``/``<bos>``/``<unk>``."""
        return self.backend.decode(self._strip(ids), skip_special_tokens=True)

    def decode_batch(self, batch: Iterable[Sequence[int]]) -> list[str]:
        """:meth:`decode` for each sequence (e.g. the lists returned by the decoders)."""
        return self.backend.decode_batch([self._strip(ids) for ids in batch],
                                         skip_special_tokens=True)

    def to_str(self) -> str:
        """The whole tokenizer (pipeline, vocabulary, merges) as JSON."""
        return self.backend.to_str()

    def save(self, path: str | os.PathLike) -> None:
        """Write the tokenizer as JSON, atomically (:func:`~transformer_book.files.atomic_write`:
        a crash mid-write never leaves a truncated file in the cache)."""
        with atomic_write(path) as f:
            f.write(self.to_str().encode("utf-8"))

    @classmethod
    def load(cls, path: str | os.PathLike) -> SubwordTokenizer:
        """Read a tokenizer written by :meth:`save`."""
        return cls(tokenizers.Tokenizer.from_file(str(path)))

    @classmethod
    def from_str(cls, text: str) -> SubwordTokenizer:
        """Rebuild a tokenizer from :meth:`to_str` (e.g. stored in a checkpoint)."""
        return cls(tokenizers.Tokenizer.from_str(text))


def cache_key(texts: Iterable[str], vocab_size: int, min_frequency: int) -> str:
    """A short hash of the training text and every setting that changes the vocabulary (the
    text is streamed through the hash, never held)."""
    digest = hashlib.sha256()
    for line in texts:
        digest.update(line.encode("utf-8"))
        digest.update(b"\n")
    settings = {
        "vocab_size": vocab_size,
        "min_frequency": min_frequency,
        "pipeline": _PIPELINE_VERSION,
        "tokenizers": tokenizers.__version__,
    }
    digest.update(json.dumps(settings, sort_keys=True).encode())
    return digest.hexdigest()[:16]


def _texts(corpus) -> tuple[Callable[[], Iterator[str]], int | None]:
    """A function giving a fresh pass over the corpus's sentences, and their number if known.

    A :class:`~transformer_book.data.ParallelCorpus` gives all its source lines, then all its
    target lines (the order :func:`cache_key` has always hashed, so cached vocabularies stay
    valid); any other re-iterable of (source, target) pairs, e.g. a
    :class:`~transformer_book.corpus.PairStream`, gives each pair's two sentences in turn.
    """
    if hasattr(corpus, "src") and hasattr(corpus, "tgt"):
        return (lambda: itertools.chain(corpus.src, corpus.tgt)), 2 * len(corpus)
    try:
        length = 2 * len(corpus)
    except TypeError:  # a stream of unknown length
        length = None
    return (lambda: (text for pair in corpus for text in pair)), length


def load_or_train_tokenizer(
    corpus=None,
    *,
    vocab_size: int = 8000,
    min_frequency: int = 2,
    cache_dir: str | os.PathLike | None = None,
    data_dir: str | os.PathLike | None = None,
) -> SubwordTokenizer:
    """The joint de+en BPE tokenizer of Multi30k's training split, trained once and cached.

    Args:
        corpus: a :class:`~transformer_book.data.ParallelCorpus` to learn from, or any
            re-iterable of (source, target) pairs (e.g. a streamed Hugging Face dataset); by
            default the Multi30k training split (loaded with ``data_dir``). Streamed, never
            held: one pass computes the cache key, a second (on a cache miss) trains.
        vocab_size, min_frequency: see :meth:`SubwordTokenizer.train`.
        cache_dir: where trained tokenizers are kept; defaults to
            ``<user cache>/transformer_book/tokenizers``. The file name holds
            :func:`cache_key`, so other data or settings never reuse a stale vocabulary.
        data_dir: passed to :func:`~transformer_book.data.load_multi30k`.

    Returns:
        The tokenizer, read from the cache when present, else trained and written there.
    """
    from transformer_book.data import default_cache_dir, load_multi30k

    if corpus is None:
        corpus = load_multi30k("train", data_dir)
    texts, length = _texts(corpus)
    key = cache_key(texts(), vocab_size, min_frequency)
    folder = Path(cache_dir) if cache_dir is not None else default_cache_dir().parent / "tokenizers"
    path = folder / f"bpe-{vocab_size}-{key}.json"
    if path.is_file():
        return SubwordTokenizer.load(path)
    tokenizer = SubwordTokenizer.train(texts(), vocab_size=vocab_size,
                                       min_frequency=min_frequency, length=length)
    tokenizer.save(path)
    return tokenizer
