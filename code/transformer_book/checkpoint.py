"""Checkpoint files: plain dicts of tensors, numbers and strings, so that
``torch.load(weights_only=True)`` reads them without running code from the file; written
atomically (:func:`atomic_torch_save`), read with a clear :class:`CheckpointError` for each way a
file can be wrong (:func:`load_checkpoint`), turned back into a model
(:func:`model_from_checkpoint`); and the last epochs' weights, kept and averaged (Sec. 6.1:
"averaging the last 5 checkpoints", :class:`EpochWeights`).
"""

from __future__ import annotations

import dataclasses
import errno
import os
import pickle
import zipfile
from collections import deque
from collections.abc import Iterator, Sequence
from pathlib import Path

import torch

from transformer_book.files import (  # noqa: F401 (re-exported: the lock guards run folders,
    CheckpointError,  # and the errors are this module's; files.py holds them for the CLI)
    CheckpointWriteError,
    DirectoryLock,
    DirectoryLockedError,
    atomic_write,
)
from transformer_book.utils import get_device

CHECKPOINT_FORMAT = 1

#: What :meth:`transformer_book.train.Trainer.load_checkpoint` needs to continue a run.
TRAINING_KEYS = ("model", "optimizer", "scheduler", "step", "epoch", "batch_in_epoch", "rng",
                 "model_config", "train_config", "history")


def config_dict(config) -> dict | None:
    """A config (a dataclass, or a mapping) as the plain dict a checkpoint stores; None stays
    None."""
    if config is None:
        return None
    if dataclasses.is_dataclass(config):
        return dataclasses.asdict(config)
    return dict(config)


# --------------------------------------------------------------------------- writing


def _write_error(path: Path, exc: OSError) -> CheckpointWriteError:
    cause = {
        errno.ENOSPC: "no space left on the device",
        errno.EDQUOT: "disk quota exceeded",
        errno.EACCES: "permission denied",
        errno.EPERM: "permission denied",
        errno.EROFS: "the file system is read-only",
    }.get(exc.errno, exc.strerror or str(exc))
    previous = "the previous file is intact" if path.exists() else "nothing was written"
    err = CheckpointWriteError(
        exc.errno, f"cannot write {path}: {cause} ({previous}, no temporary file left); "
        "free some space or fix the folder's permissions (or choose another folder), then retry"
    )
    err.filename = str(path)
    return err


def atomic_torch_save(obj, path: str | os.PathLike) -> None:
    """``torch.save`` through :func:`~transformer_book.files.atomic_write`; CheckpointWriteError
    (naming the path and the cause: no space, quota, permission ...) when it cannot write."""
    path = Path(path)
    recorder = None
    try:
        with atomic_write(path) as f:
            recorder = _RecordingWriter(f)
            torch.save(obj, recorder)
    except (OSError, RuntimeError) as e:
        # torch's zip writer turns a failed write into a RuntimeError ("unexpected pos ...");
        # the OSError behind it (e.g. ENOSPC) was recorded on the way
        cause = e if isinstance(e, OSError) else getattr(recorder, "error", None)
        if isinstance(cause, OSError):
            raise _write_error(path, cause) from e
        raise


class _RecordingWriter:
    """A file's ``write`` that remembers the OSError it raised (torch.save hides it)."""

    def __init__(self, f):
        self.f, self.error = f, None

    def write(self, data) -> int:
        try:
            return self.f.write(data)
        except OSError as e:
            self.error = e
            raise

    def __getattr__(self, name):
        return getattr(self.f, name)


# --------------------------------------------------------------------------- reading


def as_tuple(x):
    """Lists turned back into tuples, at every depth: what ``random.setstate`` needs from the
    Python random state a checkpoint stores as lists."""
    return tuple(as_tuple(i) for i in x) if isinstance(x, list | tuple) else x


def safe_torch_load(path: str | os.PathLike, map_location=None):
    """``torch.load(path, weights_only=True)``; FileNotFoundError without a file, else a
    :class:`CheckpointError` saying why it cannot be read safely (empty, truncated ...)."""
    path = Path(path)
    if path.is_dir():
        raise CheckpointError(f"{path} is a folder, not a checkpoint file (inside a run folder, "
                              "the checkpoint is last.pt)")
    if not path.is_file():
        raise FileNotFoundError(errno.ENOENT, f"no checkpoint at {path}", str(path))
    size = path.stat().st_size
    if size == 0:
        raise CheckpointError(f"{path} is empty (0 bytes): it was never written completely; "
                              "use another checkpoint or train again")
    with open(path, "rb") as f:
        head = f.read(4)
    zipped = head == b"PK\x03\x04"  # torch.save's format is a zip archive
    if zipped and not zipfile.is_zipfile(path):
        raise CheckpointError(f"{path} is truncated or corrupted ({size:,} bytes, the end of the "
                              "archive is missing): it was cut off while being copied or "
                              "written; copy it again or use another checkpoint")
    if not zipped and head[:1] != b"\x80":  # neither a zip archive nor a (legacy) pickle
        raise CheckpointError(f"{path} is not a PyTorch checkpoint (it starts with {head!r}); "
                              "pass the last.pt written by `python -m transformer_book train`")
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as e:
        # torch's own message advises turning the safety off; we do not repeat that advice
        if "weights only" in str(e).lower() or "weights_only" in str(e):
            raise CheckpointError(
                f"{path} holds Python objects other than tensors and plain data, which are "
                "refused because loading them could run code from the file; it is not a "
                "checkpoint written by `python -m transformer_book train`"
            ) from None
        raise CheckpointError(f"{path} is corrupted ({e}); use another checkpoint") from None
    except (RuntimeError, EOFError, KeyError, ValueError, IndexError) as e:
        first_line = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CheckpointError(f"{path} is truncated or corrupted and cannot be read "
                              f"({first_line[:120]}); copy it again or use another "
                              "checkpoint") from None


def load_checkpoint(path: str | os.PathLike, map_location=None) -> dict:
    """Read a checkpoint (:func:`safe_torch_load`): FileNotFoundError without a file, and
    CheckpointError (a ValueError) with its own message for a file that is empty, truncated, not
    a PyTorch file, holding unsafe objects, not this book's, or of another format version."""
    path = Path(path)
    state = safe_torch_load(path, map_location)
    if not isinstance(state, dict):
        raise CheckpointError(f"{path} holds a {type(state).__name__}, not a transformer_book "
                              "checkpoint (a dict written by `python -m transformer_book train`)")
    if "format" not in state:
        if state and all(isinstance(v, torch.Tensor) for v in state.values()):
            what = "only model weights (a state dict)"
        else:
            what = f"a dict with keys {', '.join(map(str, list(state)[:6]))}"
        raise CheckpointError(f"{path} holds {what}, not a transformer_book checkpoint (no "
                              "'format' entry); pass the last.pt written by "
                              "`python -m transformer_book train`")
    if state["format"] != CHECKPOINT_FORMAT:
        raise CheckpointError(f"{path} has checkpoint format {state['format']!r}, but this "
                              f"transformer_book reads format {CHECKPOINT_FORMAT}; "
                              f"{_written_by(state)}")
    return state


def _written_by(state: dict) -> str:
    version = state.get("transformer_book_version", "another version")
    return f"it was written by transformer_book {version}: use that version"


def check_keys(state: dict, keys, path) -> None:
    """Raise :class:`CheckpointError` naming the entries of ``keys`` that ``state`` lacks."""
    missing = [k for k in keys if k not in state]
    if missing:
        raise CheckpointError(f"{path} lacks {', '.join(missing)}: it was not written by "
                              "`python -m transformer_book train` (or by an older version); "
                              "train again")


def load_weights_into(model: torch.nn.Module, weights: dict, path) -> None:
    """``model.load_state_dict(weights)``, or a :class:`CheckpointError` saying how the
    checkpoint's weights differ from the model (another model)."""
    own = model.state_dict()
    missing = [k for k in own if k not in weights]
    unexpected = [k for k in weights if k not in own]
    shapes = [f"{k} {tuple(weights[k].shape)} vs {tuple(v.shape)}" for k, v in own.items()
              if k in weights and hasattr(weights[k], "shape") and weights[k].shape != v.shape]
    if missing or unexpected or shapes:
        parts = []
        if missing:
            parts.append(f"{len(missing)} missing (e.g. {missing[0]})")
        if unexpected:
            parts.append(f"{len(unexpected)} unexpected (e.g. {unexpected[0]})")
        if shapes:
            parts.append(f"{len(shapes)} of another shape (e.g. {shapes[0]})")
        raise CheckpointError(f"{path} holds weights of another model than its model_config "
                              f"describes: {'; '.join(parts)}; use the checkpoint written "
                              "with this model")
    model.load_state_dict(weights)


def model_from_checkpoint(path: str | os.PathLike, device: torch.device | str | None = None):
    """Rebuild a trained model and its tokenizer from a checkpoint written by :class:`Trainer`.

    It needs ``model_config`` (whose ``kind`` names the model; none: a Transformer) and
    ``extra["tokenizer"]``, both stored by the command line's ``train``. Returns ``(model,
    tokenizer, state)``, the model in eval mode on ``device``. Raises as
    :func:`load_checkpoint`, and CheckpointError when either is missing or the weights belong
    to another model.
    """
    from transformer_book.config import MODEL_KINDS, model_config_from_dict
    from transformer_book.model import build_model
    from transformer_book.tokenizer import SubwordTokenizer

    device = get_device(device)
    state = load_checkpoint(path, map_location=device)
    check_keys(state, ("model",), path)
    if not state.get("model_config"):
        raise CheckpointError(f"{path} stores no model_config, so the model cannot be rebuilt; "
                              "use a checkpoint written by `python -m transformer_book train`")
    if "tokenizer" not in (state.get("extra") or {}):
        raise CheckpointError(f"{path} stores no tokenizer (extra['tokenizer']); use a "
                              "checkpoint written by `python -m transformer_book train`")
    kind = state["model_config"].get("kind", "transformer")
    writer = _written_by(state)
    if kind not in MODEL_KINDS:
        raise CheckpointError(f"{path} holds a model of kind {kind!r}, which this version does "
                              f"not know; {writer}")
    known = {f.name for f in dataclasses.fields(MODEL_KINDS[kind])}
    unknown = sorted(set(state["model_config"]) - known)
    if unknown:
        raise CheckpointError(f"{path} describes its model with fields this version does not "
                              f"know ({', '.join(unknown)}); {writer}")
    try:
        config = model_config_from_dict(state["model_config"])
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{path} has an invalid model_config: {e}") from None
    model = build_model(config)
    load_weights_into(model, state["model"], path)
    model.to(device).eval()
    try:
        tokenizer = SubwordTokenizer.from_str(state["extra"]["tokenizer"])
    except Exception as e:  # the tokenizers library raises its own exception types
        raise CheckpointError(f"{path} stores a tokenizer that cannot be read ({e})") from None
    return model, tokenizer, state


# --------------------------------------------------------------------------- averaging (Sec. 6.1)


def average_state_dicts(states: Sequence[dict]) -> dict:
    """Sec. 6.1: the element-wise mean of several state dicts of the same model (floating
    tensors are averaged in float32 and cast back; integer buffers are taken from the last)."""
    if not states:
        raise ValueError("nothing to average: pass at least one state dict")
    keys = states[-1].keys()
    for i, state in enumerate(states):
        if state.keys() != keys:
            raise ValueError(f"state dict {i} has other keys than the last one: not one model")
    out = {}
    for k in keys:
        last = states[-1][k]
        if last.is_floating_point():
            out[k] = (sum(s[k].float() for s in states) / len(states)).to(last.dtype)
        else:
            out[k] = last.clone()
    return out


class EpochWeights:
    """The weights at the end of the last ``keep`` epochs, ``(epoch, CPU state dict)`` pairs to
    average (Sec. 6.1). With a ``folder``, each is also written there as
    ``weights_epochNNNN.pt``, older files deleted, so a resumed run has them (``write=False``:
    only read, as the ranks other than 0 do)."""

    def __init__(self, keep: int, folder: str | os.PathLike | None = None, *, write: bool = True):
        if keep < 1:
            raise ValueError(f"average_last must be >= 1, got {keep}")
        self.kept: deque[tuple[int, dict]] = deque(maxlen=keep)
        self.folder, self.write = None if folder is None else Path(folder), write

    def __iter__(self) -> Iterator[tuple[int, dict]]:
        return iter(self.kept)

    def __len__(self) -> int:
        return len(self.kept)

    def add(self, epoch: int, model: torch.nn.Module) -> None:
        """Keep ``model``'s weights at the end of ``epoch`` (a copy on the CPU)."""
        state = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
        self.kept.append((epoch, state))
        if self.folder is not None and self.write:
            atomic_torch_save(state, self.folder / f"weights_epoch{epoch:04d}.pt")
            names = {f"weights_epoch{e:04d}.pt" for e, _ in self.kept}
            for old in self.folder.glob("weights_epoch*.pt"):
                if old.name not in names:
                    old.unlink()

    def load(self, up_to_epoch: int) -> None:
        """Read the kept weights back from the folder (a resumed run): those of epochs up to
        ``up_to_epoch`` (files from a longer, abandoned run do not count)."""
        self.kept.clear()
        if self.folder is None or self.kept.maxlen == 1:  # keeping 1: nothing to average
            return
        for f in sorted(self.folder.glob("weights_epoch*.pt")):
            epoch = int(f.stem.removeprefix("weights_epoch"))
            if epoch <= up_to_epoch:
                self.kept.append((epoch, safe_torch_load(f, map_location="cpu")))

    def average(self) -> dict:
        """The mean of the kept weights (:func:`average_state_dicts`).

        Raises:
            ValueError: nothing was kept (``average_last`` is 1, or no epoch has ended).
        """
        if not self.kept:
            raise ValueError("no epoch weights kept: set TrainConfig(average_last=n) with n > 1 "
                             "and train at least one whole epoch")
        return average_state_dicts([state for _, state in self.kept])
