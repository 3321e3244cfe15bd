"""Tests for transformer_book.config and transformer_book.model (Sec. 3, Table 3): parameter
counts, causality, padding invariance, the copy task, cached decoding, weights, clear errors."""

import dataclasses

import pytest
import torch
from conftest import BOS, EOS, LENGTH, copy_batch
from transformer_book.config import TransformerConfig
from transformer_book.decode import greedy_decode
from transformer_book.model import Transformer


def _small_model(**overrides) -> Transformer:
    torch.manual_seed(0)
    config = TransformerConfig.tiny(src_vocab_size=20, tgt_vocab_size=20, max_len=32, **overrides)
    return Transformer(config).eval()


# ---- config -------------------------------------------------------------------------------


def test_config_defaults_are_the_paper_base_model():
    c = TransformerConfig()
    assert (c.d_model, c.num_heads, c.num_layers, c.d_ff, c.dropout) == (512, 8, 6, 2048, 0.1)
    assert c.d_k == 64 and c.share_embeddings and c.tie_output and not c.norm_first
    big = TransformerConfig.big()
    assert (big.d_model, big.num_heads, big.d_ff, big.dropout, big.d_k) == (1024, 16, 4096, 0.3, 64)
    assert TransformerConfig.small().d_model == 256 and TransformerConfig.tiny().dropout == 0.0
    assert TransformerConfig.tiny(num_layers=3).num_layers == 3
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.d_model = 4


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"d_model": 30, "num_heads": 4}, "divisible"),
        ({"src_vocab_size": 100, "tgt_vocab_size": 200}, "share_embeddings"),
        ({"dropout": 1.0}, "dropout"),
        ({"num_layers": 0}, "num_layers"),
        ({"pad_id": 37000}, "pad_id"),
        ({"max_len": 2.5}, "max_len"),
    ],
)
def test_config_validation(overrides, match):
    with pytest.raises(ValueError, match=match):
        TransformerConfig(**overrides)
    TransformerConfig(
        src_vocab_size=100, tgt_vocab_size=200, share_embeddings=False, tie_output=True
    )


# ---- parameter counts (Table 3) -------------------------------------------------------------


def _count_by_hand(V: int, D: int, Dff: int, N: int) -> int:
    """Shared embedding (tied to the output layer, no output bias) + N encoder + N decoder layers."""
    attention = 4 * (D * D + D)  # W^Q, W^K, W^V, W^O with biases
    ffn = D * Dff + Dff + Dff * D + D  # Eq. (2)
    layer_norm = 2 * D  # gain and bias
    encoder_layer = attention + ffn + 2 * layer_norm
    decoder_layer = 2 * attention + ffn + 3 * layer_norm
    return V * D + N * (encoder_layer + decoder_layer)


def test_parameter_counts_of_base_and_big_match_the_formula():
    with torch.device("meta"):  # shapes only: no memory, no initialisation cost
        base = Transformer(TransformerConfig.base())
        big = Transformer(TransformerConfig.big())
    assert base.num_parameters() == _count_by_hand(37000, 512, 2048, 6) == 63_082_496  # paper: 65M
    assert (
        big.num_parameters() == _count_by_hand(37000, 1024, 4096, 6) == 214_245_376
    )  # paper: 213M


def test_sharing_and_tying():
    tied = _small_model()
    assert tied.src_embed.weight is tied.tgt_embed.weight is tied.generator.weight
    untied = _small_model(share_embeddings=False, tie_output=False)
    V, D = 20, 64
    assert untied.num_parameters() - tied.num_parameters() == 2 * V * D
    pre = _small_model(norm_first=True)  # two final LayerNorms
    assert pre.num_parameters() - tied.num_parameters() == 2 * 2 * D
    learned = _small_model(learned_positions=True)
    assert learned.num_parameters() - tied.num_parameters() == 32 * D


# ---- the model's behaviour -----------------------------------------------------------------


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_is_causal(norm_first):
    model = _small_model(norm_first=norm_first)
    src = torch.randint(3, 20, (2, 7))
    tgt = torch.randint(3, 20, (2, 6))
    logits = model(src, tgt)
    for t in range(6):
        changed = tgt.clone()
        changed[:, t] = (changed[:, t] + 1 - 3) % 17 + 3  # another real token
        new = model(src, changed)
        torch.testing.assert_close(new[:, :t], logits[:, :t], atol=1e-6, rtol=0)
        assert not torch.allclose(new[:, t:], logits[:, t:])


def test_padding_in_source_changes_nothing():
    model = _small_model()
    src = torch.randint(3, 20, (2, 7))
    src[0, 4:] = 0  # sentence 0 has 4 real tokens, then padding
    tgt = torch.randint(3, 20, (2, 5))
    logits = model(src, tgt)
    memory, src_mask = model.encode(src)
    # 1. Whatever sits at the padded positions of the encoder input, the real positions'
    #    memory is the same (nobody attends to a padded key).
    x = model.positional(model.src_embed(src) * 8.0)  # (B, S, D), sqrt(d_model) = 8
    x_changed = x.clone()
    x_changed[0, 4:] = torch.randn(3, 64) * 10
    memory_changed, _ = model.encoder(x_changed, src_mask)
    torch.testing.assert_close(memory_changed[0, :4], memory[0, :4], atol=1e-5, rtol=0)
    assert not torch.allclose(memory_changed[0, 4:], memory[0, 4:])
    # 2. The decoder ignores the memory at padded positions.
    noisy = memory.clone()
    noisy[0, 4:] = torch.randn(3, 64) * 10
    torch.testing.assert_close(model.decode(tgt, noisy, src_mask), logits, atol=1e-5, rtol=0)
    # 3. The sentence alone, or with more padding, gives the same logits as in the batch.
    torch.testing.assert_close(model(src[:1, :4], tgt[:1]), logits[:1], atol=1e-5, rtol=0)
    more = torch.cat([src, torch.zeros(2, 5, dtype=torch.long)], dim=1)  # (2, 12)
    torch.testing.assert_close(model(more, tgt), logits, atol=1e-5, rtol=0)
    # 4. Without the mask the padded keys would matter (the test can fail).
    unmasked = torch.ones_like(src_mask)
    assert not torch.allclose(model.decode(tgt, noisy, unmasked), logits, atol=1e-3)


def test_target_padding_does_not_change_real_positions():
    model = _small_model()
    src = torch.randint(3, 20, (1, 6))
    tgt = torch.randint(3, 20, (1, 4))
    padded = torch.cat([tgt, torch.zeros(1, 3, dtype=torch.long)], dim=1)
    torch.testing.assert_close(model(src, padded)[:, :4], model(src, tgt), atol=1e-5, rtol=0)


def test_need_weights_returns_every_map():
    model = _small_model()
    src, tgt = torch.randint(3, 20, (2, 7)), torch.randint(3, 20, (2, 5))
    src[1, 5:] = 0
    logits, weights = model(src, tgt, need_weights=True)
    torch.testing.assert_close(logits, model(src, tgt))
    assert set(weights) == {"encoder", "decoder_self", "decoder_cross"}
    assert [w.shape for w in weights["encoder"]] == [(2, 4, 7, 7)] * 2
    assert [w.shape for w in weights["decoder_self"]] == [(2, 4, 5, 5)] * 2
    assert [w.shape for w in weights["decoder_cross"]] == [(2, 4, 5, 7)] * 2
    assert torch.all(weights["decoder_cross"][0][1, :, :, 5:] == 0)
    torch.testing.assert_close(weights["encoder"][1].sum(-1), torch.ones(2, 4, 7))
    assert not any(isinstance(v, torch.Tensor) and v.dim() == 4 for v in vars(model).values())


def test_embeddings_scaled_by_sqrt_d_model():
    model = _small_model()
    src = torch.randint(3, 20, (1, 5))
    x = model.src_embed(src) * 8.0  # sqrt(64)
    memory_expected, _ = model.encoder(model.positional(x), None)
    memory, _ = model.encode(src)
    torch.testing.assert_close(memory, memory_expected)


def test_cached_decode_equals_full_decode():
    model = _small_model()
    src = torch.randint(3, 20, (2, 7))
    src[1, 5:] = 0
    tgt = torch.randint(3, 20, (2, 6))
    tgt[1, 4:] = 0  # padding inside the target too
    memory, src_mask = model.encode(src)
    full = model.decode(tgt, memory, src_mask)
    cache = model.new_cache()
    steps = [model.decode(tgt[:, t : t + 1], memory, src_mask, cache) for t in range(6)]
    assert len(cache) == 6
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)
    cache = model.new_cache()  # several positions per call work too
    chunks = [
        model.decode(tgt[:, :2], memory, src_mask, cache),
        model.decode(tgt[:, 2:], memory, src_mask, cache),
    ]
    torch.testing.assert_close(torch.cat(chunks, dim=1), full, atol=1e-5, rtol=1e-5)


def test_copy_task_is_learned_to_100_percent(copy_task):
    assert copy_task.final_loss < 0.01
    g = torch.Generator().manual_seed(123)
    src, _, _ = copy_batch(200, generator=g)
    out = greedy_decode(copy_task.model, src, BOS, EOS, max_new_tokens=LENGTH + 1)
    assert out.shape == (200, LENGTH + 2)
    assert torch.equal(out[:, 1 : LENGTH + 1], src)  # every sequence copied exactly
    assert torch.all(out[:, -1] == EOS)


# ---- clear errors ---------------------------------------------------------------------------


def test_errors():
    model = _small_model()
    src, tgt = torch.randint(3, 20, (2, 7)), torch.randint(3, 20, (2, 5))
    with pytest.raises(ValueError, match="outside the vocabulary"):
        model(torch.full((2, 7), 20), tgt)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        model(src, torch.full((2, 5), -1))
    with pytest.raises(ValueError, match="max_len"):
        model(torch.randint(3, 20, (2, 33)), tgt)
    with pytest.raises(ValueError, match="empty"):
        model(src[:0], tgt[:0])
    with pytest.raises(ValueError, match="empty"):
        model(src[:, :0], tgt)
    with pytest.raises(TypeError, match="integer"):
        model(src.float(), tgt)
    with pytest.raises(ValueError, match="shape"):
        model(src[0], tgt)
    with pytest.raises(ValueError, match="batch"):
        model(src, tgt[:1])
    memory, src_mask = model.encode(src)
    cache = model.new_cache()
    model.decode(tgt[:, :30], memory, src_mask, cache)
    with pytest.raises(ValueError, match="max_len"):
        model.decode(torch.randint(3, 20, (2, 28)), memory, src_mask, cache)
    with pytest.raises(TypeError, match="TransformerConfig"):
        Transformer({"d_model": 64})


def test_token_check_can_move_to_the_data_pipeline():
    """model.check_token_ids = False skips the per-forward range check (its int() reads the
    ids back from the device); the default keeps the clear error."""
    cfg = TransformerConfig.tiny(src_vocab_size=10, tgt_vocab_size=10)
    model = Transformer(cfg).eval()
    src, tgt = torch.tensor([[3, 4, 12]]), torch.tensor([[1, 5]])
    with pytest.raises(ValueError, match="src contains id 12"):
        model(src, tgt)
    model.check_token_ids = False
    with pytest.raises(IndexError):  # now only the embedding lookup notices
        model(src, tgt)
    with pytest.raises(ValueError, match="must have shape"):  # cheap shape checks stay
        model(src[0], tgt)
