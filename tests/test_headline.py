"""The landing page quotes chapter 8's stored result (_ext/headline.py): unit checks, no build."""

from __future__ import annotations

import json
from pathlib import Path

import headline
import pytest
from sphinx.errors import ExtensionError

ROOT = Path(__file__).resolve().parents[1]


def test_reads_the_stored_result_of_chapter_8():
    subs, chart = headline.read_headline(ROOT / headline.NOTEBOOK)
    assert 0 < float(subs["headline_bleu"]) <= 100
    assert float(subs["headline_minutes"]) > 0
    assert subs["headline_config"] in {"cpu", "full", "quick"}
    assert subs["headline_german"] and subs["headline_translation"]
    assert "vegaEmbed" in chart  # the altair chart, as stored


@pytest.mark.parametrize("config, hardware, reads", [
    ("cpu", "CPU: AMD EPYC, 2 threads, torch 2.13.0+cpu", "2 CPU threads (AMD EPYC)"),
    ("quick", "CPU: Intel(R) Xeon(R) CPU @ 2.80GHz, 4 threads, torch 2.3.0", "4 CPU threads (Intel(R) Xeon(R) CPU @ 2.80GHz)"),
    ("full", "NVIDIA H100 80GB HBM3 (79 GiB), torch 2.11.0+cu130", "NVIDIA H100 80GB HBM3 (79 GiB)"),
])
def test_reads_the_result_line_of_each_configuration(config, hardware, reads):
    line = (f"{config} configuration, trained in 19.2 min on {hardware}:\n"
            "test 2016 BLEU 33.05 (beam 4, weights: last epoch)")
    result = headline.RESULT_RE.search(line)
    assert (result["config"], result["minutes"], result["bleu"]) == (config, "19.2", "33.05")
    assert headline.read_hardware(result["hardware"]) == reads


def test_a_notebook_without_outputs_fails_the_build_clearly(tmp_path):
    nb = json.loads((ROOT / headline.NOTEBOOK).read_text(encoding="utf-8"))
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            cell["outputs"], cell["execution_count"] = [], None
    path = tmp_path / "08_training.ipynb"
    path.write_text(json.dumps(nb), encoding="utf-8")
    with pytest.raises(ExtensionError, match="BLEU line.*example translations.*attention chart.*German sentence"):
        headline.read_headline(path)
    with pytest.raises(ExtensionError, match="missing"):
        headline.read_headline(tmp_path / "nothing.ipynb")


def test_the_showcase_is_the_best_printed_example_and_the_chart_has_its_sentence():
    subs, _ = headline.read_headline(ROOT / headline.NOTEBOOK)
    assert subs["headline_chart_german"]
    examples = [("a", "A man sits on a bench .", "A dog runs ."),
                ("b", "A woman holding a bowl of food in a kitchen .",
                 "A woman holding a bowl of food in a kitchen ."),
                ("c", "Two boys play soccer .", "Two boys are playing football .")]
    assert headline.best_example(examples)[0] == "b"
    assert int(subs["headline_about_minutes"]) % 5 == 0
    assert abs(int(subs["headline_about_minutes"]) - float(subs["headline_minutes"])) <= 2.5


def test_reading_times_cover_every_chapter_and_lab_page():
    subs = headline.reading_times(ROOT)
    pages = sorted((ROOT / "chapters").glob("*.ipynb"))
    keys = {k for k in subs if k.startswith("minutes_") and k != "minutes_core"}
    assert len(keys) == len(pages) and "minutes_01" in keys
    assert all(int(subs[k]) % 5 == 0 and int(subs[k]) >= 5 for k in keys)
    core = [k for k in keys if k[len("minutes_"):].isdigit() and int(k[len("minutes_"):]) <= 8]
    assert int(subs["minutes_core"]) == sum(int(subs[k]) for k in core) > 0
