"""Tests of the command line (python -m transformer_book): train, resume, translate."""

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformer_book.__main__ import main
from transformer_book.train import load_checkpoint

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k"


@pytest.fixture
def data_dir(monkeypatch, tmp_path):
    folder = os.environ.get("MULTI30K_DIR") or (str(SHARED) if SHARED.is_dir() else None)
    if folder is None:
        pytest.skip("no local Multi30k copy (set MULTI30K_DIR)")
    monkeypatch.setenv("TRANSFORMER_BOOK_CACHE", str(tmp_path / "cache"))  # tokenizer cache
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield folder
    torch.set_num_threads(before)


def test_train_resume_translate(data_dir, tmp_path, monkeypatch, capsys):
    ckpt = tmp_path / "run"
    common = ["train", "--data-dir", data_dir, "--preset", "tiny", "--vocab-size", "500",
              "--train-limit", "64", "--max-tokens", "400", "--checkpoint-dir", str(ckpt),
              "--checkpoint-every", "2", "--device", "cpu", "--no-progress"]
    assert main(common + ["--max-steps", "3", "--num-layers", "1", "--norm-first"]) == 0
    state = load_checkpoint(ckpt / "last.pt")
    assert state["step"] == 3 and state["model_config"]["d_model"] == 64
    assert state["model_config"]["num_layers"] == 1 and state["model_config"]["norm_first"]
    assert main(common + ["--max-steps", "4", "--resume"]) == 0
    assert load_checkpoint(ckpt / "last.pt")["step"] == 4
    assert "resumed from" in capsys.readouterr().err

    lines = ["Ein Hund läuft.", "Zwei Männer spielen Fußball im Park."]
    monkeypatch.setattr(sys, "stdin", io.StringIO("\n".join(lines) + "\n"))
    assert main(["translate", "--checkpoint", str(ckpt / "last.pt"), "--beam-size", "2",
                 "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert len(out.splitlines()) == len(lines)  # one English line per German line


def test_resume_without_checkpoint_fails_clearly(data_dir, tmp_path, capsys):
    code = main(["train", "--data-dir", data_dir, "--checkpoint-dir", str(tmp_path / "none"),
                 "--resume"])
    assert code == 2 and "does not exist" in capsys.readouterr().err


def test_module_help_runs():
    result = subprocess.run([sys.executable, "-m", "transformer_book", "translate", "--help"],
                            capture_output=True, text=True, check=True)
    assert "--checkpoint" in result.stdout and "--beam-size" in result.stdout
