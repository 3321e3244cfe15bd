"""How long a learner needs to read the book, measured on what a page shows before any click.

Usage:
    python tools/reading_time.py                      # the built HTML in _build/html (make book)
    python tools/reading_time.py --notebook chapters/02_self_attention.ipynb [...]
    python tools/reading_time.py --max-core-hours 3   # exit 1 when chapters 1-8 need longer

Visible means not folded: the content of a closed ``<details>`` (Jupyter Book's ``hide-input``,
``hide-output``, ``hide-cell`` buttons, sphinx-design's ``{dropdown}``) and of an admonition with
``:class: dropdown`` (sphinx-togglebutton) counts only by its title or summary. Per page it counts

- words of visible prose, headings, tables and printed outputs, read at 170 words a minute;
- lines of visible code (code cells' sources, code blocks in the text), read at 25 lines a minute;
- visible lines that assert (``assert``, ``assert_close``, ``assert_equal``);
- visible mentions of machines, stored records, result files and thread counts (MENTIONS), the
  lab bookkeeping a learner should meet only when it opens the evidence.

With ``--notebook`` the same counts come from the ``.ipynb`` itself (cell tags and dropdown
admonitions in markdown), a quick estimate while editing a chapter; the built HTML is the measure.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORDS_PER_MINUTE = 170
CODE_LINES_PER_MINUTE = 25
# The core path a learner reads first; the rest (chapters 9-11, the lab notes) are deep dives.
CORE = [f"chapters/{name}" for name in (
    "01_rnn_limitations", "02_self_attention", "03_multi_head_attention", "04_masking",
    "05_layernorm_vs_batchnorm", "06_positional_encoding", "07_full_model", "08_training")]

# Lab bookkeeping in the lesson: machine and CPU names, instruction sets, stored records and
# result files, thread counts, run dates. Words that teach (GPU, CPU, "two cores") do not count.
MENTIONS = re.compile(
    r"\b(?:EPYC|Xeon|H100|H200|A100|AVX[-\w]*|AMX|Zen ?\d|lscpu|Ryzen|Intel|AMD"
    r"|records?|stored runs?|results?/\S*|benchmarks/\S*|\S+\.json"
    r"|\d+ threads?|threads? \d+|20\d\d-\d\d-\d\d)\b",
    re.IGNORECASE,
)
ASSERT_LINE = re.compile(r"^\s*(?:assert\b|\S*assert_(?:close|equal)\b)")
HIDING_TAGS = {"hide-input", "hide-cell", "remove-input", "remove-cell"}
HIDING_OUTPUT_TAGS = {"hide-output", "hide-cell", "remove-output", "remove-cell"}


@dataclass
class Count:
    """What one page shows before any click."""

    words: int = 0
    code_lines: int = 0
    assert_lines: int = 0
    mentions: int = 0

    @property
    def minutes(self) -> float:
        return self.words / WORDS_PER_MINUTE + self.code_lines / CODE_LINES_PER_MINUTE

    def add_text(self, text: str) -> None:
        self.words += len(text.split())
        self.mentions += len(MENTIONS.findall(text))

    def add_code(self, code: str) -> None:
        lines = [line for line in code.splitlines() if line.strip()]
        self.code_lines += len(lines)
        self.assert_lines += sum(bool(ASSERT_LINE.match(line)) for line in lines)
        self.mentions += len(MENTIONS.findall(code))


def count_html(path: Path) -> Count:
    """The visible content of one built page (its <article>)."""
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(path.read_text(encoding="utf-8"), "html.parser")
    article = soup.find("article") or soup
    for tag in article.find_all(["script", "style", "noscript"]):
        tag.decompose()
    for tag in article.select("a.headerlink"):
        tag.decompose()
    # Folded: keep only a <details>'s summary and a dropdown admonition's title.
    for details in article.find_all("details"):
        if details.has_attr("open"):
            continue
        for child in list(details.children):
            if getattr(child, "name", None) != "summary":
                child.extract()
    for box in article.select(".admonition.dropdown, .toggle"):
        for child in list(box.children):
            classes = getattr(child, "get", lambda *_: None)("class") or []
            if "admonition-title" not in classes:
                child.extract()
    count = Count()
    # Code: the inputs of code cells and literal blocks in the text (not printed outputs).
    for pre in article.select("div.highlight pre"):
        if pre.find_parent(class_="cell_output") is None:
            count.add_code(pre.get_text())
            pre.decompose()
    count.add_text(article.get_text(" "))
    return count


def _markdown_visible(source: str) -> str:
    """A markdown cell without its dropdown admonitions/directives (their titles stay)."""
    out, fence = [], None
    lines = source.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        opening = re.match(r"^(\s*)(`{3,}|:{3,})\{(admonition|dropdown|note|tip|warning)\}(.*)$", line)
        if fence is None and opening:
            marker, kind, title = opening.group(2), opening.group(3), opening.group(4)
            body, j = [], i + 1
            while j < len(lines) and lines[j].strip() != marker:
                body.append(lines[j])
                j += 1
            folded = kind == "dropdown" or any(
                re.match(r"^\s*:class:.*\bdropdown\b", b) for b in body)
            out.append(title)
            if not folded:
                out.extend(b for b in body if not b.lstrip().startswith(":"))
            i = j + 1
            continue
        if not re.match(r"^\s*:[\w-]+:", line):  # a directive's option (:alt:, :width:)
            out.append(line)
        i += 1
    return "\n".join(out)


def count_notebook(path: Path) -> Count:
    """An estimate from the notebook: cell tags and dropdown admonitions decide what shows."""
    count = Count()
    for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
        source = "".join(cell["source"])
        tags = set(cell.get("metadata", {}).get("tags", []))
        if cell["cell_type"] == "markdown":
            text = _markdown_visible(source)
            code_blocks = re.findall(r"^```[^\n{]*\n(.*?)^```", text, re.MULTILINE | re.DOTALL)
            for block in code_blocks:
                count.add_code(block)
            count.add_text(re.sub(r"^```[^\n{]*\n.*?^```", " ", text, flags=re.MULTILINE | re.DOTALL))
            continue
        if cell["cell_type"] != "code":
            continue
        if not tags & HIDING_TAGS:
            count.add_code(source)
        if tags & {"hide-input", "hide-output", "hide-cell"}:
            count.add_text("Show code cell")  # the button's label, as the page shows it
        if not tags & HIDING_OUTPUT_TAGS:
            for output in cell.get("outputs", []):
                data = output.get("data", {})
                if "text/html" in data:
                    html = "".join(data["text/html"])
                    if "<script" not in html:  # a table: its text; a chart: none
                        count.add_text(re.sub(r"<[^>]+>", " ", html))
                    continue
                if any(key.startswith("image/") for key in data):
                    continue  # a figure: its "<Figure size ...>" text is not shown
                count.add_text("".join(output.get("text") or data.get("text/plain", "")))
    return count


def report(rows: list[tuple[str, Count]]) -> str:
    lines = [f"{'page':40} {'words':>7} {'code':>6} {'assert':>6} {'mention':>7} {'minutes':>8}"]
    for name, c in rows:
        lines.append(f"{name:40} {c.words:7,} {c.code_lines:6,} {c.assert_lines:6,} "
                     f"{c.mentions:7,} {c.minutes:8.1f}")
    return "\n".join(lines)


def total(rows: list[tuple[str, Count]]) -> Count:
    t = Count()
    for _, c in rows:
        t.words += c.words
        t.code_lines += c.code_lines
        t.assert_lines += c.assert_lines
        t.mentions += c.mentions
    return t


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--html", type=Path, default=ROOT / "_build" / "html",
                        help="the built book (default: _build/html)")
    parser.add_argument("--notebook", type=Path, nargs="+",
                        help="estimate from these .ipynb files instead of the built book")
    parser.add_argument("--max-core-hours", type=float,
                        help="exit 1 if chapters 1-8 take longer than this many hours")
    args = parser.parse_args(argv)

    if args.notebook:
        missing = [p for p in args.notebook if not p.is_file()]
        if missing:
            parser.error(f"--notebook: no such file {missing[0]}")
        rows = [(p.stem, count_notebook(p)) for p in args.notebook]
        print(report(rows))
        return 0

    html = args.html
    if not (html / "index.html").is_file():
        parser.error(f"--html: no built book at {html} (run `make book` first)")
    core, deep = [], []
    for page in sorted(html.glob("chapters/*.html")):
        name = f"chapters/{page.stem}"
        (core if name in CORE else deep).append((name, count_html(page)))
    missing = sorted(set(CORE) - {n for n, _ in core})
    if missing:
        parser.error(f"--html: {html} lacks {', '.join(missing)}")
    print(report(core))
    c = total(core)
    print(f"\ncore path (chapters 1-8): {c.words:,} words, {c.code_lines:,} code lines, "
          f"{c.assert_lines} assert lines, {c.mentions} mentions of machines/records/threads: "
          f"{c.minutes / 60:.2f} h")
    if deep:
        print()
        print(report(deep))
        d = total(deep)
        print(f"\ndeep dives: {d.words:,} words, {d.code_lines:,} code lines: {d.minutes / 60:.2f} h")
    if args.max_core_hours is not None and c.minutes / 60 > args.max_core_hours:
        print(f"chapters 1-8 need {c.minutes / 60:.2f} h, more than --max-core-hours "
              f"{args.max_core_hours}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
