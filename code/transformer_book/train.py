"""Training the Transformer (Sec. 5 of the paper): every name chapters and scripts import, in one
place. Each lives in the module its name says:

- Sec. 5.4, label smoothing with eps_ls = 0.1: :mod:`transformer_book.loss`
  (:func:`label_smoothing_loss`, :func:`smoothed_loss_floor`).
- Sec. 5.3, Adam with beta1 = 0.9, beta2 = 0.98, eps = 1e-9 and the learning rate of Eq. (3):
  :mod:`transformer_book.schedule` (:func:`noam_lr`, :func:`linear_lr`, :func:`make_optimizer`).
- Sec. 5, one optimiser step (forward, loss, backward, clipping, Adam, schedule), with mixed
  precision and the other speed features of chapter 11 as an opt-in layer:
  :mod:`transformer_book.step` (:class:`TrainStep`, :func:`autocast_dtype`).
- The loop, epochs of token-budget batches (Sec. 5.1) with validation and checkpoints:
  :mod:`transformer_book.trainer` (:class:`Trainer`), around what a run holds
  (:mod:`transformer_book.training_run`): its settings (:class:`TrainConfig`, in
  :mod:`transformer_book.config`), position and history (:mod:`transformer_book.run_state`),
  time budget (:mod:`transformer_book.budget`), processes (:mod:`transformer_book.distributed`).
- Sec. 6.1, averaging the weights of the last epochs, and checkpoint files:
  :mod:`transformer_book.checkpoint` (:func:`average_state_dicts`, :func:`load_checkpoint`).
- Sec. 5.1, tokenised pairs batched by token budget: :func:`prepare_corpus`
  (:mod:`transformer_book.corpus`); Sec. 6.1, translation and BLEU: :func:`translate`,
  :func:`corpus_bleu` (:mod:`transformer_book.evaluation`).

Departures, all optional and off or at the paper's value by default: gradient clipping
(``TrainConfig.clip_grad_norm``), a multiplier on the learning-rate schedule
(``TrainConfig.lr_factor``, 1.0 = the paper) and a linear decay instead
(``TrainConfig.schedule``), a time budget (``TrainConfig.time_budget``), mixed precision
(``TrainConfig.amp`` on CUDA: bf16 autocast where the GPU has bf16 units, else fp16 autocast
with a gradient scaler, e.g. on Colab's T4; ``TrainConfig.cpu_amp``: bf16 autocast on a CPU).
"""

# ruff: noqa: F401 (names re-exported for `from transformer_book.train import ...`)
from transformer_book.batching import BatchedCorpus, check_token_ids, to_device_ahead
from transformer_book.checkpoint import (
    CHECKPOINT_FORMAT,
    TRAINING_KEYS,
    _as_tuple,
    _config_dict,
    atomic_torch_save,
    average_state_dicts,
    check_keys,
    load_checkpoint,
    load_weights_into,
    model_from_checkpoint,
    safe_torch_load,
)
from transformer_book.config import SCHEDULES, TrainConfig
from transformer_book.corpus import prepare_corpus
from transformer_book.distributed import Context, shard_steps, token_shares
from transformer_book.evaluation import corpus_bleu, translate
from transformer_book.loss import label_smoothing_loss, smoothed_loss_floor
from transformer_book.run_state import History, RunState
from transformer_book.runlog import METRICS_FILE, append_metrics
from transformer_book.schedule import linear_lr, make_optimizer, noam_lr
from transformer_book.step import TrainStep, autocast_dtype
from transformer_book.trainer import Trainer
from transformer_book.utils import get_device

__all__ = [
    "SCHEDULES", "History", "TrainConfig", "TrainStep", "Trainer", "autocast_dtype",
    "average_state_dicts", "corpus_bleu", "label_smoothing_loss", "linear_lr", "load_checkpoint",
    "make_optimizer", "model_from_checkpoint", "noam_lr", "prepare_corpus", "smoothed_loss_floor",
    "translate",
]
