"""Sec. 5.4: the loss, cross-entropy against label-smoothed targets (eps_ls = 0.1); with
``smoothing=0``, the plain cross-entropy that validation reports.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor


def label_smoothing_loss(
    logits: Tensor,
    target: Tensor,
    smoothing: float = 0.1,
    pad_id: int | None = 0,
    reduction: str = "mean",
) -> Tensor:
    """Sec. 5.4: cross-entropy against a smoothed target distribution (Szegedy et al., 2016).

    Instead of the one-hot target, the model is trained towards

        q(k) = (1 - eps) * [k == y] + eps / V      for every class k of V,

    i.e. a mixture of the one-hot vector and the uniform distribution over *all* V classes
    (the true class included), exactly the definition of Szegedy et al. (2016) that the paper
    cites, and of ``nn.CrossEntropyLoss(label_smoothing=eps)``. The loss is the cross-entropy
    H(q, p) = -sum_k q(k) log p(k) = (1 - eps) * NLL + eps * mean_k(-log p(k)).
    It can never reach 0: its minimum is the entropy of q (see :func:`smoothed_loss_floor`);
    the model is pushed to be less confident, which "hurts perplexity ... but improves accuracy
    and BLEU score" (Sec. 5.4). (The Annotated Transformer spreads eps over the V - 2 classes
    that are neither the true one nor padding, a slightly different distribution.)

    Args:
        logits: unnormalised scores. Shape (..., V).
        target: class ids. Shape (...), matching ``logits`` without its last dimension.
        smoothing: eps_ls, in [0, 1); 0 gives the ordinary cross-entropy.
        pad_id: targets equal to this id do not count (None: every position counts).
        reduction: ``"mean"`` (over counted positions), ``"sum"`` or ``"none"`` (per position,
            zeros at padding).

    Returns:
        The loss, a scalar (mean/sum) or of ``target``'s shape (none). Computed in float32.
    """
    if not 0.0 <= smoothing < 1.0:
        raise ValueError(f"smoothing must be in [0, 1), got {smoothing}")
    if logits.shape[:-1] != target.shape:
        raise ValueError(
            f"logits {tuple(logits.shape)} and target {tuple(target.shape)} do not match: "
            "expected logits (..., V) and target (...)"
        )
    log_probs = F.log_softmax(logits.float(), dim=-1)  # (..., V), float32 even under autocast
    safe_target = target if pad_id is None else target.masked_fill(target == pad_id, 0)
    nll = -log_probs.gather(-1, safe_target.unsqueeze(-1)).squeeze(-1)  # (...)
    uniform = -log_probs.mean(dim=-1)  # (...), cross-entropy against the uniform distribution
    loss = (1.0 - smoothing) * nll + smoothing * uniform
    keep = torch.ones_like(target, dtype=torch.bool) if pad_id is None else target != pad_id
    loss = loss * keep
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    if reduction == "mean":
        return loss.sum() / keep.sum().clamp(min=1)
    raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def smoothed_loss_floor(vocab_size: int, smoothing: float = 0.1) -> float:
    """The smallest value :func:`label_smoothing_loss` can take: the entropy of q (in nats)."""
    if smoothing == 0:
        return 0.0
    top = 1.0 - smoothing + smoothing / vocab_size
    rest = smoothing / vocab_size
    return -(top * math.log(top) + (vocab_size - 1) * rest * math.log(rest))
