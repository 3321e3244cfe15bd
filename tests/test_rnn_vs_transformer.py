"""benchmarks/rnn_vs_transformer.py: the choice on validation, the parts end to end (tiny
budgets), the records they write and the summary that ``collect`` makes of them."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest
import rnn_vs_transformer as script

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data" / "multi30k"
DATA = os.environ.get("MULTI30K_DIR") or (str(SHARED) if SHARED.is_dir() else None)
needs_data = pytest.mark.skipif(DATA is None, reason="no local Multi30k copy (set MULTI30K_DIR)")


def _record(folder: Path, part: str, setting, val_bleu: float) -> None:
    (folder / part).mkdir(parents=True, exist_ok=True)
    record = {"setting": dataclasses.asdict(setting), "val_bleu_greedy": val_bleu}
    (folder / part / f"{setting.name}.json").write_text(json.dumps(record))


def test_the_screening_grid_is_the_same_for_both_models():
    args = script.argparse.Namespace(budget=None)
    settings = script.screen_settings(args)
    assert len(settings) == 12 and len({s.name for s in settings}) == 12
    for model in script.MODELS:
        grid = {(s.lr_factor, s.max_tokens) for s in settings if s.model == model}
        assert grid == {(lr, tok) for lr in (0.225, 0.45, 0.9) for tok in (1500, 3000)}
    assert {s.budget for s in settings} == {300.0} and {s.seed for s in settings} == {0}


def test_records_name_the_cpu_generation():
    """Two machines both called "AMD EPYC" trained at different speeds (chapter 9's data-size
    runs, seed 0 and seed 1); the records keep the family and model that tell them apart."""
    cpu = script.cpu_identity()
    if Path("/proc/cpuinfo").exists():
        assert set(cpu) == {"family", "model", "stepping"} and all(v.isdigit() for v in cpu.values())
    args = script.argparse.Namespace(note="", argv=["collect"])
    assert script.provenance(args)["cpu"] == cpu


def test_epochs_bound_more_passes_on_a_subset():
    assert script.Setting("rnn").epochs == 30
    assert script.Setting("rnn", train_limit=1000).epochs == 870


def test_chosen_recipe_is_the_best_on_validation(tmp_path):
    S = script.Setting
    _record(tmp_path, "screen", S("transformer", 0.45, 1500), 20.0)
    _record(tmp_path, "screen", S("transformer", 0.9, 3000), 21.5)
    _record(tmp_path, "screen", S("rnn", 0.225, 1500), 18.0)
    _record(tmp_path, "screen", S("rnn", 0.9, 1500), 17.0)
    args = script.argparse.Namespace(budget=None, seeds=[0, 1])
    # the dropout part runs each winner with the other dropout of {0, 0.2}
    dropout = script.dropout_settings(args, tmp_path)
    assert [(s.model, s.lr_factor, s.max_tokens, s.dropout) for s in dropout] == [
        ("transformer", 0.9, 3000, 0.2), ("rnn", 0.225, 1500, 0.0)]
    _record(tmp_path, "dropout", dropout[0], 21.0)  # worse: the preset's dropout stays
    _record(tmp_path, "dropout", dropout[1], 19.0)  # better: dropout 0 is chosen
    assert script.chosen(tmp_path, "transformer") == S("transformer", 0.9, 3000, budget=1150.0)
    assert script.chosen(tmp_path, "rnn") == S("rnn", 0.225, 1500, 0.0, budget=1150.0)
    finals = script.final_settings(args, tmp_path)
    assert [(s.model, s.seed, s.budget) for s in finals] == [
        ("transformer", 0, 1150.0), ("rnn", 0, 1150.0), ("transformer", 1, 1150.0),
        ("rnn", 1, 1150.0)]
    sizes = script.datasize_settings(script.argparse.Namespace(budget=None, seeds=[0],
                                                               sizes=[1000]), tmp_path)
    assert [(s.model, s.train_limit, s.budget, s.dropout) for s in sizes] == [
        ("transformer", 1000, 600.0, None), ("rnn", 1000, 600.0, 0.0)]
    # the dropout check on the small subsets: each with the other dropout of {0, 0.2}
    drop = script.datasize_dropout_settings(script.argparse.Namespace(budget=None, seeds=[0],
                                                                      sizes=None), tmp_path)
    assert [(s.model, s.train_limit, s.budget, s.dropout) for s in drop] == [
        ("transformer", 1000, 600.0, 0.2), ("rnn", 1000, 600.0, 0.2),
        ("transformer", 3000, 600.0, 0.2), ("rnn", 3000, 600.0, 0.2)]


def test_the_grid_extends_where_its_edge_is_best(tmp_path):
    S = script.Setting
    args = script.argparse.Namespace(budget=None)
    for lr, bleu in ((0.225, 10.0), (0.45, 12.0), (0.9, 11.0)):  # inside: no extension
        _record(tmp_path, "screen", S("transformer", lr, 1500), bleu)
    for lr, bleu in ((0.225, 2.0), (0.45, 5.0), (0.9, 8.0)):  # the top rate is best
        _record(tmp_path, "screen", S("rnn", lr, 1500), bleu)
        _record(tmp_path, "screen", S("rnn", lr, 3000), bleu - 1)
    assert script.extensions(tmp_path, args) == [S("rnn", 1.8, 1500)]
    _record(tmp_path, "screen", S("rnn", 1.8, 1500), 7.0)  # worse: the search stops
    assert script.extensions(tmp_path, args) == []


def test_no_screening_yet_is_a_clear_error(tmp_path):
    with pytest.raises(SystemExit, match="run the screen part first"):
        script.chosen(tmp_path, "rnn")


@needs_data
def test_parts_end_to_end(tmp_path, monkeypatch):
    """screen, dropout, final, longer, datasize and collect on tiny data and budgets: each run writes
    its record and log, a finished run is skipped, collect summarises them."""
    monkeypatch.setattr(script, "LR_FACTORS", (0.45,))
    monkeypatch.setattr(script, "BATCH_TOKENS", (1500,))
    monkeypatch.setattr(script, "extensions", lambda folder, args: [])  # tested on its own
    common = ["--machine", str(tmp_path), "--quick", "--threads", "1", "--data-dir", DATA,
              "--seeds", "0"]
    for part in ("screen", "dropout", "final", "longer", "screen"):
        script.main([part, *common, "--budget", "1"])
    script.main(["throughput", *common, "--budget", "0.5"])
    script.main(["precision", *common])
    script.main(["datasize", *common, "--budget", "1", "--sizes", "1000"])
    script.main(["datasize_dropout", *common, "--budget", "1", "--sizes", "1000"])
    folder = tmp_path / "rnn_vs_transformer"
    finals = [json.loads(p.read_text()) for p in sorted((folder / "final").glob("*.json"))]
    assert len(finals) == 2 and {f["setting"]["model"] for f in finals} == {"rnn", "transformer"}
    for f in finals:
        assert (folder / "final" / f"{f['name']}.log").read_text().startswith("epoch")
        assert f["steps"] > 0 and 0 <= f["test2016_bleu_beam4"] <= 100
        assert f["sacrebleu_signature"].startswith("nrefs:1|case:mixed")
        assert [p["train_seconds"] for p in f["val_curve"]] == sorted(
            p["train_seconds"] for p in f["val_curve"])
        assert len(f["val_curve"]) <= 9 and f["parameters"] > 7_000_000
        example = f["examples"][0]
        layers = 3 if f["setting"]["model"] == "transformer" else 1
        assert len(example["cross_attention"]) == layers
        assert len(example["cross_attention"][0][0]) == len(example["output_pieces"])
        assert len(example["cross_attention"][0][0][0]) == len(example["source_pieces"])
        assert "--quick" in f["command"]
    longer = {r["setting"]["model"]: r for r in (
        json.loads(p.read_text()) for p in (folder / "longer").glob("*.json"))}
    assert set(longer) == {"rnn", "transformer"} and "val_curve" in longer["rnn"]
    chosen = {f["setting"]["model"]: f["setting"] for f in finals}
    assert longer["rnn"]["setting"]["lr_factor"] == chosen["rnn"]["lr_factor"] / 2
    assert longer["rnn"]["setting"]["dropout"] == chosen["rnn"]["dropout"]
    assert longer["transformer"]["setting"]["dropout"] == 0.1
    assert longer["transformer"]["setting"]["lr_factor"] == chosen["transformer"]["lr_factor"]
    sizes = [json.loads(p.read_text()) for p in (folder / "datasize").glob("*.json")]
    assert {s["training_pairs"] for s in sizes} == {400} and all("selected" in s for s in sizes)
    drops = {r["setting"]["model"]: r for r in (
        json.loads(p.read_text()) for p in (folder / "datasize_dropout").glob("*.json"))}
    for m, preset in (("transformer", 0.0), ("rnn", 0.2)):  # the other dropout of {0, 0.2}
        mine = preset if chosen[m]["dropout"] is None else chosen[m]["dropout"]
        assert drops[m]["setting"]["dropout"] == 0.2 - mine and "selected" in drops[m]
        assert "test2016_bleu_beam4" not in drops[m]  # validation only
    rows = json.loads((folder / "throughput" / "throughput.json").read_text())["rows"]
    assert {(r["model"], r["threads"]) for r in rows} == {
        (m, t) for m in ("transformer", "rnn", "rnn_no_input_feeding") for t in (1, 2)}
    precision = json.loads((folder / "throughput" / "precision.json").read_text())
    assert [(r["threads"], r["precision"]) for r in precision["rows"]] == [
        (2, "bf16"), (2, "float32"), (1, "bf16"), (1, "float32")]
    assert all(r["transformer"] > 0 and r["rnn"] > 0 for r in precision["rows"])
    script.main(["collect", "--machine", str(tmp_path), "--quick"])
    summary = json.loads((tmp_path / "rnn_vs_transformer.json").read_text())
    assert set(summary["final_summary"]) == {"rnn", "transformer"}
    assert summary["final_summary"]["rnn"]["test2016_bleu_beam4"]["n"] == 1
