"""Sphinx extension: the landing page quotes the training chapter's stored result, never a copy.

``intro.md`` shows what the reader will build: the BLEU score chapter 8 reached, one of its
translations and its trained encoder-decoder attention. Those come from the outputs stored in
``chapters/08_training.ipynb`` (the run nbval and the browser check vouch for), read here when
the build starts:

- MyST substitutions ``headline_bleu``, ``headline_minutes``, ``headline_hardware``,
  ``headline_config``, ``headline_german``, ``headline_reference`` and ``headline_translation``;
- the stored altair chart of the encoder-decoder attention, written to
  ``_build/headline/attention.html`` for intro.md's ``{raw} html`` block (offline_assets then
  points its vega scripts at the book's own copies, as on every page).

If the chapter stores no such outputs (it was saved unexecuted, or its cells changed), the build
fails and says which output is missing, so the landing page can never show a stale number.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from sphinx.application import Sphinx
from sphinx.errors import ExtensionError

NOTEBOOK = "chapters/08_training.ipynb"
CHART_FILE = "_build/headline/attention.html"
RESULT_RE = re.compile(
    r"(?P<config>cpu|full|quick|small) configuration, trained in (?P<minutes>[0-9.]+) min on "
    r"(?P<hardware>.+?)(?:, torch [^:]*)?:\ntest 2016 BLEU (?P<bleu>[0-9.]+) \(beam 4"
)
# describe_hardware's line for a CPU, "CPU: AMD EPYC, 2 threads", read as "2 CPU threads (AMD EPYC)"
CPU_RE = re.compile(r"CPU: (?P<cpu>.+), (?P<threads>[0-9]+) threads?")
EXAMPLE_RE = re.compile(r"German   : (.+)\nreference: (.+)\ngreedy   : .+\nbeam 4   : (.+)\n")


def _texts(cell: dict) -> list[str]:
    out = []
    for o in cell.get("outputs", []):
        if o.get("output_type") == "stream":
            out.append("".join(o["text"]))
        elif "data" in o:
            out.append("".join(o["data"].get("text/plain", "")))
    return out


def _hardware(line: str) -> str:
    """The hardware as the sentence of intro.md reads it ("on 2 CPU threads (AMD EPYC)")."""
    cpu = CPU_RE.fullmatch(line)
    return f"{cpu['threads']} CPU threads ({cpu['cpu']})" if cpu else line


def read_headline(path: Path) -> tuple[dict[str, str], str]:
    """The substitutions and the chart HTML, from the stored outputs of chapter 8."""
    if not path.is_file():
        raise ExtensionError(f"headline: {path} is missing")
    cells = [c for c in json.loads(path.read_text(encoding="utf-8"))["cells"]
             if c["cell_type"] == "code"]
    result = example = chart = None
    for cell in cells:
        source = "".join(cell["source"])
        for text in _texts(cell):
            result = result or RESULT_RE.search(text)
            example = example or EXAMPLE_RE.search(text)
        if chart is None and 'maps["decoder_cross"]' in source and "attention_chart" in source:
            for o in cell.get("outputs", []):
                html = o.get("data", {}).get("text/html")
                if html:
                    chart = "".join(html)
    missing = [name for name, found in [("the BLEU line of the translation cell", result),
                                        ("the example translations", example),
                                        ("the encoder-decoder attention chart", chart)]
               if not found]
    if missing:
        raise ExtensionError(
            f"headline: {path} stores no output with {', '.join(missing)}; execute the chapter "
            "(make execute NB=chapters/08_training.ipynb, or on a GPU) and commit it"
        )
    subs = {
        "headline_bleu": result["bleu"],
        "headline_minutes": result["minutes"],
        "headline_hardware": _hardware(result["hardware"]),
        "headline_config": result["config"],
        "headline_german": example[1].strip(),
        "headline_reference": example[2].strip(),
        "headline_translation": example[3].strip(),
    }
    return subs, chart


def add_headline(app: Sphinx, config) -> None:
    root = Path(app.confdir)
    subs, chart = read_headline(root / NOTEBOOK)
    config.myst_substitutions = {**(config.myst_substitutions or {}), **subs}
    target = root / CHART_FILE
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(chart, encoding="utf-8")


def setup(app: Sphinx) -> dict:
    app.connect("config-inited", add_headline)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
