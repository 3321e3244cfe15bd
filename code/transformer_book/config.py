"""Sec. 3 and Table 3: every hyperparameter of the model in one frozen dataclass.

The defaults are the paper's base model (Table 3, "base"); named presets give the big model and
two small ones for CPU runs. Any departure from the paper is a flag whose default is the paper's
choice.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace


@dataclass(frozen=True)
class TransformerConfig:
    """Sec. 3 / Table 3: hyperparameters of the encoder-decoder Transformer (base model defaults).

    Build variants with the presets (``TransformerConfig.small(dropout=0.2)``) or
    ``dataclasses.replace(config, ...)``; the object itself is immutable.
    """

    src_vocab_size: int = (
        37000  # Sec. 5.1: shared source-target BPE vocabulary, ~37000 tokens (EN-DE)
    )
    tgt_vocab_size: int = 37000  # Sec. 5.1: the same shared vocabulary on the target side
    d_model: int = 512  # Sec. 3.1: width of the embeddings and of every sub-layer output
    num_heads: int = 8  # Sec. 3.2.2: h = 8 parallel attention heads
    num_layers: int = 6  # Sec. 3.1: N = 6 identical layers, in the encoder and in the decoder each
    d_ff: int = 2048  # Sec. 3.3: inner width of the position-wise feed-forward network
    d_key: int | None = None  # Sec. 3.2.2: per-head query/key width d_k; None = d_model / h (Table 3 B)
    d_value: int | None = None  # Sec. 3.2.2: per-head value width d_v; None = d_model / h
    dropout: float = 0.1  # Sec. 5.4: P_drop on each sub-layer output and on embeddings + positions
    attention_dropout: float = (
        0.0  # not in the paper (Sec. 5.4 has none here); nn.Transformer uses dropout
    )
    ffn_dropout: float = (
        0.0  # not in the paper: dropout after the ReLU of Eq. (2) (Annotated Transformer)
    )
    max_len: int = (
        512  # Sec. 3.5: rows of the positional table = longest sequence (paper sets none)
    )
    pad_id: int = 0  # id of the padding token in both vocabularies (masked out; the paper never
    # mentions padding: batching sentences of different lengths needs it, chapter 4)
    share_embeddings: bool = True  # Sec. 3.4: one embedding matrix for source and target
    tie_output: bool = True  # Sec. 3.4: pre-softmax linear shares the target embedding matrix
    norm_first: bool = (
        False  # Sec. 3.1: post-norm LayerNorm(x + Sublayer(x)); True = later pre-norm
    )
    learned_positions: bool = False  # Sec. 3.5 / Table 3 (E): sinusoids; True = learned positions
    layer_norm_eps: float = 1e-5  # Sec. 3.1 (LayerNorm, Ba et al. 2016): epsilon, PyTorch's default
    # Not in the paper: how the (shared) embedding matrix starts. "xavier" = Xavier-uniform like
    # every other matrix (the Annotated Transformer); "normal" = N(0, d_model^-0.5), the
    # paper's own code (tensor2tensor), so that embedding * sqrt(d_model) has unit scale
    embed_init: str = "xavier"

    def __post_init__(self) -> None:
        for name in (
            "src_vocab_size",
            "tgt_vocab_size",
            "d_model",
            "num_heads",
            "num_layers",
            "d_ff",
            "max_len",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        for name in ("d_key", "d_value"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value <= 0):
                raise ValueError(f"{name} must be a positive integer or None, got {value!r}")
        if (self.d_key is None or self.d_value is None) and self.d_model % self.num_heads != 0:
            raise ValueError(
                f"d_model ({self.d_model}) must be divisible by num_heads ({self.num_heads}) "
                "so that each head has d_k = d_model / num_heads dimensions (Sec. 3.2.2)"
            )
        for name in ("dropout", "attention_dropout", "ffn_dropout"):
            value = getattr(self, name)
            if not 0.0 <= value < 1.0:
                raise ValueError(f"{name} must be in [0, 1), got {value!r}")
        if not 0 <= self.pad_id < min(self.src_vocab_size, self.tgt_vocab_size):
            raise ValueError(
                f"pad_id ({self.pad_id}) must be a valid id in both vocabularies "
                f"(sizes {self.src_vocab_size} and {self.tgt_vocab_size})"
            )
        if self.share_embeddings and self.src_vocab_size != self.tgt_vocab_size:
            raise ValueError(
                f"share_embeddings=True needs one shared vocabulary (Sec. 3.4), but "
                f"src_vocab_size={self.src_vocab_size} != tgt_vocab_size={self.tgt_vocab_size}; "
                "use equal sizes or share_embeddings=False"
            )
        if self.embed_init not in ("xavier", "normal"):
            raise ValueError(f"embed_init must be 'xavier' or 'normal', got {self.embed_init!r}")
        if self.layer_norm_eps <= 0:
            raise ValueError(f"layer_norm_eps must be positive, got {self.layer_norm_eps!r}")

    @property
    def d_k(self) -> int:
        """Sec. 3.2.2: per-head query/key width, d_model / h (64 in the base model) unless d_key."""
        return self.d_key if self.d_key is not None else self.d_model // self.num_heads

    @property
    def d_v(self) -> int:
        """Sec. 3.2.2: per-head value width, d_model / h (64 in the base model) unless d_value."""
        return self.d_value if self.d_value is not None else self.d_model // self.num_heads

    def to_dict(self) -> dict:
        """The fields as a plain dict (for logging and checkpoints)."""
        return asdict(self)

    def replace(self, **changes) -> TransformerConfig:
        """A copy with some fields changed (``dataclasses.replace``), validated again."""
        return replace(self, **changes)

    @classmethod
    def base(cls, **overrides) -> TransformerConfig:
        """Table 3, "base": d_model 512, h 8, N 6, d_ff 2048, P_drop 0.1 (~63M parameters here)."""
        return cls(**overrides)

    @classmethod
    def big(cls, **overrides) -> TransformerConfig:
        """Table 3, "big": d_model 1024, h 16, d_ff 4096, P_drop 0.3 (the EN-DE value)."""
        return cls(**{"d_model": 1024, "num_heads": 16, "d_ff": 4096, "dropout": 0.3, **overrides})

    @classmethod
    def small(cls, **overrides) -> TransformerConfig:
        """Not in the paper: a model that trains on a CPU in minutes (Multi30k-sized data)."""
        return cls(**{"d_model": 256, "num_heads": 4, "num_layers": 3, "d_ff": 1024, **overrides})

    @classmethod
    def cpu(cls, **overrides) -> TransformerConfig:
        """Not in the paper: the small model with the embedding scale of the paper's code.

        d_model 256, 4 heads, 3 + 3 post-norm layers, d_ff 1024, P_drop 0.1, and the embedding
        drawn from N(0, d_model^-0.5) (``embed_init="normal"``). With ``TrainConfig.cpu()``
        it reached over 30 BLEU on Multi30k test 2016 in 20 minutes on 2 cores of an AMD EPYC
        and of an Intel Xeon (chapter 8); a slower CPU takes fewer steps in the same time.
        """
        return cls.small(**{"embed_init": "normal", **overrides})

    @classmethod
    def tiny(cls, **overrides) -> TransformerConfig:
        """Not in the paper: for tests and toy tasks such as copying a sequence."""
        defaults = {"d_model": 64, "num_heads": 4, "num_layers": 2, "d_ff": 128, "dropout": 0.0}
        return cls(**{**defaults, **overrides})
