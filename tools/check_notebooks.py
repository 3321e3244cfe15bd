"""Checks on the committed chapters that neither ruff nor nbval makes.

- every code cell has been executed (nbval skips cells whose execution_count is null, and the
  book would show nothing there) and no stored output is an error;
- no cell is tagged `raises-exception`: nbval accepts such a cell, but Colab's and Jupyter's
  "Run all" stop there and the reader never runs the rest of the chapter. A cell that shows an
  error catches it (`with expect_error(...)` from transformer_book) and prints it;
- no markdown cell holds a python code block: nothing executes it, so nothing notices when it
  breaks. Solutions are code cells (tagged `hide-input`, collapsed in the HTML), run by nbval;
- the first code cell is the install cell of tools/install_cell.py: it asks for the version in
  pyproject.toml and installs from the repository URL set in _config.yml, so the Colab button,
  the repository button and the install cells cannot disagree;
- every figure a code cell shows has alt text (cell metadata mystnb.image.alt), which the book
  puts on the image;
- every chapter is listed in _toc.yml.

Exit status 1 with one line per problem.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from install_cell import ROOT, install_cell_source

# A fenced block whose info string names Python (```python, ```py, ```ipython3,
# ```{code-cell} ...): code that looks runnable but never runs.
PYTHON_FENCE = re.compile(r"^\s*(```|~~~)\s*(\{code-cell\}|(?:python3?|py|ipython3?)\b)", re.MULTILINE)


def check(nb_path: Path, install_source: str, toc: str) -> list[str]:
    problems = []
    rel = nb_path.relative_to(ROOT)
    cells = json.loads(nb_path.read_text())["cells"]
    code = [c for c in cells if c["cell_type"] == "code" and "".join(c["source"]).strip()]
    if not code:
        return [f"{rel}: no code cells"]
    for i, cell in enumerate(code):
        tags = cell.get("metadata", {}).get("tags", [])
        if cell.get("execution_count") is None:
            problems.append(f"{rel}: code cell {i} was never executed (run `make execute NB={rel}`)")
        if any(o.get("output_type") == "error" for o in cell.get("outputs", [])):
            problems.append(f"{rel}: code cell {i} stores an error output")
        has_image = any(
            any(m.startswith("image/") for m in o.get("data", {})) for o in cell.get("outputs", [])
        )
        alt = cell.get("metadata", {}).get("mystnb", {}).get("image", {}).get("alt", "")
        if has_image and len(alt.strip()) < 15:
            problems.append(
                f"{rel}: code cell {i} shows a figure without alt text: set its cell metadata "
                '{"mystnb": {"image": {"alt": "what the figure shows"}}} (read aloud by screen readers)'
            )
        if "raises-exception" in tags:
            problems.append(
                f"{rel}: code cell {i} is tagged raises-exception: Colab's 'Run all' stops there; "
                "show the error with `with expect_error(...)` instead"
            )
    for i, cell in enumerate(cells):
        if cell["cell_type"] == "markdown" and PYTHON_FENCE.search("".join(cell["source"])):
            problems.append(
                f"{rel}: markdown cell (index {i}) holds a python code block that nothing runs; "
                "make it a code cell (tag hide-input to collapse a solution)"
            )
    if "".join(code[0]["source"]) != install_source:
        problems.append(
            f"{rel}: the first code cell is not the install cell of tools/install_cell.py "
            "(version from pyproject.toml, URL from _config.yml); run `python tools/install_cell.py --write`"
        )
    if str(rel.with_suffix("")) not in toc:
        problems.append(f"{rel}: not listed in _toc.yml")
    return problems


def main() -> int:
    install_source = install_cell_source()
    toc = (ROOT / "_toc.yml").read_text()
    toc = "\n".join(line for line in toc.splitlines() if not line.lstrip().startswith("#"))
    problems = []
    notebooks = sorted((ROOT / "chapters").glob("*.ipynb"))
    for nb in notebooks:
        problems += check(nb, install_source, toc)
    for p in problems:
        print(p)
    print(f"check_notebooks: {len(notebooks)} notebooks, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
