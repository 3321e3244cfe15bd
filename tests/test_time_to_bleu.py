"""benchmarks/time_to_bleu.py: its smoke test runs both recipes end to end and writes its record."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data" / "multi30k"
DATA = os.environ.get("MULTI30K_DIR") or (str(SHARED) if SHARED.is_dir() else None)


def _script():
    spec = importlib.util.spec_from_file_location("time_to_bleu", ROOT / "benchmarks" / "time_to_bleu.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["time_to_bleu"] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_fast_recipe_is_the_cpu_presets_with_its_three_changes():
    from transformer_book.config import TrainConfig, TransformerConfig

    fast = _script().RECIPES["fast"]
    model, train = TransformerConfig.cpu(), TrainConfig.cpu()
    assert (fast.d_model, fast.num_layers, fast.d_ff, fast.embed_init) == (
        model.d_model, model.num_layers, model.d_ff, model.embed_init)
    assert (fast.max_tokens, fast.warmup_steps, fast.lr_factor, fast.schedule) == (
        train.max_tokens, train.warmup_steps, train.lr_factor, train.schedule)
    assert (fast.dropout, fast.bf16, fast.time_budget) == (0.0, True, 600.0)


@pytest.mark.skipif(DATA is None, reason="no local Multi30k copy (set MULTI30K_DIR)")
def test_quick_run_writes_both_recipes(tmp_path):
    out = tmp_path / "time_to_bleu.json"
    _script().main(["--quick", "--threads", "1", "--device", "cpu", "--data-dir", DATA,
                    "--out", str(out)])
    record = json.loads(out.read_text())
    assert [r["recipe"]["name"] for r in record["results"]] == ["fast", "standard"]
    for r in record["results"]:
        assert r["steps"] > 0 and r["train_seconds"] > 0 and r["evaluations"]
        assert 0 <= r["test2016_bleu_beam4"] <= 100
        assert r["sacrebleu_signature"].startswith("nrefs:1|case:mixed")
    assert "--quick" in record["command"]
