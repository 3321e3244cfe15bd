"""The book serves vega and MathJax itself (_ext/offline_assets.py): unit checks, no browser.

These fail fast when an altair upgrade asks for a vega version that package.json does not pin,
or writes its CDN addresses in a form the rewrite does not recognise.
"""

from __future__ import annotations

import json
from pathlib import Path

import altair as alt
import offline_assets
import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]

PINS = json.loads((ROOT / "package.json").read_text(encoding="utf-8"))["dependencies"]


def _altair_html() -> str:
    """What a chapter's chart cell stores: altair's default renderer output."""
    chart = alt.Chart(pd.DataFrame({"x": [1, 2], "y": [3, 4]})).mark_line().encode(x="x", y="y")
    return chart._repr_mimebundle_()["text/html"]


def test_every_package_is_pinned_exactly():
    for package in offline_assets.PACKAGES:
        assert package in PINS, f"package.json does not pin {package}"
        assert PINS[package][0].isdigit(), f"{package} pinned as a range {PINS[package]!r}"


def test_altair_chart_is_rewritten_to_local_files(tmp_path):
    page = tmp_path / "chapters" / "chart.html"
    page.parent.mkdir()
    html = _altair_html()
    assert "cdn.jsdelivr.net/npm/vega" in html  # what the notebook keeps, for Jupyter and Colab
    page.write_text(html, encoding="utf-8")
    entry = {p: f"npm/{p}/{Path(main).name}" for p, (_, main) in offline_assets.PACKAGES.items()}
    offline_assets.rewrite_page(page, tmp_path, entry, dict(PINS))
    out = page.read_text(encoding="utf-8")
    assert "cdn.jsdelivr.net" not in out
    assert '"../_static/npm/vega-lite/vega-lite.min.js?noext"' in out
    assert '"../_static/npm/vega-embed/vega-embed.min.js?noext"' in out


def test_pinned_versions_satisfy_what_altair_asks_for():
    asked = {m.group(1): m.group(2) for m in offline_assets.CDN_RE.finditer(_altair_html())}
    assert {"vega", "vega-lite", "vega-embed"} <= set(asked), asked
    for package in ("vega", "vega-lite", "vega-embed"):
        assert offline_assets.satisfies(PINS[package], asked[package]), (
            f"altair {alt.__version__} asks for {package}@{asked[package]}, package.json pins "
            f"{PINS[package]}: update package.json and package-lock.json"
        )


@pytest.mark.parametrize(
    ("installed", "wanted", "ok"),
    [
        ("6.4.1", "6.4.1", True),
        ("6.4.1", "6", True),
        ("6.4.1", "6.4", True),
        ("6.4.1", "6.5.0", False),
        ("7.0.0", "6", False),
        ("16.0.0", "6", False),
    ],
)
def test_version_match(installed, wanted, ok):
    assert offline_assets.satisfies(installed, wanted) is ok
