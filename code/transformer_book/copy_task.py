"""Chapter 1's toy task for :class:`~transformer_book.rnn.Seq2Seq`: copy or reverse a sequence of
random tokens, with a minimal training loop and its metric. Shapes are batch first.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["copy_task_batch", "token_accuracy", "train_seq2seq"]


def copy_task_batch(
    batch_size: int,
    length: int,
    vocab_size: int,
    *,
    reverse: bool = False,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A batch of the toy copy (or reverse) task: the target is the source, in (reverse) order.

    Token 0 is BOS; source symbols are drawn uniformly from ``1 .. vocab_size - 1``. All
    sequences share one length: no padding.

    Args:
        batch_size: number of sequences ``B``.
        length: sequence length (the same for source and target).
        vocab_size: number of token ids, including the BOS id 0.
        reverse: if True the target is the source reversed.
        generator: random generator, for reproducible batches.

    Returns:
        ``(src, tgt_in, tgt_out)``, each (B, length) ``torch.long``: the source, the decoder
        input (BOS then the target shifted right) and the target.
    """
    if batch_size < 1 or length < 1:
        raise ValueError(f"batch_size and length must be positive, got {batch_size}, {length}")
    if vocab_size < 2:
        raise ValueError(f"vocab_size must be at least 2 (BOS and one symbol), got {vocab_size}")
    src = torch.randint(1, vocab_size, (batch_size, length), generator=generator)
    tgt_out = src.flip(1) if reverse else src.clone()
    bos = torch.zeros(batch_size, 1, dtype=torch.long)
    tgt_in = torch.cat([bos, tgt_out[:, :-1]], dim=1)
    return src, tgt_in, tgt_out


def train_seq2seq(
    model: nn.Module,
    steps: int,
    lengths: tuple[int, int],
    *,
    batch_size: int = 64,
    lr: float = 3e-3,
    reverse: bool = False,
    seed: int = 0,
) -> list[float]:
    """Train ``model`` on the copy (or reverse) task with Adam and teacher forcing.

    Each step draws a length uniformly from ``lengths[0] .. lengths[1]`` (inclusive) and a batch
    of that length, from a generator seeded with ``seed``.

    Args:
        model: the model to train (in place).
        steps: number of optimizer steps.
        lengths: the shortest and longest training length.
        batch_size: sequences per step.
        lr: Adam learning rate.
        reverse: train on the reverse task instead of the copy task.
        seed: seed of the data generator.

    Returns:
        the training loss (cross-entropy per token, in nats) of every step.
    """
    lo, hi = lengths
    if not 1 <= lo <= hi:
        raise ValueError(f"lengths must satisfy 1 <= lo <= hi, got {lengths}")
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    model.train()
    losses = []
    for _ in range(steps):
        length = int(torch.randint(lo, hi + 1, (1,), generator=gen))
        src, tgt_in, tgt_out = copy_task_batch(
            batch_size, length, model.vocab_size, reverse=reverse, generator=gen
        )
        logits = model(src, tgt_in)  # (B, L, vocab)
        loss = F.cross_entropy(logits.flatten(0, 1), tgt_out.flatten())
        opt.zero_grad()
        loss.backward()
        # Clipping keeps the occasional exploding gradient of a recurrent net from derailing
        # training (Pascanu et al., 2013).
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
    model.eval()
    return losses


@torch.no_grad()
def token_accuracy(
    model: nn.Module,
    length: int,
    *,
    num_sequences: int = 256,
    reverse: bool = False,
    seed: int = 1234,
) -> float:
    """Fraction of target tokens that greedy decoding gets right, at one sequence length.

    Args:
        model: a trained model.
        length: the source (and target) length to test.
        num_sequences: how many random test sequences.
        reverse: test the reverse task instead of the copy task.
        seed: seed of the test-data generator (keep it apart from the training seed).

    Returns:
        the accuracy, between 0 and 1.
    """
    gen = torch.Generator().manual_seed(seed + length)
    src, _, tgt_out = copy_task_batch(
        num_sequences, length, model.vocab_size, reverse=reverse, generator=gen
    )
    pred = model.greedy_decode(src, length)
    return (pred == tgt_out).float().mean().item()
