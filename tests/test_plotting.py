"""Quick checks of the chapters' plotting helpers (transformer_book.plotting)."""

import matplotlib.pyplot as plt
import pytest
import torch
from transformer_book.plotting import (
    attention_chart,
    plot_attention,
    plot_attention_heads,
    plot_mask,
)


def _weights(*shape):
    torch.manual_seed(0)
    return torch.softmax(torch.randn(*shape), dim=-1)


def test_plot_attention_labels_axes_and_ticks():
    ax = plot_attention(_weights(3, 4), ["a", "b", "c", "d"], ["x", "y", "z"], title="t")
    assert ax.get_xlabel() == "key position (attended to)"
    assert ax.get_ylabel() == "query position (attending)"
    assert ax.get_title() == "t"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["a", "b", "c", "d"]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["x", "y", "z"]
    plt.close("all")


def test_plot_attention_rejects_wrong_label_count_and_rank():
    with pytest.raises(ValueError, match="3 key labels for 4"):
        plot_attention(_weights(3, 4), ["a", "b", "c"])
    with pytest.raises(ValueError, match=r"\(L, S\)"):
        plot_attention(_weights(2, 3, 4))
    plt.close("all")


def test_plot_attention_heads_one_panel_per_head():
    fig = plot_attention_heads(_weights(3, 4, 4), title="heads", ncols=2)
    titles = [ax.get_title() for ax in fig.axes if ax.get_title()]
    assert titles == ["head 0", "head 1", "head 2"]
    plt.close("all")


def test_plot_mask_requires_bool():
    ax = plot_mask(torch.ones(3, 3, dtype=torch.bool).tril(), title="causal")
    assert ax.get_title() == "causal"
    with pytest.raises(TypeError, match="boolean"):
        plot_mask(torch.ones(3, 3))
    plt.close("all")


def test_attention_chart_has_head_and_layer_sliders_and_rounded_data():
    w = _weights(2, 3, 4, 4)  # (N, H, L, S)
    spec = attention_chart(w, ["the", "cat", "the", "mat"]).to_dict()
    params = {p["name"]: p for p in spec["params"]}
    assert params["head"]["bind"]["input"] == "range"
    assert params["head"]["bind"]["max"] == 2
    assert params["layer"]["bind"]["max"] == 1
    assert set(spec["encoding"]) >= {"x", "y", "color", "tooltip"}
    rows = next(iter(spec["datasets"].values()))
    assert len(rows) == 2 * 3 * 4 * 4
    # repeated tokens get their position so the two "the" columns are not merged
    assert {r["key"] for r in rows} == {"0 the", "1 cat", "2 the", "3 mat"}
    assert all(round(r["weight"], 3) == r["weight"] for r in rows)
    # the same input gives the same specification (stable notebook output)
    assert attention_chart(w, ["the", "cat", "the", "mat"]).to_dict() == spec


def test_attention_chart_single_layer_has_only_head_param():
    spec = attention_chart(_weights(2, 3, 5), list("abcde"), list("xyz")).to_dict()
    assert [p["name"] for p in spec["params"]] == ["head"]
