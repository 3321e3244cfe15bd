"""Checks on the committed chapters that neither ruff nor nbval makes.

- every code cell has been executed (nbval skips cells whose execution_count is null, and the
  book would show nothing there) and no stored output is an error, unless the cell is tagged
  `raises-exception`;
- every chapter is listed in _toc.yml;
- the first code cell installs the package from the repository URL set in _config.yml, so the
  Colab button, the repository button and the install cells cannot disagree.

Exit status 1 with one line per problem.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def repository_url() -> str:
    text = (ROOT / "_config.yml").read_text()
    match = re.search(r"^repository:\s*\n\s+url:\s*(\S+)", text, re.MULTILINE)
    if not match:
        raise SystemExit("_config.yml has no repository.url")
    return match.group(1)


def check(nb_path: Path, url: str, toc: str) -> list[str]:
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
        if "raises-exception" not in tags and any(
            o.get("output_type") == "error" for o in cell.get("outputs", [])
        ):
            problems.append(f"{rel}: code cell {i} stores an error output")
    first = "".join(code[0]["source"])
    if f"git+{url}" not in first or "transformer_book" not in first:
        problems.append(
            f"{rel}: the first code cell must install the package from git+{url} "
            "when transformer_book is not importable (Colab)"
        )
    if str(rel.with_suffix("")) not in toc:
        problems.append(f"{rel}: not listed in _toc.yml")
    return problems


def main() -> int:
    url = repository_url()
    toc = (ROOT / "_toc.yml").read_text()
    toc = "\n".join(line for line in toc.splitlines() if not line.lstrip().startswith("#"))
    problems = []
    notebooks = sorted((ROOT / "chapters").glob("*.ipynb"))
    for nb in notebooks:
        problems += check(nb, url, toc)
    for p in problems:
        print(p)
    print(f"check_notebooks: {len(notebooks)} notebooks, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
