"""Chapter 8's stored attention charts against the run record the chapter's text is checked on.

The "What to look for" figures are measured by a cell of the chapter (``attention_facts``) on the
maps kept in the cpu configuration's record, benchmarks/results/cpu-2026-11-27/chapter8_cpu_run.json.
These tests close the loop without a model: the three charts stored in the notebook (read from the
altair/vega-lite specs embedded in the cells' text/html outputs) show the same sentence and the same
weights as that record, and the text states the figures the cell asserts. If the stored outputs or
the record change, these tests fail until the text, the cell and the record agree again.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "chapters" / "08_training.ipynb"
RECORD = ROOT / "benchmarks" / "results" / "cpu-2026-11-27" / "chapter8_cpu_run.json"
TITLES = {"decoder_cross": "Encoder-decoder", "encoder": "Encoder self", "decoder_self": "Decoder self"}


@pytest.fixture(scope="module")
def nb():
    return json.loads(NOTEBOOK.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def record():
    return json.loads(RECORD.read_text(encoding="utf-8"))["attention"]


def chart(nb, title_start: str):
    """(N, H, L, S) weights, query labels and key labels of the stored chart with that title."""
    for cell in nb["cells"]:
        for out in cell.get("outputs", []):
            html = "".join(out.get("data", {}).get("text/html", ""))
            if "function(spec, embedOpt)" not in html:
                continue
            start = html.index("})(", html.index("function(spec, embedOpt)")) + 3
            spec, _ = json.JSONDecoder().raw_decode(html[start:])
            if not spec.get("title", "").startswith(title_start):
                continue
            (rows,) = spec["datasets"].values()
            keys, queries = spec["encoding"]["x"]["sort"], spec["encoding"]["y"]["sort"]
            w = np.full((1 + max(r["layer"] for r in rows), 1 + max(r["head"] for r in rows),
                         len(queries), len(keys)), np.nan)
            for r in rows:
                w[r["layer"], r["head"], queries.index(r["query"]), keys.index(r["key"])] = r["weight"]
            assert not np.isnan(w).any(), f"stored chart {title_start!r} misses some weights"
            return w, queries, keys
    raise LookupError(f"{NOTEBOOK.name} stores no chart titled {title_start!r}...; "
                      "re-execute the chapter to store it")


@pytest.mark.parametrize("kind", list(TITLES))
def test_stored_charts_show_the_records_maps(nb, record, kind):
    w, queries, keys = chart(nb, TITLES[kind])
    src, tgt = record["src_tokens"], record["tgt_tokens"]
    assert keys == (tgt if kind == "decoder_self" else src)
    assert queries == (src if kind == "encoder" else tgt)
    maps = np.array(record["maps"][kind])
    assert w.shape == maps.shape
    # the chart rounds to 2 decimals, the record to 3
    np.testing.assert_allclose(w, maps, atol=0.0051, err_msg=f"{kind}: chart and record differ")


def test_the_chapter_checks_the_record_the_charts_come_from(nb, record):
    """The cell after "What to look for" asserts its figures on this record's sentence."""
    code = chapter_code(nb)
    assert "def attention_facts(" in code and RECORD.name in code
    assert text_attention(nb)["sentence"] == (record["German"], record["translation"])


def chapter_code(nb) -> str:
    return "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")


def text_attention(nb) -> dict:
    """The chapter's TEXT_ATTENTION: the figures its cell asserts on the record's maps."""
    literal = chapter_code(nb).split("TEXT_ATTENTION = ", 1)[1].split("\n}\n", 1)[0] + "\n}"
    return ast.literal_eval(literal)


def what_to_look_for(nb) -> str:
    (text,) = ["".join(c["source"]) for c in nb["cells"]
               if c["cell_type"] == "markdown" and "### What to look for" in "".join(c["source"])]
    return text


def test_the_text_states_the_figures_the_cell_checks(nb, record):
    """Each figure of TEXT_ATTENTION appears in the text, as a share or a percentage."""
    text = " ".join(what_to_look_for(nb).split())
    assert record["German"] in text and record["translation"] in text
    numbers = set(re.findall(r"\d+(?:\.\d+)?", text))
    facts = text_attention(nb)

    def flat(x):
        if isinstance(x, (list, tuple)):
            for y in x:
                yield from flat(y)
        elif isinstance(x, (int, float)):
            yield x

    missing = []
    for key, value in facts.items():
        if key == "sentence" or key.startswith("encoder, Reparieren"):
            continue  # the sentence is checked above; the head list is written out in words
        if key == "decoder, on <bos>":  # the text gives the range of the top three, then the rest
            (top3, rest) = value
            value = (min(top3), max(top3), rest)
        for x in flat(value):
            forms = {str(x), f"{x:.2f}", f"{x:.1f}", f"{round(100 * x)}" if isinstance(x, float) else str(x)}
            if not forms & numbers:
                missing.append((key, x))
    assert not missing, f"'What to look for' no longer states {missing}: update the text or TEXT_ATTENTION"
