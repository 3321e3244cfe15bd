"""Tests for transformer_book.layers (Sec. 3.1, 3.3): feed-forward formula, Add & Norm against
nn.LayerNorm, encoder/decoder layers against nn.TransformerEncoderLayer/DecoderLayer, stacks."""

import pytest
import torch
from torch import nn
from transformer_book.config import TransformerConfig
from transformer_book.layers import (
    Decoder,
    DecoderLayer,
    Encoder,
    EncoderLayer,
    PositionwiseFeedForward,
    SublayerConnection,
)
from transformer_book.masks import causal_mask, padding_mask

B, S, T, D, H, DFF = 2, 6, 5, 16, 4, 32


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def test_feed_forward_is_eq2_and_position_wise():
    ffn = PositionwiseFeedForward(D, DFF)
    x = torch.randn(B, S, D)
    w1, b1, w2, b2 = ffn.linear1.weight, ffn.linear1.bias, ffn.linear2.weight, ffn.linear2.bias
    expected = torch.clamp(x @ w1.T + b1, min=0) @ w2.T + b2  # max(0, x W1 + b1) W2 + b2
    torch.testing.assert_close(ffn(x), expected)
    x2 = x.clone()
    x2[:, 3] += 1.0  # change one position: only that position's output moves
    diff = (ffn(x2) - ffn(x)).abs().sum(-1)
    assert torch.all(diff[:, [0, 1, 2, 4, 5]] == 0) and torch.all(diff[:, 3] > 0)


@pytest.mark.parametrize("norm_first", [False, True])
def test_sublayer_connection_matches_layer_norm_reference(norm_first):
    block = SublayerConnection(D, dropout=0.0, norm_first=norm_first, eps=1e-6)
    with torch.no_grad():
        block.norm.weight.uniform_(0.5, 1.5)
        block.norm.bias.uniform_(-0.5, 0.5)
    ref_norm = nn.LayerNorm(D, eps=1e-6)
    ref_norm.load_state_dict(block.norm.state_dict())
    sublayer = nn.Linear(D, D)
    x = torch.randn(B, S, D) * 3 + 1
    out = block(x, sublayer)
    if norm_first:
        expected = x + sublayer(ref_norm(x))
    else:
        expected = ref_norm(x + sublayer(x))
        # and LayerNorm from its formula: per position, over the features (Ba et al. 2016)
        y = x + sublayer(x)
        mean, var = y.mean(-1, keepdim=True), y.var(-1, unbiased=False, keepdim=True)
        by_hand = (y - mean) / torch.sqrt(var + 1e-6) * block.norm.weight + block.norm.bias
        torch.testing.assert_close(out, by_hand)
    torch.testing.assert_close(out, expected)


def _copy_mha(ours, theirs: nn.MultiheadAttention):
    with torch.no_grad():
        theirs.in_proj_weight.copy_(
            torch.cat([ours.q_proj.weight, ours.k_proj.weight, ours.v_proj.weight])
        )
        theirs.in_proj_bias.copy_(torch.cat([ours.q_proj.bias, ours.k_proj.bias, ours.v_proj.bias]))
        theirs.out_proj.load_state_dict(ours.out_proj.state_dict())


def _masks():
    src = torch.tensor([[4] * S, [4] * 3 + [0] * (S - 3)])
    tgt = torch.tensor([[4] * T, [4] * 4 + [0] * (T - 4)])
    return padding_mask(src, 0), padding_mask(tgt, 0)


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_layer_matches_torch(norm_first):
    ours = EncoderLayer(D, H, DFF, dropout=0.0, norm_first=norm_first)
    ref = nn.TransformerEncoderLayer(
        D, H, DFF, dropout=0.0, batch_first=True, norm_first=norm_first
    )
    _copy_mha(ours.self_attn, ref.self_attn)
    ref.linear1.load_state_dict(ours.feed_forward.linear1.state_dict())
    ref.linear2.load_state_dict(ours.feed_forward.linear2.state_dict())
    ref.norm1.load_state_dict(ours.attn_sublayer.norm.state_dict())
    ref.norm2.load_state_dict(ours.ffn_sublayer.norm.state_dict())
    src_mask, _ = _masks()
    x = torch.randn(B, S, D)
    # train() with dropout 0 keeps PyTorch off its inference fast path (which zeroes padding rows).
    ours.train(), ref.train()
    out, weights = ours(x, src_mask, need_weights=True)
    expected = ref(x, src_key_padding_mask=~src_mask[:, 0, 0])  # PyTorch: True = blocked
    torch.testing.assert_close(out, expected)
    assert weights.shape == (B, H, S, S)
    torch.testing.assert_close(ours(x, src_mask)[0], out)
    assert ours(x, src_mask)[1] is None


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer_matches_torch(norm_first):
    ours = DecoderLayer(D, H, DFF, dropout=0.0, norm_first=norm_first)
    ref = nn.TransformerDecoderLayer(
        D, H, DFF, dropout=0.0, batch_first=True, norm_first=norm_first
    )
    _copy_mha(ours.self_attn, ref.self_attn)
    _copy_mha(ours.cross_attn, ref.multihead_attn)
    ref.linear1.load_state_dict(ours.feed_forward.linear1.state_dict())
    ref.linear2.load_state_dict(ours.feed_forward.linear2.state_dict())
    ref.norm1.load_state_dict(ours.self_attn_sublayer.norm.state_dict())
    ref.norm2.load_state_dict(ours.cross_attn_sublayer.norm.state_dict())
    ref.norm3.load_state_dict(ours.ffn_sublayer.norm.state_dict())
    src_mask, tgt_pad = _masks()
    tgt_mask = tgt_pad & causal_mask(T)
    x, memory = torch.randn(B, T, D), torch.randn(B, S, D)
    out, sw, cw = ours(x, memory, src_mask, tgt_mask, need_weights=True)
    expected = ref(
        x,
        memory,
        tgt_mask=~causal_mask(T),  # PyTorch: True = blocked
        tgt_key_padding_mask=~tgt_pad[:, 0, 0],
        memory_key_padding_mask=~src_mask[:, 0, 0],
    )
    torch.testing.assert_close(out, expected)
    assert sw.shape == (B, H, T, T) and cw.shape == (B, H, T, S)
    assert torch.all(cw[1, :, :, 3:] == 0)  # padded source keys get no weight
    assert torch.all(sw.triu(diagonal=1) == 0)  # no weight on the future


@pytest.mark.parametrize("norm_first", [False, True])
def test_stacks_have_independent_layers_and_final_norm_only_with_pre_norm(norm_first):
    config = TransformerConfig.tiny(
        d_model=D, num_heads=H, d_ff=DFF, num_layers=3, norm_first=norm_first
    )
    enc, dec = Encoder(config), Decoder(config)
    assert len(enc.layers) == 3 and len(dec.layers) == 3
    ptrs = {p.data_ptr() for layer in enc.layers for p in layer.parameters()}
    assert len(ptrs) == sum(1 for layer in enc.layers for _ in layer.parameters())  # no sharing
    assert (enc.norm is not None) == norm_first and (dec.norm is not None) == norm_first
    src_mask, tgt_pad = _masks()
    memory, enc_w = enc(torch.randn(B, S, D), src_mask, need_weights=True)
    assert memory.shape == (B, S, D) and len(enc_w) == 3
    out, sw, cw = dec(
        torch.randn(B, T, D), memory, src_mask, tgt_pad & causal_mask(T), need_weights=True
    )
    assert out.shape == (B, T, D) and len(sw) == len(cw) == 3
    assert enc(torch.randn(B, S, D), src_mask)[1] == []
    if norm_first:  # the final LayerNorm normalises every position
        torch.testing.assert_close(out.mean(-1), torch.zeros(B, T), atol=1e-5, rtol=0)


@pytest.mark.parametrize("norm_first", [False, True])
def test_residual_switch_drops_only_the_add(norm_first):
    """residual=False (chapter 7's ablation): LayerNorm(Sublayer(x)), or Sublayer(LayerNorm(x))."""
    block = SublayerConnection(D, norm_first=norm_first)
    linear = nn.Linear(D, D)
    x = torch.randn(B, S, D)
    assert block.residual  # the paper's default
    with torch.no_grad():
        with_residual = block(x, linear)
        block.residual = False
        without = block(x, linear)
    expected = linear(block.norm(x)) if norm_first else block.norm(linear(x))
    torch.testing.assert_close(without, expected)
    added = x + linear(block.norm(x)) if norm_first else block.norm(x + linear(x))
    torch.testing.assert_close(with_residual, added)


def test_table3_row_b_widths_reach_every_attention_layer():
    """TransformerConfig.d_key (Table 3 rows B) sets d_k in every attention module; d_v stays."""
    import dataclasses

    from transformer_book import Transformer, TransformerConfig

    base = TransformerConfig.tiny(src_vocab_size=50, tgt_vocab_size=50)
    config = dataclasses.replace(base, d_key=4)
    model = Transformer(config)
    attention = [m for m in model.modules() if m.__class__.__name__ == "MultiHeadAttention"]
    assert len(attention) == 3 * config.num_layers
    assert all((m.d_k, m.d_v) == (4, base.d_model // base.num_heads) for m in attention)
    assert model.num_parameters() < Transformer(base).num_parameters()
    src = torch.randint(3, 50, (2, 6))
    logits = model(src, torch.randint(3, 50, (2, 5)))
    logits = logits[0] if isinstance(logits, tuple) else logits
    assert logits.shape == (2, 5, 50)
