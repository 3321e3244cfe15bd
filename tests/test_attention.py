"""Tests for transformer_book.attention (Sec. 3.2): agreement with PyTorch's SDPA and
nn.MultiheadAttention, fast path == from-scratch path, low precision, fully masked rows, errors,
and the key/value cache."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from transformer_book.attention import (
    KVCache,
    MultiHeadAttention,
    fast_scaled_dot_product_attention,
    scaled_dot_product_attention,
)
from transformer_book.masks import causal_mask, padding_mask

B, H, L, S, DK, D = 2, 4, 5, 7, 8, 32


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def _qkv(dtype=torch.float32):
    q = torch.randn(B, H, L, DK, dtype=dtype)
    k = torch.randn(B, H, S, DK, dtype=dtype)
    v = torch.randn(B, H, S, DK, dtype=dtype)
    return q, k, v


def _random_mask():
    """A random boolean mask (B, H, L, S) with at least one key per row."""
    mask = torch.rand(B, H, L, S) > 0.5
    mask[..., 0] = True
    return mask


def test_sdpa_matches_torch_without_mask():
    q, k, v = _qkv()
    out, weights = scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v))
    assert weights.shape == (B, H, L, S)
    torch.testing.assert_close(weights.sum(-1), torch.ones(B, H, L))


@pytest.mark.parametrize("mask_kind", ["full", "padding", "causal"])
def test_sdpa_matches_torch_with_boolean_mask(mask_kind):
    q, k, v = _qkv()
    if mask_kind == "full":
        mask = _random_mask()
    elif mask_kind == "padding":
        mask = padding_mask(torch.tensor([[1] * S, [1] * 3 + [0] * (S - 3)]), pad_id=0)
    else:
        mask = causal_mask(L, key_len=S)
    out, weights = scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
    assert torch.all(weights.masked_select(~mask.expand(B, H, L, S)) == 0)
    torch.testing.assert_close(fast_scaled_dot_product_attention(q, k, v, mask), out)


def test_sdpa_scale_argument_and_unbatched_inputs():
    q, k, v = _qkv()
    out, _ = scaled_dot_product_attention(q, k, v, scale=1.0)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, scale=1.0))
    out2d, w2d = scaled_dot_product_attention(q[0, 0], k[0, 0], v[0, 0])  # (L, Dk) inputs
    torch.testing.assert_close(out2d, F.scaled_dot_product_attention(q, k, v)[0, 0])
    assert w2d.shape == (L, S)


def test_weights_are_the_formula():
    """Eq. (1) written with explicit loops over one query, as the chapter does."""
    q, k, v = _qkv()
    _, weights = scaled_dot_product_attention(q, k, v)
    b, h, i = 1, 2, 3
    scores = torch.stack([q[b, h, i] @ k[b, h, j] / DK**0.5 for j in range(S)])
    torch.testing.assert_close(weights[b, h, i], torch.softmax(scores, dim=0))


def test_fully_masked_rows_give_zero_output_weights_and_gradient():
    q, k, v = _qkv()
    q.requires_grad_(True)
    mask = _random_mask()
    mask[0, 1, 2] = False  # one query with no key at all
    for path in ("scratch", "fast"):
        q.grad = None
        if path == "scratch":
            out, weights = scaled_dot_product_attention(q, k, v, attn_mask=mask)
            assert torch.all(weights[0, 1, 2] == 0)
        else:
            out = fast_scaled_dot_product_attention(q, k, v, mask)
        assert torch.all(out[0, 1, 2] == 0), path
        assert torch.isfinite(out).all(), path
        out.sum().backward()
        assert torch.isfinite(q.grad).all(), path
        assert torch.all(q.grad[0, 1, 2] == 0), path
    # The other rows are untouched by the fix.
    ref = F.scaled_dot_product_attention(q.detach(), k, v, attn_mask=mask)
    keep = mask.any(-1)
    torch.testing.assert_close(out.detach()[keep], ref[keep])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision_with_masks_is_finite(dtype):
    q, k, v = _qkv(dtype)
    mask = _random_mask() & causal_mask(L, key_len=S)
    mask[1, 0, 0] = False  # and one fully masked row
    out, weights = scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert out.dtype == dtype and weights.dtype == dtype
    assert torch.isfinite(out).all() and torch.isfinite(weights).all()
    fast = fast_scaled_dot_product_attention(q, k, v, mask)
    assert torch.isfinite(fast).all()
    ref, _ = scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=mask)
    torch.testing.assert_close(out.float(), ref, atol=3e-2, rtol=3e-2)
    torch.testing.assert_close(fast.float(), ref, atol=3e-2, rtol=3e-2)


def test_sdpa_errors():
    q, k, v = _qkv()
    with pytest.raises(TypeError, match="torch.bool"):
        scaled_dot_product_attention(q, k, v, attn_mask=torch.ones(B, 1, 1, S))
    with pytest.raises(ValueError, match="broadcast"):
        scaled_dot_product_attention(
            q, k, v, attn_mask=torch.ones(B, 1, 1, S + 1, dtype=torch.bool)
        )
    with pytest.raises(ValueError, match="last dimension"):
        scaled_dot_product_attention(q, k[..., :-1], v)
    with pytest.raises(ValueError, match="same length"):
        scaled_dot_product_attention(q, k, v[..., :-1, :])
    with pytest.raises(ValueError, match="broadcast"):
        scaled_dot_product_attention(q, k[:1].expand(3, H, S, DK), v[:1].expand(3, H, S, DK))
    with pytest.raises(TypeError, match="floating"):
        scaled_dot_product_attention(q.long(), k, v)
    with pytest.raises(TypeError, match="dtype"):
        scaled_dot_product_attention(q.double(), k, v)


def _torch_mha_from(mha: MultiHeadAttention) -> nn.MultiheadAttention:
    """nn.MultiheadAttention with our weights: its in_proj stacks W^Q, W^K, W^V row-wise."""
    ref = nn.MultiheadAttention(D, mha.num_heads, batch_first=True)
    with torch.no_grad():
        ref.in_proj_weight.copy_(
            torch.cat([mha.q_proj.weight, mha.k_proj.weight, mha.v_proj.weight])
        )
        ref.in_proj_bias.copy_(torch.cat([mha.q_proj.bias, mha.k_proj.bias, mha.v_proj.bias]))
        ref.out_proj.weight.copy_(mha.out_proj.weight)
        ref.out_proj.bias.copy_(mha.out_proj.bias)
    return ref.eval()


@pytest.mark.parametrize("kind", ["self", "cross"])
def test_mha_matches_torch_multihead_attention(kind):
    mha = MultiHeadAttention(D, H).eval()
    ref = _torch_mha_from(mha)
    x = torch.randn(B, L, D)
    if kind == "self":
        mem, length = x, L
        src = torch.tensor([[3] * L, [3] * 2 + [0] * (L - 2)])
        key_pad = padding_mask(src, 0)  # (B, 1, 1, L)
        causal = causal_mask(L)  # (L, L)
        mask = key_pad & causal
        # nn.MultiheadAttention's masks mean True = blocked: invert ours at this boundary.
        ref_masks = {"key_padding_mask": ~key_pad[:, 0, 0], "attn_mask": ~causal}
    else:
        mem, length = torch.randn(B, S, D), S
        src = torch.tensor([[3] * S, [3] * 4 + [0] * (S - 4)])
        key_pad = padding_mask(src, 0)  # (B, 1, 1, S)
        mask = key_pad
        ref_masks = {"key_padding_mask": ~key_pad[:, 0, 0]}  # PyTorch: True = blocked
    for m, rm in ((None, {}), (mask, ref_masks)):
        out, weights = mha(x, mem, mem, attn_mask=m, need_weights=True)
        ref_out, ref_weights = ref(x, mem, mem, need_weights=True, average_attn_weights=False, **rm)
        torch.testing.assert_close(out, ref_out)
        torch.testing.assert_close(weights, ref_weights)
        assert weights.shape == (B, H, L, length)
        fast, none = mha(x, mem, mem, attn_mask=m)
        assert none is None
        torch.testing.assert_close(fast, out)


def test_mha_fast_path_equals_scratch_path_in_training_mode_without_dropout():
    mha = MultiHeadAttention(D, H, dropout=0.0).train()
    x = torch.randn(B, L, D, requires_grad=True)
    mask = causal_mask(L)
    fast, _ = mha(x, x, x, attn_mask=mask)
    slow, _ = mha(x, x, x, attn_mask=mask, need_weights=True)
    torch.testing.assert_close(fast, slow)
    g_fast = torch.autograd.grad(fast.square().sum(), x)[0]
    g_slow = torch.autograd.grad(slow.square().sum(), x)[0]
    torch.testing.assert_close(g_fast, g_slow)


def test_mha_dropout_only_in_training():
    mha = MultiHeadAttention(D, H, dropout=0.5)
    x = torch.randn(B, L, D)
    mha.eval()
    a, _ = mha(x, x, x)
    b, _ = mha(x, x, x)
    assert torch.equal(a, b)
    mha.train()
    c, _ = mha(x, x, x, need_weights=True)
    assert not torch.allclose(a, c)


def test_mha_errors():
    with pytest.raises(ValueError, match="divisible"):
        MultiHeadAttention(30, 4)
    with pytest.raises(ValueError, match="positive"):
        MultiHeadAttention(0, 4)
    mha = MultiHeadAttention(D, H)
    x = torch.randn(B, L, D)
    with pytest.raises(ValueError, match="batch size"):
        mha(x, torch.randn(B + 1, S, D), torch.randn(B + 1, S, D))
    with pytest.raises(ValueError, match="d_model"):
        mha(torch.randn(B, L, D + 1), x, x)
    with pytest.raises(ValueError, match="d_model"):
        mha(torch.randn(L, D), x, x)
    with pytest.raises(ValueError, match="same length"):
        mha(x, torch.randn(B, S, D), torch.randn(B, S + 1, D))
    with pytest.raises(TypeError, match="torch.bool"):
        mha(x, x, x, attn_mask=causal_mask(L).float())
    with pytest.raises(ValueError, match="broadcast"):
        mha(x, x, x, attn_mask=causal_mask(L + 1))


def test_kv_cache_incremental_self_and_cross_attention_equal_full():
    self_attn, cross_attn = MultiHeadAttention(D, H).eval(), MultiHeadAttention(D, H).eval()
    x, mem = torch.randn(B, L, D), torch.randn(B, S, D)
    full_self, _ = self_attn(x, x, x, attn_mask=causal_mask(L))
    full_cross, _ = cross_attn(x, mem, mem)
    self_cache, cross_cache = KVCache(), KVCache(static=True)
    steps_self, steps_cross = [], []
    for t in range(L):
        xt = x[:, t : t + 1]  # (B, 1, D): one new position
        out, _ = self_attn(xt, xt, xt, kv_cache=self_cache)  # sees cached positions 0..t
        steps_self.append(out)
        out, _ = cross_attn(
            xt, mem if t == 0 else None, mem if t == 0 else None, kv_cache=cross_cache
        )
        steps_cross.append(out)
        assert len(self_cache) == t + 1 and len(cross_cache) == S
    torch.testing.assert_close(torch.cat(steps_self, dim=1), full_self)
    torch.testing.assert_close(torch.cat(steps_cross, dim=1), full_cross)


def test_kv_cache_several_new_positions_with_shifted_causal_mask():
    mha = MultiHeadAttention(D, H).eval()
    x = torch.randn(B, L, D)
    full, _ = mha(x, x, x, attn_mask=causal_mask(L))
    cache = KVCache()
    first, _ = mha(x[:, :2], x[:, :2], x[:, :2], attn_mask=causal_mask(2), kv_cache=cache)
    rest, w = mha(
        x[:, 2:],
        x[:, 2:],
        x[:, 2:],
        attn_mask=causal_mask(L - 2, key_len=L),
        kv_cache=cache,
        need_weights=True,
    )
    assert w.shape == (B, H, L - 2, L)
    torch.testing.assert_close(torch.cat([first, rest], dim=1), full)
    cache.reorder(torch.tensor([1, 1, 0]))
    assert cache.key.shape == (3, H, L, D // H)


def test_self_attention_is_permutation_equivariant():
    """Chapter 2's claim: without positions, permuting the tokens permutes the outputs."""
    mha = MultiHeadAttention(D, H).eval()
    x = torch.randn(B, L, D)
    perm = torch.randperm(L)
    with torch.no_grad():
        out, w = mha(x, x, x, need_weights=True)
        out_p, w_p = mha(x[:, perm], x[:, perm], x[:, perm], need_weights=True)
    torch.testing.assert_close(out_p, out[:, perm])
    torch.testing.assert_close(w_p, w[:, :, perm][..., perm])


@pytest.mark.parametrize("bias", [True, False])
def test_mha_parameter_count_does_not_depend_on_heads(bias):
    """Chapter 3's claim (Sec. 3.2.2): h heads of d_model / h split the same four matrices."""
    expected = 4 * (512 * 512 + (512 if bias else 0))
    for h in (1, 2, 8, 16, 64):
        assert sum(p.numel() for p in MultiHeadAttention(512, h, bias=bias).parameters()) == expected


def test_d_k_independent_of_d_model_over_h():
    """Table 3 rows (B): d_k changes alone (d_v and d_model stay); both paths of Eq. (1) agree."""
    torch.manual_seed(0)
    mha = MultiHeadAttention(32, 4, d_k=3, d_v=8).eval()
    assert (mha.d_k, mha.d_v) == (3, 8)
    assert mha.q_proj.weight.shape == (12, 32) and mha.v_proj.weight.shape == (32, 32)
    assert mha.out_proj.weight.shape == (32, 32)
    x, mem = torch.randn(2, 5, 32), torch.randn(2, 7, 32)
    for q, kv in [(x, x), (x, mem)]:  # self-attention (fused Q, K, V) and cross-attention (fused K, V)
        fast, _ = mha(q, kv, kv)
        slow, weights = mha(q, kv, kv, need_weights=True)
        torch.testing.assert_close(fast, slow)
        assert fast.shape == (2, 5, 32) and weights.shape == (2, 4, 5, kv.shape[1])
        # one projection at a time, as the paper writes it
        qh = mha.q_proj(q).view(2, 5, 4, 3).transpose(1, 2)
        kh = mha.k_proj(kv).view(2, -1, 4, 3).transpose(1, 2)
        vh = mha.v_proj(kv).view(2, -1, 4, 8).transpose(1, 2)
        ref = torch.softmax(qh @ kh.transpose(-1, -2) / 3**0.5, -1) @ vh
        torch.testing.assert_close(fast, mha.out_proj(ref.transpose(1, 2).reshape(2, 5, 32)))


def test_default_widths_keep_the_old_parameters():
    torch.manual_seed(0)
    a = MultiHeadAttention(16, 4)
    torch.manual_seed(0)
    b = MultiHeadAttention(16, 4, d_k=4, d_v=4)
    for (na, pa), (nb, pb) in zip(a.named_parameters(), b.named_parameters(), strict=True):
        assert na == nb and torch.equal(pa, pb)
    with pytest.raises(ValueError, match="d_k must be a positive integer"):
        MultiHeadAttention(16, 4, d_k=0)
    MultiHeadAttention(30, 4, d_k=8, d_v=8)  # both given: h need not divide d_model
