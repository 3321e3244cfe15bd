"""Tests for transformer_book.masks: meaning, shape and validation of the two masks (Sec. 3.2.3)."""

import pytest
import torch
from transformer_book.masks import causal_mask, check_mask, padding_mask


def test_padding_mask_marks_real_tokens():
    tokens = torch.tensor([[5, 6, 0, 0], [7, 0, 0, 0]])
    mask = padding_mask(tokens, pad_id=0)
    assert mask.dtype == torch.bool
    assert mask.shape == (2, 1, 1, 4)
    expected = torch.tensor([[True, True, False, False], [True, False, False, False]])
    assert torch.equal(mask[:, 0, 0], expected)


def test_padding_mask_uses_given_pad_id():
    tokens = torch.tensor([[1, 2, 3]])
    assert torch.equal(padding_mask(tokens, pad_id=3)[0, 0, 0], torch.tensor([True, True, False]))


def test_padding_mask_rejects_bad_input():
    with pytest.raises(ValueError, match="shape"):
        padding_mask(torch.tensor([1, 2, 3]), 0)
    with pytest.raises(TypeError, match="integer"):
        padding_mask(torch.zeros(2, 3), 0)


def test_causal_mask_is_lower_triangular():
    mask = causal_mask(4)
    assert mask.dtype == torch.bool and mask.shape == (4, 4)
    for i in range(4):
        for j in range(4):
            assert bool(mask[i, j]) == (j <= i)


def test_causal_mask_with_cached_keys_is_the_last_rows_of_the_full_mask():
    full = causal_mask(6)
    assert torch.equal(causal_mask(2, key_len=6), full[4:])
    assert torch.equal(causal_mask(1, key_len=6), torch.ones(1, 6, dtype=torch.bool))
    with pytest.raises(ValueError):
        causal_mask(3, key_len=2)


def test_check_mask_accepts_broadcastable_and_rejects_others():
    B, H, L, S = 2, 3, 4, 5
    check_mask(None, B, H, L, S)
    check_mask(torch.ones(B, 1, 1, S, dtype=torch.bool), B, H, L, S)
    check_mask(torch.ones(L, S, dtype=torch.bool), B, H, L, S)
    check_mask(torch.ones(B, H, L, S, dtype=torch.bool), B, H, L, S)
    with pytest.raises(TypeError, match="torch.bool"):
        check_mask(torch.ones(B, 1, 1, S), B, H, L, S)
    with pytest.raises(TypeError, match="torch.bool"):
        check_mask(torch.ones(B, 1, 1, S, dtype=torch.long), B, H, L, S)
    with pytest.raises(ValueError, match="broadcast"):
        check_mask(torch.ones(B, 1, 1, S + 1, dtype=torch.bool), B, H, L, S)
    with pytest.raises(ValueError, match="broadcast"):
        check_mask(torch.ones(B + 1, 1, 1, S, dtype=torch.bool), B, H, L, S)
    with pytest.raises(ValueError, match="broadcast"):
        check_mask(torch.ones(1, B, H, L, S, dtype=torch.bool), B, H, L, S)
    with pytest.raises(TypeError):
        check_mask([[True]], B, H, L, S)


def test_decoder_mask_is_causal_and_padding_combined():
    # Chapter 4: (L, L) & (B, 1, 1, L) broadcasts to (B, 1, L, L); a query sees key j only when
    # j <= i and token j is real.
    tokens = torch.tensor([[4, 5, 6, 0], [7, 8, 0, 0]])
    mask = causal_mask(4) & padding_mask(tokens, pad_id=0)
    assert mask.shape == (2, 1, 4, 4)
    for b in range(2):
        for i in range(4):
            for j in range(4):
                assert bool(mask[b, 0, i, j]) == (j <= i and int(tokens[b, j]) != 0)
    check_mask(mask, 2, 3, 4, 4)


def test_left_padding_with_causal_mask_leaves_pad_queries_without_keys():
    # Chapter 4's fully masked rows: left padding & causal mask empties the rows of the pads.
    tokens = torch.tensor([[0, 0, 3, 4]])
    mask = causal_mask(4) & padding_mask(tokens, pad_id=0)
    assert (~mask.any(dim=-1)).nonzero()[:, -1].tolist() == [0, 1]
