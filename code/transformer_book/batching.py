"""Batches by token budget, sentences grouped by length (Sec. 5.1, chapter 8).

A batch of ``B`` pairs costs ``B * max(S, T)`` padded positions (:func:`batch_cost`), which
bounds the memory of encoder and decoder. One pair, ``x`` the source ids, ``y`` the target ids::

    src     = x + [<eos>]          (B, S)  padded with <pad>
    tgt_in  = [<bos>] + y          (B, T)  what the decoder reads (shifted right, Sec. 3.1)
    tgt_out = y + [<eos>]          (B, T)  what it must predict at each position

For fast training (chapter 11), none changing the default batches: fixed-shape batches
(``BatchedCorpus(widths=...)``), ids checked on the host (:func:`check_token_ids`), copies to
the GPU started ahead (:func:`to_device_ahead`).
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import torch


@dataclass
class Batch:
    """One batch of sentence pairs, padded with ``pad_id``: ``src`` (B, S), ``tgt_in`` and
    ``tgt_out`` (B, T), laid out as the module docstring shows."""

    src: torch.Tensor
    tgt_in: torch.Tensor
    tgt_out: torch.Tensor
    pad_id: int = 0

    @property
    def num_tgt_tokens(self) -> int:
        """Number of labels that count in the loss (non-padding positions of ``tgt_out``)."""
        return int((self.tgt_out != self.pad_id).sum())

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Batch:
        """The same batch on ``device`` (``non_blocking``: an asynchronous copy when the batch
        is in pinned memory, see :meth:`pin_memory`)."""
        return Batch(self.src.to(device, non_blocking=non_blocking),
                     self.tgt_in.to(device, non_blocking=non_blocking),
                     self.tgt_out.to(device, non_blocking=non_blocking), self.pad_id)

    def pin_memory(self) -> Batch:
        """The same batch in page-locked host memory, for asynchronous copies (needs CUDA)."""
        return Batch(self.src.pin_memory(), self.tgt_in.pin_memory(), self.tgt_out.pin_memory(),
                     self.pad_id)


def check_token_ids(batch: Batch, src_vocab_size: int, tgt_vocab_size: int) -> None:
    """Raise ValueError if a batch holds an id outside its vocabulary: the model's own check,
    done while the batch is in host memory (a GPU tensor's min and max make the host wait)."""
    for name, tokens, vocab in (("src", batch.src, src_vocab_size),
                                ("tgt_in", batch.tgt_in, tgt_vocab_size),
                                ("tgt_out", batch.tgt_out, tgt_vocab_size)):
        _check_vocabulary(tokens, name, vocab)


def check_tokens(tokens: torch.Tensor, name: str, vocab_size: int, *, max_len: int,
                 offset: int = 0, check_ids: bool = True, max_len_is: str = "max_len") -> None:
    """Raise a clear error unless ``tokens`` is what a model's forward takes: a 2-D integer
    tensor ``(B, length)``, not empty, reaching at most position ``max_len`` (counting the
    ``offset`` positions decoded before it) and, with ``check_ids``, every id inside
    ``[0, vocab_size)`` (the Transformer's and the recurrent translator's input check).
    ``check_ids=False`` (or inside ``torch.compile``) skips the ids' range (checked on the host
    by :func:`check_token_ids`). ``max_len_is`` says what ``max_len`` bounds, for the message.
    Raises TypeError (not a tensor of integers) or ValueError (any other fault).
    """
    if not isinstance(tokens, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of token ids, got {type(tokens).__name__}")
    # dtype attributes, not Tensor.is_complex(): torch 2.3's dynamo cannot trace that call
    # under torch.compile(fullgraph=True)
    if tokens.dtype.is_floating_point or tokens.dtype.is_complex or tokens.dtype == torch.bool:
        raise TypeError(f"{name} must hold integer token ids, got dtype {tokens.dtype}")
    if tokens.dim() != 2:
        raise ValueError(f"{name} must have shape (B, length), got {tuple(tokens.shape)}")
    B, T = tokens.shape
    if B == 0 or T == 0:
        raise ValueError(f"{name} is empty (shape {tuple(tokens.shape)}): need B >= 1 and "
                         "length >= 1")
    if offset + T > max_len:
        raise ValueError(f"{name} reaches position {offset + T}, longer than max_len={max_len} "
                         f"({max_len_is}); truncate it or use a config with a larger max_len")
    if check_ids and not torch.compiler.is_compiling():
        _check_vocabulary(tokens, name, vocab_size)


def _check_vocabulary(tokens: torch.Tensor, name: str, vocab_size: int) -> None:
    low, high = int(tokens.min()), int(tokens.max())
    if low < 0 or high >= vocab_size:
        bad = low if low < 0 else high
        raise ValueError(f"{name} contains id {bad}, outside the vocabulary [0, {vocab_size})")


def to_device_ahead(batches: Iterable[Batch], device: torch.device | str,
                    ahead: int = 2) -> Iterator[tuple[Batch, Batch]]:
    """Yield ``(host batch, device batch)`` pairs, the copies started ``ahead`` batches early.

    On CUDA each batch is pinned and copied with ``non_blocking=True``, overlapping the GPU's
    work; elsewhere each is moved as it comes. The host batch counts tokens without a GPU read.
    """
    device = torch.device(device)
    if device.type != "cuda":
        for batch in batches:
            yield batch, batch.to(device)
        return
    queue: deque[tuple[Batch, Batch]] = deque()
    for batch in batches:
        queue.append((batch, batch.pin_memory().to(device, non_blocking=True)))
        if len(queue) > ahead:
            yield queue.popleft()
    while queue:
        yield queue.popleft()


def device_batches(batches: Iterable[Batch], device: torch.device | str, *, ahead: bool,
                   model=None) -> Iterator[tuple[Batch, Batch]]:
    """``(host batch, device batch)`` pairs for a training loop, each batch copied when needed;
    with ``ahead``, checked on the host against ``model.config``'s vocabularies and copied ahead
    (:func:`to_device_ahead`), ``model.check_token_ids`` off meanwhile and restored after."""
    if not ahead:
        for batch in batches:
            yield batch, batch.to(device)
        return
    config = getattr(model, "config", None)
    vocab = getattr(config, "src_vocab_size", None)

    def checked():
        for batch in batches:
            if vocab is not None:
                check_token_ids(batch, config.src_vocab_size, config.tgt_vocab_size)
            yield batch

    before = getattr(model, "check_token_ids", None)
    if before is not None:
        model.check_token_ids = vocab is None  # checked here instead
    try:
        yield from to_device_ahead(checked(), device)
    finally:
        if before is not None:
            model.check_token_ids = before


def pad_sequences(seqs: Sequence[Sequence[int]], pad_id: int, width: int | None = None,
                  rows: int | None = None) -> torch.Tensor:
    """Stack lists of ids into a (B, L) long tensor, right-padded with ``pad_id``.

    ``width`` / ``rows`` pad to a fixed L / B (default: the longest sequence / their number);
    the extra rows are all padding.
    """
    if len(seqs) == 0:
        raise ValueError("cannot pad an empty list of sequences")
    longest = max(len(s) for s in seqs)
    width = longest if width is None else width
    rows = len(seqs) if rows is None else rows
    if width < longest or rows < len(seqs):
        raise ValueError(f"{len(seqs)} sequences of up to {longest} ids do not fit in "
                         f"({rows}, {width})")
    out = torch.full((rows, width), pad_id, dtype=torch.long)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = torch.as_tensor(list(s), dtype=torch.long)
    return out


def collate(
    src_ids: Sequence[Sequence[int]],
    tgt_ids: Sequence[Sequence[int]],
    *,
    pad_id: int = 0,
    bos_id: int = 1,
    eos_id: int = 2,
    width: int | None = None,
    rows: int | None = None,
) -> Batch:
    """Build one :class:`Batch` from token ids without special tokens.

    Args:
        src_ids, tgt_ids: ``B`` source and target id lists (e.g. from
            :meth:`~transformer_book.tokenizer.SubwordTokenizer.encode_batch`).
        pad_id, bos_id, eos_id: the special ids (the tokenizer's defaults).
        width, rows: pad to a fixed shape (rows, width) on both sides (default: as small as
            the sentences allow).

    Returns:
        A batch with ``src`` (B, S), ``tgt_in`` (B, T) and ``tgt_out`` (B, T).
    """
    if len(src_ids) != len(tgt_ids):
        raise ValueError(f"{len(src_ids)} sources but {len(tgt_ids)} targets")
    src = pad_sequences([list(x) + [eos_id] for x in src_ids], pad_id, width, rows)  # (B, S)
    tgt_in = pad_sequences([[bos_id] + list(y) for y in tgt_ids], pad_id, width, rows)  # (B, T)
    tgt_out = pad_sequences([list(y) + [eos_id] for y in tgt_ids], pad_id, width, rows)  # (B, T)
    return Batch(src, tgt_in, tgt_out, pad_id)


def bucket_width(width: int, widths: Sequence[int] | None) -> int:
    """The smallest of ``widths`` that holds ``width`` (``width`` itself when ``widths`` is None).

    Raises:
        ValueError: ``width`` exceeds every bucket.
    """
    if widths is None:
        return width
    fitting = [w for w in widths if w >= width]
    if not fitting:
        raise ValueError(f"a sentence needs {width} positions, more than the largest bucket "
                         f"{max(widths)}; add a wider bucket or drop long sentences")
    return min(fitting)


def batch_cost(src_lens: Sequence[int], tgt_lens: Sequence[int]) -> int:
    """Padded positions of a batch: ``B * max(S, T)`` with ``S``/``T`` counting the specials."""
    return len(src_lens) * max(max(src_lens) + 1, max(tgt_lens) + 1)


def token_budget_batches(
    src_lens: Sequence[int],
    tgt_lens: Sequence[int],
    max_tokens: int,
    *,
    shuffle: bool = True,
    seed: int = 0,
    widths: Sequence[int] | None = None,
) -> list[list[int]]:
    """Group example indices into batches of similar length under a token budget.

    The examples are put in a random order (``seed``), then *stably* sorted by length, so equal
    lengths stay shuffled; consecutive examples are packed while the batch's padded size
    (:func:`batch_cost`) stays within ``max_tokens``; finally the batch order is shuffled.
    With ``shuffle=False`` the order is by length, then by index (for evaluation).

    Args:
        src_lens, tgt_lens: token counts of each example, without special tokens.
        max_tokens: budget of padded positions per batch.
        shuffle: shuffle within equal lengths and across batches.
        seed: seed of that shuffling (use e.g. ``seed + epoch`` for a new order each epoch).
        widths: pad widths of fixed-shape batches (see :func:`bucket_width`); the budget then
            counts each example at its bucket's width, so a batch never exceeds it when padded.

    Returns:
        Lists of example indices; every index appears exactly once.

    Raises:
        ValueError: an example alone exceeds the budget (filter long sentences, or raise it).
    """
    if len(src_lens) != len(tgt_lens):
        raise ValueError(f"{len(src_lens)} source lengths but {len(tgt_lens)} target lengths")
    rng = random.Random(seed)
    order = list(range(len(src_lens)))
    if shuffle:
        rng.shuffle(order)
    order.sort(key=lambda i: max(src_lens[i], tgt_lens[i]))  # stable: ties keep the shuffle
    batches: list[list[int]] = []
    current: list[int] = []
    longest = 0  # padded width of the current batch
    for i in order:
        width = max(src_lens[i], tgt_lens[i]) + 1  # +1: <eos> on src, <bos>/<eos> on tgt
        width = bucket_width(width, widths)
        if width > max_tokens:
            raise ValueError(
                f"example {i} needs {width} tokens, more than max_tokens={max_tokens}; "
                "drop long sentences first or raise max_tokens"
            )
        if current and (
            (len(current) + 1) * max(longest, width) > max_tokens
            or (widths is not None and width != longest)  # one bucket per batch
        ):
            batches.append(current)
            current, longest = [], 0
        current.append(i)
        longest = max(longest, width)
    if current:
        batches.append(current)
    if shuffle:
        rng.shuffle(batches)
    return batches


class BatchedCorpus:
    """Tokenised sentence pairs that hand out token-budget batches, a new order per epoch.

    Args:
        src_ids, tgt_ids: token ids of each pair, without special tokens.
        max_tokens, shuffle: see :func:`token_budget_batches` (``shuffle=False``: evaluation).
        seed: base seed; epoch ``e`` uses ``seed + e``, so a resumed run sees the same batches.
        widths: e.g. ``(16, 32, 64)``: every batch padded to ``(max_tokens // W, W)`` on both
            sides, ``W`` the smallest width that holds its sentences, so the model sees only
            ``len(widths)`` shapes (for ``torch.compile`` and CUDA graphs). None: as narrow as
            the sentences allow.
    """

    def __init__(self, src_ids, tgt_ids, max_tokens: int, *, pad_id: int = 0, bos_id: int = 1,
                 eos_id: int = 2, shuffle: bool = True, seed: int = 0,
                 widths: Sequence[int] | None = None):
        if len(src_ids) != len(tgt_ids):
            raise ValueError(f"{len(src_ids)} sources but {len(tgt_ids)} targets")
        if len(src_ids) == 0:
            raise ValueError("no sentence pairs to batch")
        self.src_ids, self.tgt_ids = self._keep(src_ids), self._keep(tgt_ids)
        self.max_tokens = max_tokens
        self.pad_id, self.bos_id, self.eos_id = pad_id, bos_id, eos_id
        self.shuffle, self.seed = shuffle, seed
        self.widths = None if widths is None else tuple(sorted(widths))
        self._src_lens = self._lengths(self.src_ids)
        self._tgt_lens = self._lengths(self.tgt_ids)

    @staticmethod
    def _keep(ids) -> Sequence:
        """The ids as this corpus holds them: a list of its own (the caller's list may change)."""
        return list(ids)

    @staticmethod
    def _lengths(ids) -> list[int]:
        """The number of ids of each sentence."""
        return [len(x) for x in ids]

    def __len__(self) -> int:
        """Number of examples."""
        return len(self.src_ids)

    def batch_indices(self, epoch: int = 0) -> list[list[int]]:
        """Example indices of each batch of ``epoch`` (deterministic)."""
        return token_budget_batches(self._src_lens, self._tgt_lens, self.max_tokens,
                                    shuffle=self.shuffle, seed=self.seed + epoch,
                                    widths=self.widths)

    def batches(self, epoch: int = 0, start: int = 0, *, positions: Sequence[int] | None = None):
        """Yield the :class:`Batch` es of ``epoch``, skipping the first ``start`` (for resuming).

        ``positions``: instead, only the batches at these positions of the epoch's order, in
        the order given (one process's share of a multi-process run; a position may repeat).
        """
        order = self.batch_indices(epoch)
        chosen = order[start:] if positions is None else [order[p] for p in positions]
        for idx in chosen:
            width = rows = None
            if self.widths is not None:
                longest = max(max(self._src_lens[i], self._tgt_lens[i]) for i in idx) + 1
                width = bucket_width(longest, self.widths)
                rows = self.max_tokens // width
            yield collate([self.src_ids[i] for i in idx], [self.tgt_ids[i] for i in idx],
                          pad_id=self.pad_id, bos_id=self.bos_id, eos_id=self.eos_id,
                          width=width, rows=rows)

    def target_tokens(self, epoch: int = 0) -> list[int]:
        """Each batch's :attr:`Batch.num_tgt_tokens` in ``epoch``, without building the batches."""
        return [sum(self._tgt_lens[i] + 1 for i in idx) for idx in self.batch_indices(epoch)]

    def num_batches(self, epoch: int = 0) -> int:
        """Number of batches in ``epoch``."""
        return len(self.batch_indices(epoch))
