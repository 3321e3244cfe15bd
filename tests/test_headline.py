"""The landing page quotes chapter 8's stored result (_ext/headline.py): unit checks, no build."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from sphinx.errors import ExtensionError

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "_ext"))
import headline  # noqa: E402


def test_reads_the_stored_result_of_chapter_8():
    subs, chart = headline.read_headline(ROOT / headline.NOTEBOOK)
    assert 0 < float(subs["headline_bleu"]) <= 100
    assert float(subs["headline_minutes"]) > 0
    assert subs["headline_config"] in {"full", "small"}
    assert subs["headline_german"] and subs["headline_translation"]
    assert "vegaEmbed" in chart  # the altair chart, as stored


def test_a_notebook_without_outputs_fails_the_build_clearly(tmp_path):
    nb = json.loads((ROOT / headline.NOTEBOOK).read_text(encoding="utf-8"))
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            cell["outputs"], cell["execution_count"] = [], None
    path = tmp_path / "08_training.ipynb"
    path.write_text(json.dumps(nb), encoding="utf-8")
    with pytest.raises(ExtensionError, match="BLEU line.*example translations.*attention chart"):
        headline.read_headline(path)
    with pytest.raises(ExtensionError, match="missing"):
        headline.read_headline(tmp_path / "nothing.ipynb")
