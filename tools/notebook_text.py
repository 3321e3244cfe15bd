"""Print the text of the chapters' cells (markdown and code sources, not outputs), one file per
notebook with a `path:cell` header, for spell checkers that cannot read .ipynb JSON.

Usage: python tools/notebook_text.py OUT_DIR   writes OUT_DIR/<chapter>.txt, one per notebook.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__)
        return 2
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    for nb in sorted((ROOT / "chapters").glob("*.ipynb")):
        cells = json.loads(nb.read_text())["cells"]
        text = [f"# {nb.relative_to(ROOT)} cell {i}\n{''.join(c['source'])}\n" for i, c in enumerate(cells)]
        (out / f"{nb.stem}.txt").write_text("".join(text))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
