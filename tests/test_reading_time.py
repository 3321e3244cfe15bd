"""tools/reading_time.py counts what a page shows before any click, on small made-up pages."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import reading_time

ROOT = Path(__file__).resolve().parent.parent

PAGE = """<html><body><article class="bd-article">
<h1>Attention<a class="headerlink" href="#a">#</a></h1>
<p>one two three four five six</p>
<div class="cell docutils container"><div class="cell_input"><div class="highlight"><pre>x = 1
assert x == 1

y = 2</pre></div></div>
<div class="cell_output"><div class="highlight"><pre>printed on the EPYC machine</pre></div></div></div>
<div class="cell tag_hide-input"><details class="hide above-input"><summary>Show code</summary>
<div class="cell_input"><div class="highlight"><pre>hidden = 1
assert hidden</pre></div></div></details></div>
<div class="admonition dropdown"><p class="admonition-title">How we know</p>
<p>the stored record from results/cpu.json, 2 threads, folded away</p></div>
<details class="sd-dropdown" open><summary>Open box</summary><p>seven eight</p></details>
</article></body></html>"""


def test_html_counts_only_what_shows_before_a_click(tmp_path):
    page = tmp_path / "page.html"
    page.write_text(PAGE, encoding="utf-8")
    c = reading_time.count_html(page)
    # heading 1 + 6 + output 5 + "Show code" 2 + "How we know" 3 + open box 2 + 2 words
    assert c.words == 1 + 6 + 5 + 2 + 3 + 2 + 2
    assert (c.code_lines, c.assert_lines) == (3, 1)  # blank lines and folded code do not count
    assert c.mentions == 1  # EPYC in the visible output; the folded record, path, threads not
    assert c.minutes == pytest.approx(c.words / 170 + 3 / 25)


def test_notebook_estimate_follows_tags_and_dropdowns(tmp_path):
    cells = [
        {"cell_type": "markdown", "metadata": {},
         "source": "Lesson words here.\n\n```{admonition} How we know\n:class: dropdown\n"
                   "Ten folded words about the H100 record in results/h100.json here.\n```\n"},
        {"cell_type": "code", "metadata": {"tags": ["hide-input"]}, "outputs": [],
         "source": "assert 1 == 1\n"},
        {"cell_type": "code", "metadata": {"tags": ["hide-cell"]},
         "outputs": [{"output_type": "stream", "text": "folded output words"}],
         "source": "print(2)\n"},
        {"cell_type": "code", "metadata": {},
         "outputs": [{"output_type": "stream", "text": "shown output"}],
         "source": "a = 1\nprint(a)\n"},
    ]
    nb = tmp_path / "x.ipynb"
    nb.write_text(json.dumps({"cells": cells}), encoding="utf-8")
    c = reading_time.count_notebook(nb)
    assert c.words == 3 + 3 + 2 + 2 * 3  # lesson, dropdown title, output, two buttons
    assert (c.code_lines, c.assert_lines, c.mentions) == (2, 0, 0)


def test_the_built_book_is_required(tmp_path, capsys):
    with pytest.raises(SystemExit):
        reading_time.main(["--html", str(tmp_path)])
    assert "make book" in capsys.readouterr().err
