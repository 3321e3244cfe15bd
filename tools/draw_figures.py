"""Draw the paper's Figures 1 and 2 (tools/diagrams.py) into chapters/images/*.svg: Figure 1
with the package's names and with chapter 7's, Figure 2 with the package's.

Usage: python tools/draw_figures.py [--check]
With --check nothing is written; exit 1 if a committed file differs from what the code draws.
"""

from __future__ import annotations

import io
import re
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from diagrams import FIGURES  # noqa: E402

OUT = Path(__file__).resolve().parent.parent / "chapters" / "images"


def render(name: str) -> bytes:
    """The SVG bytes of one figure, reproducible: no date, fixed ids, text kept as text."""
    plt.rcParams["svg.hashsalt"] = "transformer-book"
    plt.rcParams["svg.fonttype"] = "none"  # text stays text: searchable, sharp, small
    fig = FIGURES[name]()
    buf = io.BytesIO()
    fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    plt.close(fig)
    return buf.getvalue()


def _comparable(svg: bytes) -> bytes:
    """The SVG with its generated ids masked: matplotlib derives clip-path ids from the data, and
    they differ between NumPy releases (1.x and 2.x) for the same drawing."""
    return re.sub(rb"\bp[0-9a-f]{10}\b", b"pID", svg)


def main(argv: list[str]) -> int:
    check = argv == ["--check"]
    stale = []
    OUT.mkdir(exist_ok=True)
    for name in FIGURES:
        path = OUT / f"{name}.svg"
        data = render(name)
        if check:
            if not path.exists() or _comparable(path.read_bytes()) != _comparable(data):
                stale.append(str(path))
        else:
            path.write_bytes(data)
            print(f"wrote {path} ({len(data):,} bytes)")
    for path in stale:
        print(f"{path} differs from what tools/diagrams.py draws: run tools/draw_figures.py")
    return 1 if stale else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
