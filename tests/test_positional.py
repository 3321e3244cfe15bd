"""Tests for transformer_book.positional (Sec. 3.5): the table equals the paper's formula,
it is a buffer, offsets and limits behave."""

import math

import pytest
import torch
from transformer_book.positional import (
    LearnedPositionalEmbedding,
    PositionalEncoding,
    sinusoidal_table,
)


@pytest.mark.parametrize("d_model", [16, 7])
def test_table_equals_formula(d_model):
    max_len = 50
    table = sinusoidal_table(max_len, d_model)
    assert table.shape == (max_len, d_model) and table.dtype == torch.float32
    expected = torch.empty(max_len, d_model)
    for pos in range(max_len):
        for dim in range(d_model):
            i = dim // 2
            angle = pos / 10000 ** (2 * i / d_model)
            expected[pos, dim] = math.sin(angle) if dim % 2 == 0 else math.cos(angle)
    torch.testing.assert_close(table, expected, atol=1e-6, rtol=0)


def test_encoding_is_a_buffer_added_with_offset():
    pe = PositionalEncoding(8, max_len=20)
    assert len(list(pe.parameters())) == 0
    assert "pe" not in pe.state_dict()  # non-persistent: a pure function of (max_len, d_model)
    x = torch.randn(2, 5, 8)
    table = sinusoidal_table(20, 8)
    torch.testing.assert_close(pe(x), x + table[:5])
    torch.testing.assert_close(pe(x, offset=3), x + table[3:8])
    # offset lets a decoder step reproduce a slice of the full sequence
    full = pe(torch.zeros(1, 10, 8))
    torch.testing.assert_close(pe(torch.zeros(1, 1, 8), offset=7), full[:, 7:8])


def test_dropout_only_in_training():
    pe = PositionalEncoding(8, max_len=20, dropout=0.5)
    x = torch.randn(2, 5, 8)
    pe.eval()
    torch.testing.assert_close(pe(x), x + sinusoidal_table(20, 8)[:5])
    pe.train()
    torch.manual_seed(0)
    assert (pe(x) == 0).any()


def test_low_precision_input_keeps_dtype():
    pe = PositionalEncoding(8, max_len=20)
    assert pe(torch.randn(1, 4, 8, dtype=torch.bfloat16)).dtype == torch.bfloat16


@pytest.mark.parametrize("cls", [PositionalEncoding, LearnedPositionalEmbedding])
def test_errors(cls):
    pe = cls(8, max_len=10)
    with pytest.raises(ValueError, match="max_len"):
        pe(torch.zeros(1, 11, 8))
    with pytest.raises(ValueError, match="max_len"):
        pe(torch.zeros(1, 4, 8), offset=7)
    with pytest.raises(ValueError, match="d_model"):
        pe(torch.zeros(1, 4, 9))
    with pytest.raises(ValueError, match="offset"):
        pe(torch.zeros(1, 4, 8), offset=-1)


def test_learned_positions_are_parameters_and_respect_offset():
    torch.manual_seed(0)
    pe = LearnedPositionalEmbedding(8, max_len=10)
    assert sum(p.numel() for p in pe.parameters()) == 80
    x = torch.zeros(1, 6, 8)
    full = pe(x)
    torch.testing.assert_close(pe(x[:, :2], offset=4), full[:, 4:6])
    torch.testing.assert_close(full[0], pe.embedding.weight[:6])


def test_wavelengths_and_concatenated_layout():
    """Longest wavelength is 2 pi 10000^((d - 2) / d), not 10000 * 2 pi; [sin | cos] is a permutation."""
    d_model = 16
    table = sinusoidal_table(20000, d_model).double()  # (20000, 16)
    omega = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)  # (8,)
    assert math.isclose(2 * math.pi / omega[-1].item(), 2 * math.pi * 10000 ** (14 / 16))
    pos = torch.arange(20000, dtype=torch.float64)[:, None]  # (20000, 1)
    halves = torch.cat([torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)])
    concatenated = torch.cat([torch.sin(pos * omega), torch.cos(pos * omega)], dim=1)
    torch.testing.assert_close(table[:, halves], concatenated, atol=1e-6, rtol=0)
