"""transformer_book: the package behind "Attention Is All You Need, built and trained cell by
cell", one module per concept of the paper; chapters build each piece, then import it from here.

The model (Sec. 3): ``config`` (TransformerConfig, Table 3), ``masks``, ``attention`` (Eq. 1,
Sec. 3.2), ``layers`` (Sec. 3.1, 3.3), ``positional`` (Sec. 3.5), ``model`` (Sec. 3.4),
``decode`` (greedy and beam search, Sec. 6.1).

The data (Sec. 5.1): ``data`` (Multi30k), ``corpus`` (your own parallel files; tokenised and
batched corpora), ``hf_dataset`` (a Hugging Face dataset, streamed), ``tokenizer`` (joint BPE),
``batching`` (token-budget batches).

Training (Sec. 5): ``loss`` (label smoothing, Sec. 5.4), ``schedule`` (Adam and Eq. 3,
Sec. 5.3), ``step`` (one optimiser step), ``precision`` (mixed precision), ``train`` (the loop,
with a time budget turned into steps), ``distributed`` (several processes), ``checkpoint``
(checkpoint files, weight averaging, Sec. 6.1), ``runlog`` (metrics.jsonl). ``evaluation``
translates and scores BLEU (Sec. 6.1); ``cli`` is ``python -m transformer_book``.

Around them: ``files`` (atomic writes, UTF-8 lines), ``utils``, ``plotting``, ``cost`` (what the
Transformer costs, counted), ``rnn`` (chapter 1's baselines), ``recurrent`` (the recurrent
translator the paper measures against, with the same interface). The measuring
lab of chapters 9-11 and the scripts in ``benchmarks/`` (timings, memory, throughput ladders) is
a second package installed beside this one, ``transformer_lab``.
"""

from importlib import metadata as _metadata

from transformer_book.attention import (
    KVCache,
    MultiHeadAttention,
    fast_scaled_dot_product_attention,
    scaled_dot_product_attention,
)
from transformer_book.config import RecurrentConfig, TransformerConfig
from transformer_book.decode import (
    EncoderDecoder,
    beam_search,
    greedy_decode,
    length_penalty_gnmt,
    to_lists,
)
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
from transformer_book.recurrent import RecurrentCache, RecurrentTranslator
from transformer_book.utils import describe_hardware, expect_error, get_device, set_seed

__all__ = [
    "AddNorm",
    "Decoder",
    "DecoderCache",
    "DecoderLayer",
    "EncoderDecoder",
    "Encoder",
    "EncoderLayer",
    "KVCache",
    "LearnedPositionalEmbedding",
    "MultiHeadAttention",
    "PositionalEncoding",
    "PositionwiseFeedForward",
    "RecurrentCache",
    "RecurrentConfig",
    "RecurrentTranslator",
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
