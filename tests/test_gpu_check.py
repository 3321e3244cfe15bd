"""tools/gpu_check.py (``make gpu-check``): it refuses in one line without a CUDA GPU, and its
plumbing runs on the CPU with tiny sizes (``--device cpu --smoke``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tools" / "gpu_check.py"
SHARED = ROOT.parent / "shared" / "data" / "multi30k"
DATA = os.environ.get("MULTI30K_DIR") or (str(SHARED) if SHARED.is_dir() else None)


def _run(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, [str(ROOT / "code"), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=240)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA GPU")
def test_refuses_in_one_line_without_cuda(tmp_path):
    result = _run("--out", str(tmp_path / "summary.json"))
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == "gpu-check needs a CUDA GPU; none found\n"
    assert not (tmp_path / "summary.json").exists()
    result = _run("--device", "cpu")  # the CPU only for the smoke run
    assert result.returncode == 2 and "only for --smoke" in result.stderr


@pytest.mark.skipif(DATA is None, reason="no local Multi30k copy (set MULTI30K_DIR)")
def test_smoke_run_of_chapter_8s_quick_configuration_on_the_cpu(tmp_path):
    out = tmp_path / "out" / "summary.json"
    result = _run("--device", "cpu", "--smoke", "--parts", "quick", "--data", DATA,
                  "--out", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines()[-1] == "gpu-check: all 1 parts passed"
    summary = json.loads(out.read_text())
    assert summary["ok"] and summary["device"] == "cpu" and summary["smoke"]
    quick = summary["parts"]["quick"]
    assert quick["ok"] and quick["exit_status"] == 0 and quick["steps"] == 3
    assert quick["target_tokens_per_second"] > 0 and quick["val_loss"] > 0
    assert [(b["split"], b["decoding"]) for b in quick["bleu"]] == [
        ("val", "greedy"), ("test_2016_flickr", "greedy"), ("test_2016_flickr", "beam 4")]
    assert "== quick: " in out.with_suffix(".log").read_text()  # the whole log, beside it
