"""The paper's Figure 1 (the Transformer) and Figure 2 (scaled dot-product and multi-head
attention), redrawn with matplotlib. Every box names the class or function that implements it:
in ``transformer_book`` (``figure1_transformer``, ``figure2_attention``) or, for chapter 7's copy
of Figure 1 (``figure1_chapter7``), in that chapter's own code.

``tools/draw_figures.py`` writes them as SVG into ``chapters/images/`` (the chapters show those
files); ``tests/test_diagrams.py`` checks that every name on a box exists in the code it names and
that the committed files are what this module draws. Drawn on an opaque white card with dark text,
so they read the same with the book's light and dark themes.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.patches import Circle, FancyArrowPatch, FancyBboxPatch

__all__ = ["CHAPTER7_NAMES", "FIGURES", "code_names", "figure1_chapter7", "figure1_transformer",
           "figure2_attention"]

# Fill colours follow the paper's Figure 1 (attention orange, feed-forward blue, Add & Norm
# yellow, embeddings pink), toned so dark text stays readable on them.
ATTENTION = "#f7c58f"
FEED_FORWARD = "#a8d8ea"
ADD_NORM = "#f3eaa0"
EMBEDDING = "#f4b6c2"
LINEAR = "#c9c3e6"
SOFTMAX = "#b8e0b0"
OPERATION = "#e3e3e3"
STACK = "#f5f5f5"
TEXT = "#1a1a1a"
LINE = "#404040"
CODE = "#1f4e79"  # the code names, in a blue that reads as "code"


def _box(ax, x, y, w, h, title, code=None, color=OPERATION, fontsize=9):
    """A rounded box centred at (x, y) with the paper's name and, below it, the code's name."""
    ax.add_patch(FancyBboxPatch((x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0.02,rounding_size=0.12",
                                facecolor=color, edgecolor=LINE, linewidth=1.0, zorder=2))
    if code:
        ax.text(x, y + h * 0.14, title, ha="center", va="center", fontsize=fontsize, color=TEXT, zorder=3)
        ax.text(x, y - h * 0.24, code, ha="center", va="center", fontsize=fontsize - 1.8,
                color=CODE, family="monospace", zorder=3, gid="code-name")
    else:
        ax.text(x, y, title, ha="center", va="center", fontsize=fontsize, color=TEXT, zorder=3)


def _arrow(ax, start, end, **kw):
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=9, color=LINE,
                                 linewidth=1.0, shrinkA=0, shrinkB=0, zorder=1, **kw))


def _line(ax, xs, ys):
    ax.plot(xs, ys, color=LINE, linewidth=1.0, zorder=1, solid_capstyle="butt")


def _stack(ax, x, y0, y1, w, label, code):
    """The grey frame of N identical layers, with the paper's "N×" and the class names."""
    ax.add_patch(FancyBboxPatch((x - w / 2, y0), w, y1 - y0, boxstyle="round,pad=0.02,rounding_size=0.2",
                                facecolor=STACK, edgecolor=LINE, linewidth=1.2, zorder=0))
    ax.text(x - w / 2 - 0.15, (y0 + y1) / 2, label, ha="right", va="center", fontsize=11, color=TEXT)
    ax.text(x, y0 + 0.22, code, ha="center", va="center", fontsize=7.2, color=CODE,
            family="monospace", gid="code-name")


def _sublayer(ax, x, y_in, y_box, y_norm, w, h, title, code, color, residual_side=-1):
    """One sub-layer with its Add & Norm and the residual path around it (Sec. 3.1)."""
    _box(ax, x, y_box, w, h, title, code, color)
    _box(ax, x, y_norm, w, 0.55, "Add & Norm", "SublayerConnection", ADD_NORM)
    _arrow(ax, (x, y_box + h / 2), (x, y_norm - 0.275))
    rx = x + residual_side * (w / 2 + 0.25)
    _line(ax, [x, rx, rx], [y_in, y_in, y_norm])
    _arrow(ax, (rx, y_norm), (x + residual_side * w / 2, y_norm))


def figure1_transformer():
    """Figure 1 of the paper: the encoder-decoder stack, boxes named after the package's code."""
    fig, ax = plt.subplots(figsize=(7.6, 9.6))
    fig.patch.set_facecolor("white")
    ax.set_xlim(0, 10)
    ax.set_ylim(0, 15.0)
    ax.axis("off")
    w, h = 2.9, 0.8
    ex, dx = 2.9, 7.1  # encoder and decoder columns

    # Encoder: embedding + positions, then N x (self-attention, feed-forward).
    ax.text(ex, 0.35, "Inputs (German token ids)", ha="center", fontsize=9, color=TEXT)
    _box(ax, ex, 1.3, w, h, r"Input Embedding × $\sqrt{d_\mathrm{model}}$", "Transformer.src_embed", EMBEDDING)
    _arrow(ax, (ex, 0.6), (ex, 0.9))
    pe = Circle((ex, 2.45), 0.2, facecolor="white", edgecolor=LINE, zorder=2)
    ax.add_patch(pe)
    ax.text(ex, 2.45, "+", ha="center", va="center", fontsize=12, color=TEXT, zorder=3)
    ax.text(ex - 0.35, 2.45, "Positional\nEncoding", ha="right", va="center", fontsize=8, color=TEXT)
    ax.text(ex - 0.35, 2.02, "PositionalEncoding", ha="right", va="center", fontsize=6.8,
            color=CODE, family="monospace", gid="code-name")
    _arrow(ax, (ex, 1.7), (ex, 2.25))
    _stack(ax, ex, 2.95, 8.6, w + 1.0, "N×", "Encoder: N × EncoderLayer")
    _arrow(ax, (ex, 2.65), (ex, 3.7))
    _sublayer(ax, ex, 3.45, 4.35, 5.45, w, h, "Multi-Head Attention", "MultiHeadAttention", ATTENTION)
    _arrow(ax, (ex, 5.725), (ex, 6.55))
    _sublayer(ax, ex, 6.1, 6.95, 8.0, w, h, "Feed Forward", "PositionwiseFeedForward", FEED_FORWARD)

    # Decoder: embedding + positions, then N x (masked self-attention, cross-attention, FFN).
    ax.text(dx, 0.35, "Outputs, shifted right (English)", ha="center", fontsize=9, color=TEXT)
    _box(ax, dx, 1.3, w, h, r"Output Embedding × $\sqrt{d_\mathrm{model}}$", "Transformer.tgt_embed", EMBEDDING)
    _arrow(ax, (dx, 0.6), (dx, 0.9))
    ax.add_patch(Circle((dx, 2.45), 0.2, facecolor="white", edgecolor=LINE, zorder=2))
    ax.text(dx, 2.45, "+", ha="center", va="center", fontsize=12, color=TEXT, zorder=3)
    ax.text(dx + 0.35, 2.45, "Positional\nEncoding", ha="left", va="center", fontsize=8, color=TEXT)
    ax.text(dx + 0.35, 2.02, "PositionalEncoding", ha="left", va="center", fontsize=6.8,
            color=CODE, family="monospace", gid="code-name")
    _arrow(ax, (dx, 1.7), (dx, 2.25))
    _stack(ax, dx, 2.95, 12.0, w + 1.0, "", "Decoder: N × DecoderLayer")
    ax.text(dx + (w + 1.0) / 2 + 0.15, 7.5, "×N", ha="left", va="center", fontsize=11, color=TEXT)
    _arrow(ax, (dx, 2.65), (dx, 3.7))
    _sublayer(ax, dx, 3.45, 4.35, 5.45, w, h, "Masked Multi-Head Attention",
              "MultiHeadAttention + causal_mask", ATTENTION, residual_side=+1)
    _arrow(ax, (dx, 5.725), (dx, 6.55))
    _sublayer(ax, dx, 6.1, 6.95, 8.0, w, h, "Multi-Head Attention", "MultiHeadAttention (cross)",
              ATTENTION, residual_side=+1)
    _arrow(ax, (dx, 8.275), (dx, 9.05))
    _sublayer(ax, dx, 8.6, 9.45, 10.55, w, h, "Feed Forward", "PositionwiseFeedForward",
              FEED_FORWARD, residual_side=+1)

    # Encoder output -> keys and values of every decoder layer's cross-attention.
    _line(ax, [ex, ex, 5.0, 5.0], [8.275, 9.2, 9.2, 6.95])
    _arrow(ax, (5.0, 6.95), (dx - w / 2, 6.95))
    ax.text(5.05, 9.35, "keys, values", ha="left", fontsize=7.5, color=TEXT)

    # Output projection and softmax.
    _arrow(ax, (dx, 10.825), (dx, 12.45))
    _box(ax, dx, 12.85, w, h, "Linear", "Transformer.generator", LINEAR)
    _arrow(ax, (dx, 13.25), (dx, 13.6))
    _box(ax, dx, 14.0, w, h, "Softmax", "label_smoothing_loss / decode", SOFTMAX)
    ax.text(dx, 14.7, "Output probabilities", ha="center", va="bottom", fontsize=9, color=TEXT)
    fig.tight_layout()
    return fig


def figure2_attention():
    """Figure 2 of the paper: scaled dot-product attention (left), multi-head attention (right)."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(9.2, 6.0))
    fig.patch.set_facecolor("white")
    for ax in (left, right):
        ax.set_xlim(0, 6)
        ax.set_ylim(0, 10)
        ax.axis("off")

    # Left: Eq. (1) step by step.
    ax, x, h = left, 3.0, 0.75
    ax.text(x, 9.7, "Scaled Dot-Product Attention", ha="center", fontsize=10.5, color=TEXT)
    ax.text(x, 9.25, "scaled_dot_product_attention", ha="center", fontsize=8, color=CODE,
            family="monospace", gid="code-name")
    for label, qx in [("Q", 1.8), ("K", 3.0), ("V", 4.7)]:
        ax.text(qx, 0.3, label, ha="center", fontsize=11, color=TEXT)
    _box(ax, 2.4, 1.6, 2.2, h, r"MatMul  $QK^\top$", None, OPERATION)
    _arrow(ax, (1.8, 0.65), (1.8, 1.22))
    _arrow(ax, (3.0, 0.65), (3.0, 1.22))
    _box(ax, 2.4, 3.0, 2.2, h, r"Scale  ÷ $\sqrt{d_k}$", None, OPERATION)
    _arrow(ax, (2.4, 1.98), (2.4, 2.62))
    _box(ax, 2.4, 4.4, 2.2, h, "Mask (opt.)", "padding_mask, causal_mask", ADD_NORM)
    _arrow(ax, (2.4, 3.38), (2.4, 4.02))
    _box(ax, 2.4, 5.8, 2.2, h, "SoftMax", None, SOFTMAX)
    _arrow(ax, (2.4, 4.78), (2.4, 5.42))
    _box(ax, 3.3, 7.4, 2.6, h, r"MatMul  weights · $V$", None, OPERATION)
    _arrow(ax, (2.4, 6.18), (2.9, 7.02))
    _line(ax, [4.7, 4.7], [0.65, 6.6])
    _arrow(ax, (4.7, 6.6), (4.1, 7.02))
    _arrow(ax, (3.3, 7.78), (3.3, 8.6))
    ax.text(x, 8.7, r"$\mathrm{softmax}(QK^\top/\sqrt{d_k})\,V$   (Eq. 1)", ha="center", fontsize=8.5, color=TEXT)

    # Right: h heads in parallel, concatenated, projected.
    ax = right
    ax.text(3.0, 9.7, "Multi-Head Attention", ha="center", fontsize=10.5, color=TEXT)
    ax.text(3.0, 9.25, "MultiHeadAttention", ha="center", fontsize=8, color=CODE,
            family="monospace", gid="code-name")
    names = [("V", "v_proj", 1.2), ("K", "k_proj", 3.0), ("Q", "q_proj", 4.8)]
    for label, proj, px in names:
        ax.text(px, 0.3, label, ha="center", fontsize=11, color=TEXT)
        for shift in (0.16, 0.08, 0.0):  # h stacked copies, as in the paper's drawing
            ax.add_patch(FancyBboxPatch((px - 0.7 + shift, 1.25 + shift), 1.4, 0.7,
                                        boxstyle="round,pad=0.02,rounding_size=0.1",
                                        facecolor=LINEAR, edgecolor=LINE, linewidth=0.8, zorder=2))
        ax.text(px, 1.72, "Linear", ha="center", va="center", fontsize=8.5, color=TEXT, zorder=3)
        ax.text(px, 1.45, proj, ha="center", va="center", fontsize=7, color=CODE,
                family="monospace", zorder=3, gid="code-name")
        _arrow(ax, (px, 0.65), (px, 1.25))
        _arrow(ax, (px, 2.0), (px, 3.2) if px == 3.0 else (3.0 + (px - 3.0) * 0.5, 3.2))
    for shift in (0.24, 0.12, 0.0):
        ax.add_patch(FancyBboxPatch((0.9 + shift, 3.2 + shift), 4.2, 1.0,
                                    boxstyle="round,pad=0.02,rounding_size=0.12",
                                    facecolor=ATTENTION, edgecolor=LINE, linewidth=0.8, zorder=2))
    ax.text(3.0, 3.85, "Scaled Dot-Product Attention", ha="center", va="center", fontsize=9,
            color=TEXT, zorder=3)
    ax.text(3.0, 3.5, "h heads: (B, H, L, Dk)", ha="center", va="center", fontsize=7.5,
            color=CODE, family="monospace", zorder=3)
    ax.text(5.4, 3.75, "h", ha="left", va="center", fontsize=11, color=TEXT)
    _box(ax, 3.0, 5.6, 2.4, 0.75, "Concat", "transpose + reshape", OPERATION)
    _arrow(ax, (3.0, 4.2), (3.0, 5.22))
    _box(ax, 3.0, 7.1, 2.4, 0.75, r"Linear  $W^O$", "out_proj", LINEAR)
    _arrow(ax, (3.0, 5.98), (3.0, 6.72))
    _arrow(ax, (3.0, 7.48), (3.0, 8.5))
    ax.text(3.0, 8.6, r"$\mathrm{Concat}(\mathrm{head}_1, \ldots, \mathrm{head}_h)\,W^O$", ha="center", fontsize=8.5, color=TEXT)
    fig.tight_layout()
    return fig


# Chapter 7 builds the model under its own names (its listing at the end collects them): the
# package's name on a box -> chapter 7's. Names not listed here are the same in both.
CHAPTER7_NAMES = {
    "PositionalEncoding": "sinusoids",
    "SublayerConnection": "AddNorm",
    "PositionwiseFeedForward": "FeedForward",
    "Encoder: N × EncoderLayer": "Stack(EncoderLayer, N)",
    "Decoder: N × DecoderLayer": "Stack(DecoderLayer, N)",
    "MultiHeadAttention + causal_mask": "MultiHeadAttention + tgt_mask",
    "label_smoothing_loss / decode": "cross_entropy / softmax",
}


def _code_texts(fig):
    """The text artists of a figure drawn in the code style (gid "code-name")."""
    return [t for ax in fig.axes for t in ax.texts if t.get_gid() == "code-name"]


def figure1_chapter7():
    """Figure 1 with chapter 7's names on the boxes (``CHAPTER7_NAMES``), for that chapter."""
    fig = figure1_transformer()
    for text in _code_texts(fig):
        text.set_text(CHAPTER7_NAMES.get(text.get_text(), text.get_text()))
    return fig


FIGURES = {
    "figure1_transformer": figure1_transformer,
    "figure2_attention": figure2_attention,
    "figure1_chapter7": figure1_chapter7,
}


def code_names(fig) -> list[str]:
    """The code names written on a figure's boxes (the texts drawn in the code style)."""
    return [t.get_text() for t in _code_texts(fig)]
