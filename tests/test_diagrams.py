"""The redrawn Figures 1 and 2: every code name on a box exists, and the committed SVGs are what
transformer_book.diagrams draws (so the pictures cannot drift from the code)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import matplotlib
import pytest
import torch
import transformer_book
from transformer_book import TransformerConfig
from transformer_book import train as train_module
from transformer_book.diagrams import FIGURES, code_names

matplotlib.use("Agg")
ROOT = Path(__file__).resolve().parent.parent
# Words on the boxes that are not names in the code: the stack count, the cross-attention note.
NOT_CODE = {"N", "cross"}


def resolves(name: str, model, attention) -> bool:
    if name in NOT_CODE:
        return True
    head, _, attr = name.partition(".")
    if attr:  # Class.attribute: the attribute of an instance of that class
        instance = {"Transformer": model, "MultiHeadAttention": attention}.get(head)
        return instance is not None and hasattr(instance, attr)
    spaces = [transformer_book, train_module, attention, torch.Tensor]
    return any(hasattr(space, name) for space in spaces)


@pytest.mark.parametrize("name", sorted(FIGURES))
def test_every_code_name_on_the_figure_exists(name):
    torch.manual_seed(0)
    model = transformer_book.Transformer(TransformerConfig.small(src_vocab_size=11, tgt_vocab_size=11))
    attention = model.encoder.layers[0].self_attn
    fig = FIGURES[name]()
    names = code_names(fig)
    assert len(names) >= 6, names
    identifiers = {w for text in names for w in re.findall(r"[A-Za-z_][A-Za-z_0-9.]*", text)}
    missing = sorted(w for w in identifiers if not resolves(w, model, attention))
    assert not missing, f"{name} names code that does not exist: {missing}"


def test_committed_svgs_are_up_to_date():
    result = subprocess.run([sys.executable, str(ROOT / "tools" / "draw_figures.py"), "--check"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
