"""The redrawn Figures 1 and 2: every code name on a box exists in the code it names, and the
committed SVGs are what tools/diagrams.py draws (so the pictures cannot drift from the code)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import matplotlib
import pytest
import torch
import transformer_book
from diagrams import CHAPTER7_NAMES, FIGURES, code_names, figure1_transformer
from transformer_book import TransformerConfig
from transformer_book import train as train_module

matplotlib.use("Agg")
ROOT = Path(__file__).resolve().parent.parent
CHAPTER7 = ROOT / "chapters" / "07_full_model.ipynb"
# Words on the boxes that are not names in the code: the stack count, the cross-attention note.
NOT_CODE = {"N", "cross"}
IDENTIFIER = r"[A-Za-z_][A-Za-z_0-9.]*"


def resolves(name: str, model, attention) -> bool:
    if name in NOT_CODE:
        return True
    head, _, attr = name.partition(".")
    if attr:  # Class.attribute: the attribute of an instance of that class
        instance = {"Transformer": model, "MultiHeadAttention": attention}.get(head)
        return instance is not None and hasattr(instance, attr)
    spaces = [transformer_book, train_module, attention, torch.Tensor]
    return any(hasattr(space, name) for space in spaces)


def resolves_in_chapter7(name: str, code: str) -> bool:
    """A name chapter 7's code defines or uses; Class.attribute: the class and ``self.attribute``."""
    if name in NOT_CODE:
        return True
    head, _, attr = name.partition(".")
    if attr:
        return f"class {head}(" in code and f"self.{attr}" in code
    return re.search(rf"\b{re.escape(name)}\b", code) is not None


@pytest.mark.parametrize("name", sorted(n for n in FIGURES if n != "figure1_chapter7"))
def test_every_code_name_on_the_figure_exists(name):
    torch.manual_seed(0)
    model = transformer_book.Transformer(TransformerConfig.small(src_vocab_size=11, tgt_vocab_size=11))
    attention = model.encoder.layers[0].self_attn
    fig = FIGURES[name]()
    names = code_names(fig)
    assert len(names) >= 6, names
    identifiers = {w for text in names for w in re.findall(IDENTIFIER, text)}
    missing = sorted(w for w in identifiers if not resolves(w, model, attention))
    assert not missing, f"{name} names code that does not exist: {missing}"


def test_every_code_name_on_chapter7s_figure_exists_in_chapter7():
    cells = json.loads(CHAPTER7.read_text(encoding="utf-8"))["cells"]
    code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    names = code_names(FIGURES["figure1_chapter7"]())
    assert len(names) >= 6, names
    identifiers = {w for text in names for w in re.findall(IDENTIFIER, text)}
    missing = sorted(w for w in identifiers if not resolves_in_chapter7(w, code))
    assert not missing, f"chapter 7's Figure 1 names code the chapter lacks: {missing}"


def test_chapter7s_figure_renames_only_names_figure1_has():
    """A box renamed in the package's Figure 1 must not keep a stale entry in CHAPTER7_NAMES."""
    assert set(CHAPTER7_NAMES) <= set(code_names(figure1_transformer()))


def test_committed_svgs_are_up_to_date():
    result = subprocess.run([sys.executable, str(ROOT / "tools" / "draw_figures.py"), "--check"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
