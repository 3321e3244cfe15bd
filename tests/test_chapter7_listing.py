"""Chapter 7 builds the model piece by piece, then shows the pieces again in one listing to copy
("The whole model in one place"). The two copies must not drift apart: every class and function
of the listing is defined, character for character, by one earlier cell of the chapter."""

import ast
import json
from pathlib import Path

CHAPTER = Path(__file__).resolve().parents[1] / "chapters" / "07_full_model.ipynb"


def _definitions(source: str) -> dict[str, str]:
    """The top-level classes and functions of ``source``: name -> their lines, as written."""
    lines = source.splitlines()
    return {node.name: "\n".join(lines[node.lineno - 1 - len(node.decorator_list):node.end_lineno])
            for node in ast.parse(source).body
            if isinstance(node, ast.ClassDef | ast.FunctionDef)}


def _code_cells() -> list[str]:
    cells = json.loads(CHAPTER.read_text(encoding="utf-8"))["cells"]
    return ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]


def test_the_listing_collects_the_pieces_built_before_it():
    cells = _code_cells()
    listing_at = next(i for i, src in enumerate(cells)
                      if "class Transformer(nn.Module)" in src and "class DecoderLayer" in src)
    listing = _definitions(cells[listing_at])
    assert {"MultiHeadAttention", "FeedForward", "AddNorm", "EncoderLayer", "DecoderLayer",
            "Transformer"} <= set(listing)
    built: dict[str, list[str]] = {}
    for src in cells[:listing_at]:
        for name, text in _definitions(src).items():
            built.setdefault(name, []).append(text)
    for name, text in listing.items():
        assert name in built, f"{name} is in the listing but never built before it"
        assert built[name][-1] == text, f"{name}: the listing's copy differs from the one built"
