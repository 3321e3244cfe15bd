"""transformer_book: the shared package behind "Attention Is All You Need, built and trained
cell by cell". Each module holds one concept of the paper; chapters build each piece in the open,
check it against the version here, and import it from here afterwards."""

from importlib import metadata as _metadata

from transformer_book.attention import (
    KVCache,
    MultiHeadAttention,
    fast_scaled_dot_product_attention,
    scaled_dot_product_attention,
)
from transformer_book.config import TransformerConfig
from transformer_book.decode import beam_search, greedy_decode, length_penalty_gnmt, to_lists
from transformer_book.layers import (
    AddNorm,
    Decoder,
    DecoderLayer,
    Encoder,
    EncoderLayer,
    PositionwiseFeedForward,
    SublayerConnection,
)
from transformer_book.masks import causal_mask, check_mask, padding_mask
from transformer_book.model import DecoderCache, Transformer
from transformer_book.positional import (
    LearnedPositionalEmbedding,
    PositionalEncoding,
    sinusoidal_table,
)
from transformer_book.utils import describe_hardware, expect_error, get_device, set_seed

__all__ = [
    "AddNorm",
    "Decoder",
    "DecoderCache",
    "DecoderLayer",
    "Encoder",
    "EncoderLayer",
    "KVCache",
    "LearnedPositionalEmbedding",
    "MultiHeadAttention",
    "PositionalEncoding",
    "PositionwiseFeedForward",
    "SublayerConnection",
    "Transformer",
    "TransformerConfig",
    "beam_search",
    "causal_mask",
    "check_mask",
    "describe_hardware",
    "expect_error",
    "fast_scaled_dot_product_attention",
    "get_device",
    "greedy_decode",
    "length_penalty_gnmt",
    "padding_mask",
    "scaled_dot_product_attention",
    "set_seed",
    "sinusoidal_table",
    "to_lists",
]
# The version is defined once, in pyproject.toml; the chapters' install cells ask for it.
try:
    __version__ = _metadata.version("transformer-book")
except _metadata.PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "unknown"
