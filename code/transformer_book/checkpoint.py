"""Checkpoint files: written atomically, read with ``weights_only=True``, turned back into a model.

A checkpoint is a plain dict (tensors, numbers, strings, lists, dicts) so that
``torch.load(weights_only=True)`` can read it without running any code from the file.
:class:`transformer_book.train.Trainer` writes and reads them; :func:`model_from_checkpoint`
rebuilds a trained model and its tokenizer for translation.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from pathlib import Path

import torch

from transformer_book.utils import get_device

CHECKPOINT_FORMAT = 1


def _config_dict(config) -> dict | None:
    if config is None:
        return None
    if dataclasses.is_dataclass(config):
        return dataclasses.asdict(config)
    return dict(config)


def atomic_torch_save(obj, path: str | os.PathLike) -> None:
    """``torch.save`` to a temporary file in the same folder, then ``os.replace``: a crash
    mid-write leaves the previous checkpoint intact, never a truncated one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        torch.save(obj, tmp)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def _as_tuple(x):
    return tuple(_as_tuple(i) for i in x) if isinstance(x, list | tuple) else x


def load_checkpoint(path: str | os.PathLike, map_location=None) -> dict:
    """Read a checkpoint with ``torch.load(weights_only=True)`` (no arbitrary code runs).

    Raises:
        FileNotFoundError: no file at ``path``.
        ValueError: the file is not a checkpoint of this book (or another format version).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}")
    state = torch.load(path, map_location=map_location, weights_only=True)
    if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(
            f"{path} is not a transformer_book checkpoint (format {CHECKPOINT_FORMAT})"
        )
    return state


def model_from_checkpoint(path: str | os.PathLike, device: torch.device | str | None = None):
    """Rebuild a trained model and its tokenizer from a checkpoint written by :class:`Trainer`.

    The checkpoint must hold ``model_config`` and ``extra["tokenizer"]`` (the command line's
    ``train`` stores both).

    Returns:
        ``(model, tokenizer, state)``; the model is in eval mode on ``device``.
    """
    from transformer_book.config import TransformerConfig
    from transformer_book.model import Transformer
    from transformer_book.tokenizer import SubwordTokenizer

    device = get_device(device)
    state = load_checkpoint(path, map_location=device)
    if not state.get("model_config"):
        raise ValueError(f"{path} stores no model_config; cannot rebuild the model")
    if "tokenizer" not in (state.get("extra") or {}):
        raise ValueError(f"{path} stores no tokenizer (extra['tokenizer'])")
    model = Transformer(TransformerConfig(**state["model_config"]))
    model.load_state_dict(state["model"])
    model.to(device).eval()
    tokenizer = SubwordTokenizer.from_str(state["extra"]["tokenizer"])
    return model, tokenizer, state
