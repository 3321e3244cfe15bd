"""Tests of transformer_book.checkpoint: atomic writes, clear read errors, the folder lock."""

import errno
import io
import os
import stat

import pytest
import torch
from transformer_book.checkpoint import (
    CheckpointError,
    CheckpointWriteError,
    DirectoryLock,
    DirectoryLockedError,
    atomic_torch_save,
    load_checkpoint,
    load_weights_into,
    safe_torch_load,
)


def _failing_save(code):
    def save(obj, f, *args, **kwargs):
        f.write(b"half a checkpoint")
        raise OSError(code, os.strerror(code))

    return save


@pytest.mark.parametrize("code, words", [(errno.ENOSPC, "no space left on the device"),
                                         (errno.EDQUOT, "disk quota exceeded"),
                                         (errno.EACCES, "permission denied")])
def test_failed_write_keeps_the_previous_file(tmp_path, monkeypatch, code, words):
    path = tmp_path / "last.pt"
    atomic_torch_save({"format": 1, "step": 1}, path)
    before = path.read_bytes()
    monkeypatch.setattr(torch, "save", _failing_save(code))
    with pytest.raises(CheckpointWriteError) as info:
        atomic_torch_save({"format": 1, "step": 2}, path)
    assert info.value.errno == code and str(path) in info.value.strerror
    assert words in info.value.strerror and "previous file is intact" in info.value.strerror
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.pt"]  # no temporary file


def test_failed_first_write_leaves_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(torch, "save", _failing_save(errno.ENOSPC))
    with pytest.raises(CheckpointWriteError, match="nothing was written"):
        atomic_torch_save({"format": 1}, tmp_path / "last.pt")
    assert list(tmp_path.iterdir()) == []


def test_interrupted_write_keeps_the_previous_file(tmp_path, monkeypatch):
    path = tmp_path / "last.pt"
    atomic_torch_save({"format": 1, "step": 1}, path)

    def interrupted(obj, f, *args, **kwargs):
        f.write(b"half")
        raise KeyboardInterrupt

    monkeypatch.setattr(torch, "save", interrupted)
    with pytest.raises(KeyboardInterrupt):
        atomic_torch_save({"format": 1, "step": 2}, path)
    assert load_checkpoint(path)["step"] == 1 and len(list(tmp_path.iterdir())) == 1


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_files_honour_the_umask(tmp_path, umask, mode):
    old = os.umask(umask)
    try:
        atomic_torch_save({"format": 1}, tmp_path / "last.pt")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "last.pt").stat().st_mode) == mode


def test_unwritable_folder(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(CheckpointWriteError, match="cannot write"):
        atomic_torch_save({"format": 1}, blocker / "run" / "last.pt")


def test_read_errors_each_have_their_own_message(tmp_path):
    good = tmp_path / "good.pt"
    atomic_torch_save({"format": 1, "model": {"w": torch.ones(2)}}, good)
    data = good.read_bytes()
    cases = {
        "empty.pt": (b"", "is empty"),
        "cut.pt": (data[:-20], "is truncated or corrupted"),
        "text.pt": (b"#!/bin/sh\n", "is not a PyTorch checkpoint"),
    }
    for name, (content, words) in cases.items():
        (tmp_path / name).write_bytes(content)
        with pytest.raises(CheckpointError, match=words):
            load_checkpoint(tmp_path / name)
    torch.save([1, 2], tmp_path / "list.pt")
    with pytest.raises(CheckpointError, match="holds a list"):
        load_checkpoint(tmp_path / "list.pt")
    torch.save({"w": torch.ones(2)}, tmp_path / "sd.pt")
    with pytest.raises(CheckpointError, match="only model weights"):
        load_checkpoint(tmp_path / "sd.pt")
    torch.save({"format": 2, "transformer_book_version": "1.0"}, tmp_path / "v2.pt")
    with pytest.raises(CheckpointError, match="format 2.*reads format 1.*transformer_book 1.0"):
        load_checkpoint(tmp_path / "v2.pt")
    with pytest.raises(CheckpointError, match="is a folder"):
        load_checkpoint(tmp_path)
    with pytest.raises(FileNotFoundError):
        load_checkpoint(tmp_path / "missing.pt")
    assert load_checkpoint(good)["format"] == 1


class _Payload:
    def __reduce__(self):
        return (os.system, ("echo payload ran",))


def test_payload_refused_without_unsafe_advice(tmp_path):
    torch.save({"format": 1, "x": _Payload()}, tmp_path / "evil.pt")
    with pytest.raises(CheckpointError) as info:
        safe_torch_load(tmp_path / "evil.pt")
    assert "could run code" in str(info.value) and "weights_only=False" not in str(info.value)


def test_weights_of_another_model():
    model = torch.nn.Linear(3, 2)
    with pytest.raises(CheckpointError, match="another model.*1 missing.*1 unexpected"):
        load_weights_into(model, {"weight": torch.zeros(2, 3), "other": torch.zeros(1)}, "x.pt")
    with pytest.raises(CheckpointError, match="of another shape"):
        load_weights_into(model, {"weight": torch.zeros(4, 3), "bias": torch.zeros(2)}, "x.pt")
    load_weights_into(model, {"weight": torch.zeros(2, 3), "bias": torch.ones(2)}, "x.pt")
    assert model.bias.tolist() == [1.0, 1.0]


def test_directory_lock(tmp_path):
    with DirectoryLock(tmp_path):
        with pytest.raises(DirectoryLockedError, match=f"pid {os.getpid()}"):
            DirectoryLock(tmp_path).acquire()  # a second open file description: refused
    with DirectoryLock(tmp_path):  # released on exit
        pass


class _FullDisk(io.RawIOBase):
    """A file on a disk that fills up after ``room`` bytes (the real torch.save writes to it)."""

    def __init__(self, fd, room):
        self.file, self.room = io.FileIO(fd, "wb"), room

    def writable(self):
        return True

    def write(self, data):
        if len(data) > self.room:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.room -= len(data)
        return self.file.write(data)

    def fileno(self):
        return self.file.fileno()

    def close(self):
        self.file.close()
        super().close()


def test_disk_full_inside_torch_save(tmp_path, monkeypatch):
    """torch's zip writer reports a failed write as a RuntimeError; the message still says
    "no space" and names the file."""
    import transformer_book.checkpoint as checkpoint

    path = tmp_path / "last.pt"
    atomic_torch_save({"format": 1, "w": torch.zeros(10)}, path)
    before = path.read_bytes()
    monkeypatch.setattr(checkpoint.os, "fdopen", lambda fd, mode: _FullDisk(fd, 50_000))
    with pytest.raises(CheckpointWriteError, match="no space left") as info:
        atomic_torch_save({"format": 1, "w": torch.zeros(100_000)}, path)
    assert str(path) in str(info.value) and path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.pt"]
