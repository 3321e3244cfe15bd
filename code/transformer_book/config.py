"""Sec. 3 and Table 3: every hyperparameter of the model in one frozen dataclass
(:class:`TransformerConfig`, the base model by default, any departure from the paper a field
whose default is the paper's choice); Sec. 5: a training run's settings (:class:`TrainConfig`);
and the recurrent baseline's (:class:`RecurrentConfig`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields, replace


class _ConfigMethods:
    """What the model configs share: a plain dict, and a validated copy."""

    def to_dict(self) -> dict:
        """The fields as a plain dict (for logging and checkpoints; ``kind`` included where the
        config has one)."""
        return asdict(self)

    def replace(self, **changes):
        """A copy with some fields changed (``dataclasses.replace``), validated again."""
        return replace(self, **changes)

    def _check_shared(self, sizes: tuple[str, ...], rates: tuple[str, ...]) -> None:
        """The checks both model configs make: ``sizes`` are positive integers, dropout
        ``rates`` lie in [0, 1), ``pad_id`` is an id of both vocabularies, and a shared embedding
        has one vocabulary."""
        for name in sizes:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        for name in rates:
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


@dataclass(frozen=True)
class TransformerConfig(_ConfigMethods):
    """Sec. 3 / Table 3: hyperparameters of the encoder-decoder Transformer (base model defaults);
    variants from the presets (``TransformerConfig.small(dropout=0.2)``) or :meth:`replace`."""

    src_vocab_size: int = 37000  # Sec. 5.1: shared source-target BPE vocabulary, ~37000 (EN-DE)
    tgt_vocab_size: int = 37000  # Sec. 5.1: the same shared vocabulary on the target side
    d_model: int = 512  # Sec. 3.1: width of the embeddings and of every sub-layer output
    num_heads: int = 8  # Sec. 3.2.2: h = 8 parallel attention heads
    num_layers: int = 6  # Sec. 3.1: N = 6 identical layers, in the encoder and in the decoder each
    d_ff: int = 2048  # Sec. 3.3: inner width of the position-wise feed-forward network
    d_key: int | None = None  # Sec. 3.2.2: per-head query/key width d_k; None = d_model / h (Table 3 B)
    d_value: int | None = None  # Sec. 3.2.2: per-head value width d_v; None = d_model / h
    dropout: float = 0.1  # Sec. 5.4: P_drop on each sub-layer output and on embeddings + positions
    attention_dropout: float = 0.0  # not in the paper (Sec. 5.4 has none); nn.Transformer has it
    ffn_dropout: float = 0.0  # not in the paper: after the ReLU of Eq. (2) (Annotated Transformer)
    max_len: int = 512  # Sec. 3.5: rows of the positional table = longest sequence (paper: none)
    pad_id: int = 0  # the padding id in both vocabularies, masked out (not in the paper; chapter 4)
    share_embeddings: bool = True  # Sec. 3.4: one embedding matrix for source and target
    tie_output: bool = True  # Sec. 3.4: pre-softmax linear shares the target embedding matrix
    norm_first: bool = False  # Sec. 3.1: post-norm LayerNorm(x + Sublayer(x)); True = pre-norm
    learned_positions: bool = False  # Sec. 3.5 / Table 3 (E): sinusoids; True = learned positions
    layer_norm_eps: float = 1e-5  # Sec. 3.1 (LayerNorm, Ba et al. 2016): epsilon, PyTorch's default
    # Not in the paper: the embedding's start, "xavier" (as every matrix, the Annotated Transformer)
    # or "normal": N(0, d_model^-0.5), the paper's code, unit scale after * sqrt(d_model)
    embed_init: str = "xavier"

    def __post_init__(self) -> None:
        self._check_shared(("src_vocab_size", "tgt_vocab_size", "d_model", "num_heads",
                            "num_layers", "d_ff", "max_len"),
                           ("dropout", "attention_dropout", "ffn_dropout"))
        for name in ("d_key", "d_value"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value <= 0):
                raise ValueError(f"{name} must be a positive integer or None, got {value!r}")
        if (self.d_key is None or self.d_value is None) and self.d_model % self.num_heads != 0:
            raise ValueError(
                f"d_model ({self.d_model}) must be divisible by num_heads ({self.num_heads}) "
                "so that each head has d_k = d_model / num_heads dimensions (Sec. 3.2.2)"
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
        """Not in the paper: :meth:`small` with ``embed_init="normal"`` (the paper's code) and
        no dropout (a CPU budget sees each sentence only a few times). Train it with
        ``TrainConfig.cpu()`` (chapters 8 and 11; the runs: ``benchmarks/README.md``)."""
        return cls.small(**{"embed_init": "normal", "dropout": 0.0, **overrides})

    @classmethod
    def tiny(cls, **overrides) -> TransformerConfig:
        """Not in the paper: for tests and toy tasks such as copying a sequence."""
        defaults = {"d_model": 64, "num_heads": 4, "num_layers": 2, "d_ff": 128, "dropout": 0.0}
        return cls(**{**defaults, **overrides})


@dataclass(frozen=True)
class RecurrentConfig(_ConfigMethods):
    """Not in the paper: the recurrent translator it is measured against (Sec. 1, Table 2),
    :class:`transformer_book.recurrent.RecurrentTranslator` (whose docstring gives the sources).
    Presets: :meth:`cpu` (the defaults) and :meth:`tiny`.
    """

    src_vocab_size: int = 8000  # the book's shared BPE vocabulary on Multi30k
    tgt_vocab_size: int = 8000  # the same shared vocabulary on the target side
    d_model: int = 256  # embeddings and attentional vector (Luong Eq. 5); Eq. (3)'s d_model
    hidden_size: int = 416  # LSTM width (encoder: half per direction); cpu() ~ Transformer's cpu()
    num_layers: int = 2  # stacked LSTM layers in the encoder and in the decoder each
    attention: str = "additive"  # score(h_t, h_s): "additive" (Bahdanau) or "general" (Luong)
    input_feeding: bool = True  # Luong Sec. 3.3: the last attentional vector joins the input
    dropout: float = 0.2  # embeddings, between layers, attentional vector, not recurrent (Zaremba)
    max_len: int = 512  # longest source or target accepted; also caps the decoding length
    pad_id: int = 0  # id of the padding token in both vocabularies
    share_embeddings: bool = True  # one embedding matrix for source and target
    tie_output: bool = True  # the output layer reuses the target embedding (Press and Wolf 2017)
    # which model a checkpoint's model_config describes (TransformerConfig has no such field)
    kind: str = field(default="rnn", init=False)

    def __post_init__(self) -> None:
        self._check_shared(("src_vocab_size", "tgt_vocab_size", "d_model", "hidden_size",
                            "num_layers", "max_len"), ("dropout",))
        if self.hidden_size % 2:
            raise ValueError(f"hidden_size must be even (each encoder direction has half), got "
                             f"{self.hidden_size}")
        if self.attention not in ("additive", "general"):
            raise ValueError(f"attention must be 'additive' or 'general', got {self.attention!r}")

    @classmethod
    def cpu(cls, **overrides) -> RecurrentConfig:
        """The defaults: about 7.7M parameters with a shared vocabulary of 8,000
        (``TransformerConfig.cpu()``: 7.6M); train it with ``TrainConfig.cpu_rnn()``."""
        return cls(**overrides)

    @classmethod
    def tiny(cls, **overrides) -> RecurrentConfig:
        """For tests and toy tasks."""
        defaults = {"d_model": 32, "hidden_size": 64, "num_layers": 1, "dropout": 0.0}
        return cls(**{**defaults, **overrides})


#: The model configs a checkpoint's ``model_config`` can describe, by their ``kind``.
MODEL_KINDS = {"transformer": TransformerConfig, "rnn": RecurrentConfig}
#: The presets (class methods) of each kind's config.
PRESETS = {"transformer": ("tiny", "small", "cpu", "base", "big"), "rnn": ("tiny", "cpu")}


def model_config_from_dict(config: dict) -> TransformerConfig | RecurrentConfig:
    """The config a checkpoint's ``model_config`` describes, its ``kind`` naming the class (none:
    TransformerConfig). ValueError: an unknown kind or refused values; TypeError: unknown fields."""
    fields = dict(config)
    kind = fields.pop("kind", "transformer")
    if kind not in MODEL_KINDS:
        raise ValueError(f"unknown model kind {kind!r} (known: {', '.join(MODEL_KINDS)})")
    return MODEL_KINDS[kind](**fields)


def model_config_for(tokenizer, preset: str = "small", kind: str = "transformer",
                     **overrides) -> TransformerConfig | RecurrentConfig:
    """The ``preset`` of the model ``kind`` (a key of :data:`MODEL_KINDS`) sized for
    ``tokenizer``: its vocabulary on both sides (one shared embedding matrix) and its padding
    id, with ``overrides``."""
    return getattr(MODEL_KINDS[kind], preset)(
        **{"src_vocab_size": tokenizer.vocab_size, "tgt_vocab_size": tokenizer.vocab_size,
           "share_embeddings": True, "pad_id": tokenizer.pad_id, **overrides})


# --------------------------------------------------------------------------- training

#: The learning-rate schedules (:mod:`transformer_book.schedule`): Eq. (3), or its warm-up
#: followed by a linear decay to zero when the run ends.
SCHEDULES = ("noam", "linear", "constant")


def in_interval(value, interval: str) -> bool:
    """Whether the number ``value`` lies in ``interval``, written as in mathematics: ``"[1, inf)"``,
    ``"(0, inf)"``, ``"[0, 1)"``."""
    low, high = (float(x) for x in interval[1:-1].split(","))
    return (isinstance(value, (int, float)) and math.isfinite(value)
            and (value > low if interval[0] == "(" else value >= low)
            and (value < high if interval[-1] == ")" else value <= high))


def _setting(default, help: str, *, flag: bool = False, valid=None, resume: bool = False,
             metavar: str | None = None):
    """A :class:`TrainConfig` field: its default, and in its metadata what the command line
    builds the ``train`` flags from: ``help``; ``flag`` (``train`` takes it as ``--NAME``);
    ``valid`` (an interval such as ``"[1, inf)"``, or a tuple of choices); ``resume`` (``train
    --resume`` may change it; every other setting comes from the checkpoint); ``metavar``."""
    return field(default=default, metadata={"help": help, "flag": flag, "valid": valid,
                                            "resume": resume, "metavar": metavar})


@dataclass(frozen=True)
class TrainConfig:
    """Sec. 5: the settings of a training run (the model's live in :class:`TransformerConfig`);
    each field's metadata also describes its command-line flag (:func:`_setting`)."""

    max_tokens: int = _setting(
        4096, "padded tokens per batch (the paper: ~25k source + 25k target tokens, Sec. 5.1)",
        flag=True, valid="[1, inf)")
    accumulate: int = _setting(
        1, "batches per optimiser step and process, gradients accumulated (weighted by target "
        "tokens); under torchrun a step takes nproc * ACCUMULATE batches, so e.g. 2 on one "
        "process matches 2 processes of 1", flag=True, valid="[1, inf)", resume=True)
    epochs: int = _setting(
        10, "passes over the training data (fewer if max_steps or time_budget ends the run first)",
        flag=True, valid="[1, inf)", resume=True)
    max_steps: int | None = _setting(
        None, "optimiser steps in total (None: no limit)", flag=True, valid="[1, inf)",
        resume=True)
    warmup_steps: int = _setting(
        4000, "steps of the learning rate's linear warm-up, Eq. (3), Sec. 5.3", flag=True,
        valid="[1, inf)")
    lr_factor: float = _setting(
        1.0, "multiplier on the learning rate of Eq. (3) (1.0 = the paper)", flag=True,
        valid="(0, inf)")
    schedule: str = _setting(
        "noam", "the learning rate: Eq. (3) ('noam'); its warm-up and peak, then a linear decay "
        "to 0 at the run's end (epochs, max_steps or time_budget) ('linear'), or held ('constant')",
        flag=True, valid=SCHEDULES)
    time_budget: float | None = _setting(
        None, "seconds of training steps, turned into a number of steps once, when the pace "
        "of the run's steps has settled (validation not counted; None: no limit)", flag=True,
        valid="(0, inf)", resume=True, metavar="SECONDS")
    label_smoothing: float = _setting(
        0.1, "eps_ls of the label-smoothed loss, Sec. 5.4 (0: plain cross-entropy)", flag=True,
        valid="[0, 1)")
    clip_grad_norm: float | None = _setting(
        None, "clip the gradients to this norm (None: no clipping, as in the paper)", flag=True,
        valid="(0, inf)")
    eval_every: int | None = _setting(
        None, "validation every n steps (None: at the end of each epoch)", valid="[1, inf)")
    checkpoint_every: int = _setting(
        500, "steps between checkpoints (and one at each epoch end)", flag=True,
        valid="[1, inf)", resume=True)
    checkpoint_dir: str | None = _setting(
        None, "the folder of last.pt and metrics.jsonl (None: no checkpoints)", resume=True)
    seed: int = _setting(
        0, "seeds the batch order (seed + epoch) and the model's dropout", flag=True,
        valid="[0, inf)")
    device: str | None = _setting(
        None, "cpu, cuda, cuda:1, mps ... (None: transformer_book.get_device(), CUDA when "
        "available)", resume=True)
    amp: bool = _setting(
        True, "mixed precision on CUDA: bf16 autocast, or fp16 autocast with loss scaling on "
        "GPUs without bf16 units (no effect elsewhere)")
    cpu_amp: bool | None = _setting(
        False, "bf16 autocast on the CPU, attention through PyTorch's plain kernel (the weights "
        "and Adam's moments stay float32); None: where the CPU has bf16 instructions "
        "(AVX512_BF16 or AMX), elsewhere bf16 is slower than float32", flag=True)
    progress: bool = _setting(True, "a tqdm progress bar", resume=True)
    log_epochs: bool = _setting(False, "print one summary line per epoch (for notebooks: no bar)")
    average_last: int = _setting(
        1, "Sec. 6.1: keep the weights of the last n epochs to average (1: off)",
        valid="[1, inf)")
    # Speed (chapter 11). None = automatic: on for CUDA, off elsewhere. None of these changes
    # what is computed; the CPU default is the plain loop.
    sync_every: int | None = _setting(
        None, "read the losses back to the host every n steps (None: 50 on CUDA, else 1)",
        valid="[1, inf)")
    fused_adam: bool | None = _setting(None, "Adam's fused kernels (None: on CUDA)")
    prefetch: bool | None = _setting(
        None, "check the ids on the host, pin the batches and copy them ahead (None: on CUDA)")
    compile: bool = _setting(False, "torch.compile(fullgraph=True) of forward + loss")
    compile_mode: str | None = _setting(
        None, "torch.compile's mode ('reduce-overhead': CUDA graphs)")

    def __post_init__(self) -> None:
        if self.accumulate < 1:
            raise ValueError(f"accumulate must be >= 1, got {self.accumulate}")
        if self.time_budget is not None and not self.time_budget > 0:
            raise ValueError(f"time_budget must be a positive number of seconds, got "
                             f"{self.time_budget!r}")
        for f in fields(self):  # every other setting against its metadata's valid values
            value, valid = getattr(self, f.name), f.metadata.get("valid")
            if value is None or valid is None:
                continue
            if isinstance(valid, tuple) and value not in valid:
                raise ValueError(f"{f.name} must be one of {valid}, got {value!r}")
            if isinstance(valid, str) and not in_interval(value, valid):
                raise ValueError(f"{f.name} must be in {valid}, got {value!r}")

    @classmethod
    def cpu(cls, **overrides) -> TrainConfig:
        """Not in the paper: the CPU reader's recipe for ``TransformerConfig.cpu()``, 20 minutes
        on 2 cores: batches of at most 1,500 padded tokens, 200 warm-up steps towards 0.45 times
        Eq. (3), the ``linear`` schedule with a 1,150 s time budget (which ends the run before
        ``epochs``): the rate's factor (1 - progress) falls from 1 where the budget is planned
        (:class:`~transformer_book.schedule.TimePlan`) to 0 at the last step; bf16 autocast
        where the CPU has bf16 instructions. Chapter 8 tabulates the
        runs that chose it (``benchmarks/README.md``)."""
        return cls(**{"max_tokens": 1500, "warmup_steps": 200, "lr_factor": 0.45,
                      "schedule": "linear", "time_budget": 1150.0, "epochs": 30,
                      "cpu_amp": None, **overrides})

    @classmethod
    def cpu_rnn(cls, **overrides) -> TrainConfig:
        """Not in the paper: :meth:`cpu` at the learning rate chosen for
        ``RecurrentConfig.cpu()`` on the validation set (chapter 9), 1.8 times Eq. (3)."""
        return cls.cpu(**{"lr_factor": 1.8, **overrides})


def train_config_for(preset: str = "small", kind: str = "transformer", **overrides) -> TrainConfig:
    """The training recipe of a model preset: for ``"cpu"``, :meth:`TrainConfig.cpu` (or
    ``cpu_rnn`` for ``kind="rnn"``); else the paper's settings; with ``overrides``."""
    if preset == "cpu":
        return (TrainConfig.cpu_rnn if kind == "rnn" else TrainConfig.cpu)(**overrides)
    return TrainConfig(**overrides)
