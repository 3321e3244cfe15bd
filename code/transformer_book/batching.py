"""Batches by token budget, sentences grouped by length (Sec. 5.1 of the paper).

"Sentence pairs were batched together by approximate sequence length. Each training batch
contained a set of sentence pairs containing approximately 25000 source tokens and 25000 target
tokens." A fixed number of *sentences* per batch would waste compute on padding and give batches
of very different sizes in tokens; a fixed *token budget* with sentences of similar length keeps
both the padding and the work per step nearly constant.

Here the budget counts padded positions: a batch of ``B`` pairs whose longest source (with
``<eos>``) has ``S`` tokens and longest target (with ``<bos>``/``<eos>`` shift) ``T`` tokens
costs ``B * max(S, T)``, which bounds the memory of both encoder and decoder.

Layout of one pair, with ``x`` the source ids and ``y`` the target ids::

    src     = x + [<eos>]          (B, S)  padded with <pad>
    tgt_in  = [<bos>] + y          (B, T)  what the decoder reads (shifted right, Sec. 3.1)
    tgt_out = y + [<eos>]          (B, T)  what it must predict at each position
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass
class Batch:
    """One padded batch of sentence pairs.

    Attributes:
        src: source ids ending in ``<eos>``, padded with ``pad_id``. Shape (B, S).
        tgt_in: ``<bos>`` + target ids, the decoder input. Shape (B, T).
        tgt_out: target ids + ``<eos>``, the labels. Shape (B, T).
        pad_id: the padding id used.
    """

    src: torch.Tensor
    tgt_in: torch.Tensor
    tgt_out: torch.Tensor
    pad_id: int = 0

    @property
    def num_tgt_tokens(self) -> int:
        """Number of labels that count in the loss (non-padding positions of ``tgt_out``)."""
        return int((self.tgt_out != self.pad_id).sum())

    @property
    def num_src_tokens(self) -> int:
        """Number of non-padding source positions."""
        return int((self.src != self.pad_id).sum())

    def to(self, device: torch.device | str) -> Batch:
        """The same batch on ``device``."""
        return Batch(self.src.to(device), self.tgt_in.to(device), self.tgt_out.to(device),
                     self.pad_id)


def pad_sequences(seqs: Sequence[Sequence[int]], pad_id: int) -> torch.Tensor:
    """Stack lists of ids into a (B, L) long tensor, right-padded with ``pad_id``."""
    if len(seqs) == 0:
        raise ValueError("cannot pad an empty list of sequences")
    width = max(len(s) for s in seqs)
    out = torch.full((len(seqs), width), pad_id, dtype=torch.long)
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
) -> Batch:
    """Build one :class:`Batch` from token ids without special tokens.

    Args:
        src_ids, tgt_ids: ``B`` source and target id lists (e.g. from
            :meth:`~transformer_book.tokenizer.SubwordTokenizer.encode_batch`).
        pad_id, bos_id, eos_id: the special ids (the tokenizer's defaults).

    Returns:
        A batch with ``src`` (B, S), ``tgt_in`` (B, T) and ``tgt_out`` (B, T).
    """
    if len(src_ids) != len(tgt_ids):
        raise ValueError(f"{len(src_ids)} sources but {len(tgt_ids)} targets")
    src = pad_sequences([list(x) + [eos_id] for x in src_ids], pad_id)  # (B, S)
    tgt_in = pad_sequences([[bos_id] + list(y) for y in tgt_ids], pad_id)  # (B, T)
    tgt_out = pad_sequences([list(y) + [eos_id] for y in tgt_ids], pad_id)  # (B, T)
    return Batch(src, tgt_in, tgt_out, pad_id)


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
        if width > max_tokens:
            raise ValueError(
                f"example {i} needs {width} tokens, more than max_tokens={max_tokens}; "
                "drop long sentences first or raise max_tokens"
            )
        if current and (len(current) + 1) * max(longest, width) > max_tokens:
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
        max_tokens: padded positions per batch (see :func:`token_budget_batches`).
        pad_id, bos_id, eos_id: special ids.
        shuffle: shuffle for training; ``False`` gives a fixed order for evaluation.
        seed: base seed; epoch ``e`` uses ``seed + e``, so a resumed run sees the same batches.
    """

    def __init__(self, src_ids, tgt_ids, max_tokens: int, *, pad_id: int = 0, bos_id: int = 1,
                 eos_id: int = 2, shuffle: bool = True, seed: int = 0):
        if len(src_ids) != len(tgt_ids):
            raise ValueError(f"{len(src_ids)} sources but {len(tgt_ids)} targets")
        if len(src_ids) == 0:
            raise ValueError("no sentence pairs to batch")
        self.src_ids, self.tgt_ids = list(src_ids), list(tgt_ids)
        self.max_tokens = max_tokens
        self.pad_id, self.bos_id, self.eos_id = pad_id, bos_id, eos_id
        self.shuffle, self.seed = shuffle, seed
        self._src_lens = [len(x) for x in self.src_ids]
        self._tgt_lens = [len(y) for y in self.tgt_ids]

    def __len__(self) -> int:
        """Number of examples."""
        return len(self.src_ids)

    def batch_indices(self, epoch: int = 0) -> list[list[int]]:
        """Example indices of each batch of ``epoch`` (deterministic)."""
        return token_budget_batches(self._src_lens, self._tgt_lens, self.max_tokens,
                                    shuffle=self.shuffle, seed=self.seed + epoch)

    def batches(self, epoch: int = 0, start: int = 0):
        """Yield the :class:`Batch` es of ``epoch``, skipping the first ``start`` (for resuming)."""
        for idx in self.batch_indices(epoch)[start:]:
            yield collate([self.src_ids[i] for i in idx], [self.tgt_ids[i] for i in idx],
                          pad_id=self.pad_id, bos_id=self.bos_id, eos_id=self.eos_id)

    def num_batches(self, epoch: int = 0) -> int:
        """Number of batches in ``epoch``."""
        return len(self.batch_indices(epoch))
