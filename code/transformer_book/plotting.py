"""Figures the chapters share: attention heat maps (matplotlib/seaborn) and interactive attention
charts (altair). Only the chapters import this module, so the model code never depends on a
plotting library. Every function takes tensors (any device, with or without gradients) or arrays
and returns the ``Axes``, ``Figure`` or ``alt.Chart`` it drew, for a chapter to add to.
"""

from __future__ import annotations

from collections.abc import Sequence

import altair as alt
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
import torch

__all__ = ["attention_chart", "plot_attention", "plot_attention_heads", "plot_mask"]

QUERY_AXIS = "query position (attending)"
KEY_AXIS = "key position (attended to)"


def _to_numpy(x) -> np.ndarray:
    """A float or bool NumPy copy of a tensor (any device, grad or not) or array."""
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu()
        x = x.numpy() if x.dtype == torch.bool else x.float().numpy()
    return np.asarray(x)


def _labels(labels: Sequence[str] | None, n: int, what: str) -> list[str]:
    """Tick labels: the given tokens (checked against the size) or positions 0..n-1."""
    if labels is None:
        return [str(i) for i in range(n)]
    labels = [str(t) for t in labels]
    if len(labels) != n:
        raise ValueError(f"got {len(labels)} {what} labels for {n} positions")
    return labels


def _unique_labels(labels: Sequence[str]) -> list[str]:
    """Labels made unique by prefixing the position when a token repeats ("3 the"): categorical
    chart axes merge equal labels, which would sum two rows of a map into one."""
    labels = [str(t) for t in labels]
    if len(set(labels)) == len(labels):
        return labels
    return [f"{i} {t}" for i, t in enumerate(labels)]


# --------------------------------------------------------------------------------------------
# Static heat maps (matplotlib / seaborn)
# --------------------------------------------------------------------------------------------


def plot_attention(
    weights,
    x_labels: Sequence[str] | None = None,
    y_labels: Sequence[str] | None = None,
    ax: plt.Axes | None = None,
    title: str | None = None,
    annotate: bool | None = None,
    vmax: float | None = 1.0,
    cbar: bool = True,
    cmap: str = "viridis",
) -> plt.Axes:
    """Heat map of one attention map: row i is how query i spreads its attention over the keys.

    Args:
        weights: attention weights, shape (L, S) (rows sum to 1), or any (L, S) score matrix
            with ``vmax=None``.
        x_labels: S key tokens (columns); positions when omitted.
        y_labels: L query tokens (rows); positions when omitted.
        ax: axes to draw on; a new figure when omitted.
        title: axes title.
        annotate: write the value in every cell; default: only when the map has at most 10x10
            cells.
        vmax: top of the colour scale (1 for weights); ``None`` scales to the data.
        cbar: draw the colour bar.
        cmap: matplotlib colour map.
    """
    w = _to_numpy(weights)
    if w.ndim != 2:
        raise ValueError(f"plot_attention expects one (L, S) map, got shape {tuple(w.shape)}")
    L, S = w.shape
    x_labels, y_labels = _labels(x_labels, S, "key"), _labels(y_labels, L, "query")
    if ax is None:
        _, ax = plt.subplots(figsize=(1.0 + 0.55 * S, 0.8 + 0.5 * L))
    if annotate is None:
        annotate = L <= 10 and S <= 10
    sns.heatmap(
        w,
        ax=ax,
        vmin=0.0 if vmax is not None else None,
        vmax=vmax,
        cmap=cmap,
        annot=annotate,
        fmt=".2f",
        annot_kws={"fontsize": 8},
        cbar=cbar,
        cbar_kws={"label": "attention weight"} if vmax == 1.0 else None,
        xticklabels=x_labels,
        yticklabels=y_labels,
        square=False,
    )
    ax.set_xlabel(KEY_AXIS)
    ax.set_ylabel(QUERY_AXIS)
    ax.tick_params(axis="x", labelrotation=90)
    ax.tick_params(axis="y", labelrotation=0)
    if title:
        ax.set_title(title)
    return ax


def plot_attention_heads(
    weights,
    x_labels: Sequence[str] | None = None,
    y_labels: Sequence[str] | None = None,
    title: str | None = None,
    ncols: int = 4,
    head_titles: Sequence[str] | None = None,
    panel_size: float = 2.6,
) -> plt.Figure:
    """A grid of attention maps, one panel per head, sharing one colour scale (0 to 1).

    Args:
        weights: shape (H, L, S).
        x_labels, y_labels: key and query tokens, as in :func:`plot_attention`.
        title: figure title.
        ncols: panels per row.
        head_titles: one title per panel; "head 0", "head 1", ... when omitted.
        panel_size: inches per panel.
    """
    w = _to_numpy(weights)
    if w.ndim != 3:
        raise ValueError(f"plot_attention_heads expects (H, L, S), got shape {tuple(w.shape)}")
    H = w.shape[0]
    head_titles = list(head_titles) if head_titles is not None else [f"head {h}" for h in range(H)]
    if len(head_titles) != H:
        raise ValueError(f"got {len(head_titles)} head titles for {H} heads")
    ncols = min(ncols, H)
    nrows = -(-H // ncols)
    fig, axes = plt.subplots(
        nrows, ncols, figsize=(panel_size * ncols + 0.6, panel_size * nrows + 0.6), squeeze=False
    )
    for h, ax in enumerate(axes.flat):
        if h >= H:
            ax.axis("off")
            continue
        plot_attention(
            w[h], x_labels, y_labels, ax=ax, title=head_titles[h], annotate=False, cbar=False
        )
        # Axis names once per row/column keep small panels readable.
        if h % ncols:
            ax.set_ylabel("")
        if h < H - ncols:
            ax.set_xlabel("")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    # One colour bar for all panels (they share the 0..1 scale), added after the layout is fixed.
    scale = plt.cm.ScalarMappable(norm=plt.Normalize(0.0, 1.0), cmap="viridis")
    fig.colorbar(scale, ax=axes.ravel().tolist(), label="attention weight", shrink=0.8)
    return fig


def plot_mask(
    mask,
    x_labels: Sequence[str] | None = None,
    y_labels: Sequence[str] | None = None,
    ax: plt.Axes | None = None,
    title: str | None = None,
) -> plt.Axes:
    """Draw a boolean (L, S) attention mask: dark = may attend (True), light = blocked (False).

    Args:
        mask: bool tensor or array of shape (L, S) (squeeze broadcast dimensions first).
        x_labels, y_labels: key and query tokens, as in :func:`plot_attention`.
        ax: axes to draw on; a new figure when omitted.
        title: axes title.
    """
    m = _to_numpy(mask)
    if m.dtype != bool:
        raise TypeError(f"plot_mask expects a boolean mask (True = may attend), got {m.dtype}")
    if m.ndim != 2:
        raise ValueError(f"plot_mask expects one (L, S) mask, got shape {tuple(m.shape)}")
    L, S = m.shape
    x_labels, y_labels = _labels(x_labels, S, "key"), _labels(y_labels, L, "query")
    if ax is None:
        _, ax = plt.subplots(figsize=(1.0 + 0.45 * S, 0.8 + 0.4 * L))
    ax.imshow(m.astype(float), cmap="Blues", vmin=-0.25, vmax=1.0, aspect="auto")
    for i in range(L):
        for j in range(S):
            ax.text(j, i, "T" if m[i, j] else "F", ha="center", va="center", fontsize=8,
                    color="white" if m[i, j] else "0.4")
    ax.set_xticks(range(S), x_labels, rotation=90)
    ax.set_yticks(range(L), y_labels)
    ax.set_xlabel(KEY_AXIS)
    ax.set_ylabel(QUERY_AXIS)
    if title:
        ax.set_title(title)
    return ax


# --------------------------------------------------------------------------------------------
# Interactive charts (altair)
# --------------------------------------------------------------------------------------------


def attention_chart(
    weights,
    src_tokens: Sequence[str],
    tgt_tokens: Sequence[str] | None = None,
    title: str = "Attention weights",
    layer_names: Sequence[str] | None = None,
    cell_size: int = 28,
    decimals: int = 3,
) -> alt.Chart:
    """Interactive attention heat map with a head slider (and a layer slider for 4-D input);
    hovering a cell shows the query token, the key token and the weight.

    Args:
        weights: attention weights of shape (H, L, S) for one layer, or (N, H, L, S) for N
            layers (batch dimension already removed).
        src_tokens: the S key tokens (columns).
        tgt_tokens: the L query tokens (rows); ``src_tokens`` when omitted (self-attention).
        title: chart title.
        layer_names: N names for the layer slider's tooltip; "layer 0", ... when omitted.
        cell_size: pixels per cell.
        decimals: weights are rounded to this many decimals, which keeps the chart's
            specification (and so the notebook's stored output) identical from run to run.

    Returns:
        An ``alt.Chart`` with parameters ``head`` (and ``layer``) bound to sliders.
    """
    w = _to_numpy(weights)
    if w.ndim == 3:
        w = w[None]
    if w.ndim != 4:
        raise ValueError(f"attention_chart expects (H, L, S) or (N, H, L, S), got {w.shape}")
    N, H, L, S = w.shape
    tgt_tokens = src_tokens if tgt_tokens is None else tgt_tokens
    keys = _unique_labels(_labels(src_tokens, S, "key"))
    queries = _unique_labels(_labels(tgt_tokens, L, "query"))
    layer_names = list(layer_names) if layer_names is not None else [f"layer {n}" for n in range(N)]
    if len(layer_names) != N:
        raise ValueError(f"got {len(layer_names)} layer names for {N} layers")

    n, h, i, j = np.meshgrid(np.arange(N), np.arange(H), np.arange(L), np.arange(S), indexing="ij")
    data = pd.DataFrame(
        {
            "layer": n.ravel(),
            "layer_name": np.array(layer_names, dtype=object)[n.ravel()],
            "head": h.ravel(),
            "query": np.array(queries, dtype=object)[i.ravel()],
            "key": np.array(keys, dtype=object)[j.ravel()],
            "weight": np.round(w.ravel().astype(float), decimals),
        }
    )

    # Named parameters: altair would otherwise number them from a global counter.
    head = alt.param(
        name="head", value=0, bind=alt.binding_range(min=0, max=H - 1, step=1, name="head ")
    )
    params = [head]
    predicate = alt.datum.head == head
    if N > 1:
        layer = alt.param(
            name="layer", value=0, bind=alt.binding_range(min=0, max=N - 1, step=1, name="layer ")
        )
        params.append(layer)
        predicate = predicate & (alt.datum.layer == layer)

    return (
        alt.Chart(data, title=title)
        .mark_rect()
        .encode(
            x=alt.X("key:N", sort=keys, title=KEY_AXIS),
            y=alt.Y("query:N", sort=queries, title=QUERY_AXIS),
            color=alt.Color(
                "weight:Q", scale=alt.Scale(domain=[0, 1], scheme="viridis"), title="weight"
            ),
            tooltip=[
                alt.Tooltip("layer_name:N", title="layer"),
                alt.Tooltip("head:O", title="head"),
                alt.Tooltip("query:N", title="query"),
                alt.Tooltip("key:N", title="key"),
                alt.Tooltip("weight:Q", title="weight", format=".3f"),
            ],
        )
        .add_params(*params)
        .transform_filter(predicate)
        .properties(width=cell_size * S, height=cell_size * L)
    )
