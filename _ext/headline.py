"""Sphinx extension: the landing page quotes the training chapter's stored result, never a copy.

``intro.md`` shows what the reader will build: the BLEU score chapter 8 reached, one of its
translations and its trained encoder-decoder attention. Those come from the outputs stored in
``chapters/08_training.ipynb`` (the run nbval and the browser check vouch for), read here when
the build starts:

- MyST substitutions ``headline_bleu``, ``headline_minutes`` (and ``headline_about_minutes``,
  rounded to 5 for the reader), ``headline_hardware``, ``headline_config``, ``headline_german``,
  ``headline_reference`` and ``headline_translation``: the showcase is the printed example that
  the model translated best (sentence-level BLEU against its reference), not a hand-picked one;
- ``headline_chart_german``: the German sentence of the stored attention chart;
- ``minutes_<page>`` for every chapter and lab page (``minutes_01``, ``minutes_lab_a``, ...)
  and ``minutes_core`` (chapters 1-8, the sum of the rounded figures): the reading times of
  tools/reading_time.py, counted from the notebooks' visible cells and rounded to 5 minutes;
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
CHART_GERMAN_RE = re.compile(r"^German: (.+)$", re.MULTILINE)


def _texts(cell: dict) -> list[str]:
    out = []
    for o in cell.get("outputs", []):
        if o.get("output_type") == "stream":
            out.append("".join(o["text"]))
        elif "data" in o:
            out.append("".join(o["data"].get("text/plain", "")))
    return out


def read_hardware(line: str) -> str:
    """The hardware as the sentence of intro.md reads it ("on 2 CPU threads (AMD EPYC)")."""
    cpu = CPU_RE.fullmatch(line)
    return f"{cpu['threads']} CPU threads ({cpu['cpu']})" if cpu else line


def read_headline(path: Path) -> tuple[dict[str, str], str]:
    """The substitutions and the chart HTML, from the stored outputs of chapter 8."""
    if not path.is_file():
        raise ExtensionError(f"headline: {path} is missing")
    cells = [c for c in json.loads(path.read_text(encoding="utf-8"))["cells"]
             if c["cell_type"] == "code"]
    result = chart = chart_german = None
    examples = []
    for cell in cells:
        source = "".join(cell["source"])
        for text in _texts(cell):
            result = result or RESULT_RE.search(text)
            examples += EXAMPLE_RE.findall(text)
            if "need_weights=True" in source:
                chart_german = chart_german or CHART_GERMAN_RE.search(text)
        if chart is None and 'maps["decoder_cross"]' in source and "attention_chart" in source:
            for o in cell.get("outputs", []):
                html = o.get("data", {}).get("text/html")
                if html:
                    chart = "".join(html)
    missing = [name for name, found in [("the BLEU line of the translation cell", result),
                                        ("the example translations", examples),
                                        ("the encoder-decoder attention chart", chart),
                                        ("the German sentence of the chart", chart_german)]
               if not found]
    if missing:
        raise ExtensionError(
            f"headline: {path} stores no output with {', '.join(missing)}; execute the chapter "
            "(make execute NB=chapters/08_training.ipynb, or on a GPU) and commit it"
        )
    german, reference, translation = best_example(examples)
    subs = {
        "headline_bleu": result["bleu"],
        "headline_minutes": result["minutes"],
        "headline_about_minutes": str(_to_five(float(result["minutes"]))),
        "headline_hardware": read_hardware(result["hardware"]),
        "headline_config": result["config"],
        "headline_german": german.strip(),
        "headline_reference": reference.strip(),
        "headline_translation": translation.strip(),
        "headline_chart_german": chart_german[1].strip(),
    }
    return subs, chart


def _to_five(minutes: float) -> int:
    """Minutes as a reader is told them: to the nearest 5, at least 5."""
    return max(5, 5 * round(minutes / 5))


def best_example(examples: list[tuple[str, str, str]]) -> tuple[str, str, str]:
    """The (German, reference, beam 4) example with the highest sentence BLEU; first on ties."""
    import sacrebleu

    scores = [sacrebleu.sentence_bleu(out, [ref]).score for _, ref, out in examples]
    return examples[scores.index(max(scores))]


def reading_times(root: Path) -> dict[str, str]:
    """``minutes_<page>`` per chapter/lab notebook and ``minutes_core`` (their sum, chapters 1-8)."""
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location("reading_time", root / "tools" / "reading_time.py")
    reading_time = sys.modules.setdefault("reading_time", importlib.util.module_from_spec(spec))
    spec.loader.exec_module(reading_time)
    subs, core = {}, 0
    for nb in sorted((root / "chapters").glob("*.ipynb")):
        minutes = _to_five(reading_time.count_notebook(nb).minutes)
        key = nb.stem.split("_")[0] if nb.stem[0].isdigit() else "_".join(nb.stem.split("_")[:2])
        subs[f"minutes_{key}"] = str(minutes)
        if f"chapters/{nb.stem}" in reading_time.CORE:
            core += minutes
    subs["minutes_core"] = str(core)  # the sum of the table's rounded figures
    return subs


def add_headline(app: Sphinx, config) -> None:
    root = Path(app.confdir)
    subs, chart = read_headline(root / NOTEBOOK)
    subs.update(reading_times(root))
    config.myst_substitutions = {**(config.myst_substitutions or {}), **subs}
    target = root / CHART_FILE
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(chart, encoding="utf-8")


def setup(app: Sphinx) -> dict:
    app.connect("config-inited", add_headline)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
