"""Training throughput: our Transformer against ``torch.nn.Transformer`` doing the same work
(one :class:`~transformer_book.step.TrainStep`: forward, label-smoothed loss, backward, Adam),
with the model FLOPs of a step."""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import torch
from torch import Tensor, nn
from transformer_book.batching import Batch
from transformer_book.loss import label_smoothing_loss
from transformer_book.step import TrainStep, autocast

from transformer_lab.memory import quiet_stderr
from transformer_lab.timing import sync

# ---------------------------------------------------------------------------------------------
# Training throughput: our Transformer against torch.nn.Transformer doing the same work
# ---------------------------------------------------------------------------------------------

class TorchTransformerBaseline(nn.Module):
    """``torch.nn.Transformer`` wrapped to do the same work as :class:`transformer_book.Transformer`.

    ``nn.Transformer`` has no embeddings, positions or output layer, so they are added around it
    exactly as the book's model has them (Sec. 3.4, 3.5): token embeddings times sqrt(d_model)
    (one matrix shared by source and target and tied to the output layer when the config says
    so), the sinusoidal table plus dropout, and a bias-free pre-softmax linear layer. The stacks
    end with a LayerNorm only for pre-norm, as the book's model does (``nn.Transformer`` alone
    always adds one). ``nn.Transformer`` applies its one ``dropout`` to the residuals, the
    attention weights and the inner feed-forward activations alike; compare it with a config
    whose ``attention_dropout`` and ``ffn_dropout`` equal ``dropout`` (see
    :func:`matched_configs`).

    Args:
        config: a :class:`transformer_book.config.TransformerConfig`.
    """

    def __init__(self, config) -> None:
        super().__init__()
        from transformer_book.positional import PositionalEncoding

        self.config = config
        D = config.d_model
        self.src_embed = nn.Embedding(config.src_vocab_size, D)
        self.tgt_embed = (self.src_embed if config.share_embeddings
                          else nn.Embedding(config.tgt_vocab_size, D))
        self.positional = PositionalEncoding(D, config.max_len, config.dropout)
        layer_args = dict(d_model=D, nhead=config.num_heads, dim_feedforward=config.d_ff,
                          dropout=config.dropout, batch_first=True, norm_first=config.norm_first,
                          layer_norm_eps=config.layer_norm_eps)

        def final_norm():
            return nn.LayerNorm(D, eps=config.layer_norm_eps) if config.norm_first else None

        encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(**layer_args),
                                        config.num_layers, norm=final_norm(),
                                        enable_nested_tensor=False)
        decoder = nn.TransformerDecoder(nn.TransformerDecoderLayer(**layer_args),
                                        config.num_layers, norm=final_norm())
        self.transformer = nn.Transformer(d_model=D, nhead=config.num_heads,
                                          custom_encoder=encoder, custom_decoder=decoder,
                                          batch_first=True)
        self.generator = nn.Linear(D, config.tgt_vocab_size, bias=False)
        if config.tie_output:
            self.generator.weight = self.tgt_embed.weight
        # the embedding as the book's model draws it (nn.Embedding's own N(0, 1), times
        # sqrt(d_model) and tied to the output layer, would start with logits of std ~d_model)
        for embed in dict.fromkeys([self.src_embed, self.tgt_embed]):  # once if shared, in order
            if config.embed_init == "normal":
                nn.init.normal_(embed.weight, 0.0, D**-0.5)
            else:
                nn.init.xavier_uniform_(embed.weight)

    def forward(self, src: Tensor, tgt: Tensor) -> Tensor:
        """Logits (B, T, tgt_vocab_size) for src (B, S) and the shifted target tgt (B, T)."""
        scale = math.sqrt(self.config.d_model)
        x = self.positional(self.src_embed(src) * scale)  # (B, S, D)
        y = self.positional(self.tgt_embed(tgt) * scale)  # (B, T, D)
        T = tgt.shape[1]
        # nn.Transformer's masks mean the opposite of the book's: True = may NOT attend.
        src_pad = src == self.config.pad_id  # (B, S)
        tgt_pad = tgt == self.config.pad_id  # (B, T)
        future = torch.ones(T, T, dtype=torch.bool, device=tgt.device).triu(1)  # (T, T)
        h = self.transformer(x, y, tgt_mask=future, src_key_padding_mask=src_pad,
                             tgt_key_padding_mask=tgt_pad, memory_key_padding_mask=src_pad,
                             tgt_is_causal=True)  # (B, T, D)
        return self.generator(h)

    # The two halves, with the interface of transformer_book.Transformer, so that greedy
    # decoding and beam search can score it too (use_cache=False: it keeps no cache).
    def encode(self, src: Tensor) -> tuple[Tensor, Tensor]:
        """Memory (B, S, D) and the book's source mask (B, 1, 1, S), True = may attend."""
        scale = math.sqrt(self.config.d_model)
        src_pad = src == self.config.pad_id  # (B, S), nn.Transformer's meaning
        x = self.positional(self.src_embed(src) * scale)  # (B, S, D)
        memory = self.transformer.encoder(x, src_key_padding_mask=src_pad)  # (B, S, D)
        return memory, ~src_pad[:, None, None, :]  # back to the book's meaning

    def decode(self, tgt: Tensor, memory: Tensor, src_mask: Tensor, cache=None) -> Tensor:
        """Logits (B, T, V) for the whole target prefix ``tgt`` (B, T); no cache."""
        if cache is not None:
            raise ValueError("TorchTransformerBaseline keeps no cache: decode with use_cache=False")
        scale = math.sqrt(self.config.d_model)
        T = tgt.shape[1]
        y = self.positional(self.tgt_embed(tgt) * scale)  # (B, T, D)
        future = torch.ones(T, T, dtype=torch.bool, device=tgt.device).triu(1)  # True = blocked
        h = self.transformer.decoder(y, memory, tgt_mask=future,
                                     tgt_key_padding_mask=tgt == self.config.pad_id,
                                     memory_key_padding_mask=~src_mask[:, 0, 0, :],
                                     tgt_is_causal=True)  # (B, T, D)
        return self.generator(h)

    def to_book_model(self):
        """The same network as a :class:`transformer_book.Transformer` (a copy of the weights),
        which decodes with a key/value cache.

        ``nn.Transformer`` keeps no cache, so beam search re-runs the whole prefix at every
        step; for a model that writes to the length limit (source + 50 tokens) that is slow.
        The book's model with :func:`matched_configs` computes the same function (its
        ``q_proj``, ``k_proj``, ``v_proj`` are the three blocks of ``in_proj``; its sub-layers'
        norms are ``norm1`` ... ``norm3``), so its cached decoding translates as this model
        would, up to rounding. Returns it in eval mode.
        """
        from transformer_book.model import Transformer

        book = Transformer(matched_configs(self.config))
        state = {"src_embed.weight": self.src_embed.weight, "generator.weight":
                 self.generator.weight, "tgt_embed.weight": self.tgt_embed.weight}

        def attention(prefix: str, mha: nn.MultiheadAttention) -> None:
            for role, w, b in zip(("q", "k", "v"), mha.in_proj_weight.chunk(3),
                                  mha.in_proj_bias.chunk(3), strict=True):
                state[f"{prefix}.{role}_proj.weight"], state[f"{prefix}.{role}_proj.bias"] = w, b
            state[f"{prefix}.out_proj.weight"] = mha.out_proj.weight
            state[f"{prefix}.out_proj.bias"] = mha.out_proj.bias

        def copy(prefix: str, module: nn.Module) -> None:
            for name, tensor in module.state_dict().items():
                state[f"{prefix}.{name}"] = tensor

        sublayers = {"encoder": ("attn_sublayer", "ffn_sublayer"),
                     "decoder": ("self_attn_sublayer", "cross_attn_sublayer", "ffn_sublayer")}
        for side, stack in (("encoder", self.transformer.encoder),
                            ("decoder", self.transformer.decoder)):
            for i, layer in enumerate(stack.layers):
                prefix = f"{side}.layers.{i}"
                attention(f"{prefix}.self_attn", layer.self_attn)
                if side == "decoder":
                    attention(f"{prefix}.cross_attn", layer.multihead_attn)
                copy(f"{prefix}.feed_forward.linear1", layer.linear1)
                copy(f"{prefix}.feed_forward.linear2", layer.linear2)
                for j, sub in enumerate(sublayers[side], start=1):
                    copy(f"{prefix}.{sub}.norm", getattr(layer, f"norm{j}"))
            if stack.norm is not None:
                copy(f"{side}.norm", stack.norm)
        book.load_state_dict({k: v.detach() for k, v in state.items()})  # strict: every name
        return book.to(self.generator.weight.device).eval()


def matched_configs(config):
    """The config with every dropout equal to ``config.dropout``, as ``nn.Transformer`` has them.

    The paper drops out residuals and embeddings only (Sec. 5.4); ``nn.Transformer`` cannot
    switch off its attention and feed-forward dropout separately, so a fair speed comparison
    gives the book's model the same three dropouts.
    """
    return config.replace(attention_dropout=config.dropout, ffn_dropout=config.dropout)


def synthetic_batch(
    batch: int,
    src_len: int,
    tgt_len: int,
    vocab_size: int,
    *,
    pad_id: int = 0,
    device: torch.device | str = "cpu",
    seed: int = 0,
) -> tuple[Tensor, Tensor, Tensor]:
    """Random token ids shaped like a training batch: ``(src, tgt_in, tgt_out)``, no padding.

    Speed does not depend on which ids the tokens are, only on the shapes, so random ids stand
    in for real sentences. Ids avoid ``pad_id``.

    Shape:
        src (B, src_len); tgt_in and tgt_out (B, tgt_len).
    """
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, vocab_size, (batch, src_len + tgt_len + 1), generator=gen)
    ids = torch.where(ids == pad_id, (pad_id + 1) % vocab_size, ids)
    src = ids[:, :src_len]
    tgt = ids[:, src_len:]
    return src.to(device), tgt[:, :-1].to(device), tgt[:, 1:].to(device)


def _train_step_fn(model: nn.Module, src: Tensor, tgt_in: Tensor, tgt_out: Tensor, *,
                   pad_id: int, amp_dtype: torch.dtype | None, lr: float = 1e-4
                   ) -> Callable[[], Tensor]:
    """One optimiser step of Sec. 5 on a fixed batch (:class:`~transformer_book.step.TrainStep`:
    forward, label-smoothed loss, backward, Adam at a constant rate ``lr``)."""
    optimizer = torch.optim.Adam(model.parameters(), lr=lr, betas=(0.9, 0.98), eps=1e-9)
    step = TrainStep(model, optimizer, label_smoothing=0.1, pad_id=pad_id, amp_dtype=amp_dtype)
    batch = Batch(src, tgt_in, tgt_out, pad_id)
    return lambda: step(batch)


def count_train_flops(model: nn.Module, src: Tensor, tgt_in: Tensor, tgt_out: Tensor,
                      *, pad_id: int = 0, amp_dtype: torch.dtype | None = None) -> int:
    """Floating-point operations of one forward + backward pass, as PyTorch counts them.

    Uses ``torch.utils.flop_counter.FlopCounterMode``, which adds up matrix products (2 FLOPs
    per multiply-add); element-wise work (softmax, LayerNorm, the optimiser) is not counted, as
    is usual for "model FLOPs". The counting pass runs PyTorch's attention through its "math"
    backend, made of plain matrix products, because the counter has no formula for the fused
    CPU kernel; the FLOPs are the same, only the kernel differs.
    """
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter, sdpa_kernel(SDPBackend.MATH):
        with autocast(src.device.type, amp_dtype):
            logits = model(src, tgt_in)
        label_smoothing_loss(logits, tgt_out, 0.1, pad_id).backward()
    model.zero_grad(set_to_none=True)
    return int(counter.get_total_flops())


def measure_train_throughput(
    models: dict[str, nn.Module],
    *,
    batch: int,
    src_len: int,
    tgt_len: int,
    device: torch.device | str = "cpu",
    amp_dtype: torch.dtype | None = None,
    steps: int = 3,
    rounds: int = 3,
    flops: bool = True,
    seed: int = 0,
) -> list[dict]:
    """Training-step speed of several models on the same batch (forward, backward, Adam).

    The models take turns: each round times ``steps`` consecutive steps of every model, and
    the fastest round of each model is kept, so a slow spell of the machine cannot favour one
    of them.

    Args:
        models: name -> model with ``forward(src, tgt_in) -> logits`` and a ``config``
            attribute (vocabulary size, pad id); all are trained in place.
        batch, src_len, tgt_len: the batch shape (every token real, no padding).
        device: where to train.
        amp_dtype: autocast dtype (e.g. ``torch.bfloat16``), or None for full precision.
        steps: steps per timed round.
        rounds: timed rounds per model (after one untimed warm-up round).
        flops: also count the model FLOPs of one step (see :func:`count_train_flops`).
        seed: seed of the synthetic batch.

    Returns:
        One dict per model: ``model``, ``seconds_per_step``, ``tokens_per_second`` (target
        tokens), ``flops_per_step`` (NaN unless ``flops``), ``tflops`` (achieved TFLOP/s).
    """
    device = torch.device(device)
    steppers = {}
    batches = {}
    for name, model in models.items():
        cfg = model.config
        model.to(device).train()
        src, tgt_in, tgt_out = synthetic_batch(batch, src_len, tgt_len, cfg.tgt_vocab_size,
                                               pad_id=cfg.pad_id, device=device, seed=seed)
        batches[name] = (src, tgt_in, tgt_out)
        steppers[name] = _train_step_fn(model, src, tgt_in, tgt_out, pad_id=cfg.pad_id,
                                        amp_dtype=amp_dtype)
    best = {name: math.inf for name in models}
    for r in range(rounds + 1):
        for name, step in steppers.items():
            sync(device)
            start = time.perf_counter()
            for _ in range(steps):
                step()
            sync(device)
            if r > 0:  # round 0 warms up (allocator, kernel choice, optimiser state)
                best[name] = min(best[name], (time.perf_counter() - start) / steps)
    rows = []
    for name, model in models.items():
        n_flops = math.nan
        if flops:
            n_flops = count_train_flops(model, *batches[name], pad_id=model.config.pad_id,
                                        amp_dtype=amp_dtype)
        seconds = best[name]
        rows.append({"model": name, "seconds_per_step": seconds,
                     "tokens_per_second": batch * tgt_len / seconds,
                     "flops_per_step": n_flops, "tflops": n_flops / seconds / 1e12})
    return rows


def profile_train_step(model: nn.Module, *, batch: int, src_len: int, tgt_len: int,
                       device: torch.device | str = "cpu", amp_dtype: torch.dtype | None = None,
                       steps: int = 3, row_limit: int = 12, seed: int = 0) -> str:
    """Where one training step's time goes: ``torch.profiler``'s table of the operators that
    took the most device time (CUDA kernels on a GPU, CPU time otherwise), over ``steps``
    steps after one warm-up step. Evidence for what separates two models in
    :func:`measure_train_throughput`."""
    from torch.profiler import ProfilerActivity, profile

    device = torch.device(device)
    cfg = model.config
    model.to(device).train()
    batch_tensors = synthetic_batch(batch, src_len, tgt_len, cfg.tgt_vocab_size,
                                    pad_id=cfg.pad_id, device=device, seed=seed)
    step = _train_step_fn(model, *batch_tensors, pad_id=cfg.pad_id, amp_dtype=amp_dtype)
    step()
    sync(device)
    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    with quiet_stderr(), profile(activities=activities) as prof:
        for _ in range(steps):
            step()
        sync(device)
    sort_by = "self_cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
    return prof.key_averages().table(sort_by=sort_by, row_limit=row_limit, max_name_column_width=60)



def compare_train_rates(models: dict[str, tuple[nn.Module, float]], batches: list[Batch], *,
                        amp_dtype: torch.dtype | None = None, rounds: int = 3,
                        warmup_steps: int = 200) -> dict[str, float]:
    """Target tokens per second of several models' training steps on the same real batches.

    ``models`` maps a name to ``(model, lr_factor)``; each model trains with its own
    :class:`~transformer_book.step.TrainStep` (Adam and Eq. (3) at ``lr_factor``, label
    smoothing 0.1; the rate does not change the work). Each takes one untimed step on
    ``batches[0]`` (first-call allocations), then, in ``rounds`` rounds, the models take turns
    to train on ``batches[1:]``, so that drift on the machine hits them alike; each model's
    fastest round counts (``timeit``'s rule: slower rounds carry the machine's other load).
    Chapter 9 and ``benchmarks/rnn_vs_transformer.py precision`` call it.
    """
    from transformer_book.schedule import make_optimizer

    if len(batches) < 2:
        raise ValueError("compare_train_rates needs at least 2 batches (one untimed)")
    steps = {}
    for name, (model, factor) in models.items():
        d_model = model.config.d_model
        optimizer, scheduler = make_optimizer(model, d_model, warmup_steps, factor)
        steps[name] = TrainStep(model, optimizer, scheduler, label_smoothing=0.1,
                                pad_id=batches[0].pad_id, amp_dtype=amp_dtype)
        steps[name](batches[0])
    fastest = dict.fromkeys(steps, math.inf)
    for _ in range(rounds):
        for name, step in steps.items():
            start = time.perf_counter()
            for batch in batches[1:]:
                loss = step(batch)
            if not math.isfinite(float(loss)):
                raise FloatingPointError(f"{name}: training loss not finite")
            fastest[name] = min(fastest[name], time.perf_counter() - start)
    tokens = sum(b.num_tgt_tokens for b in batches[1:])
    return {name: tokens / seconds for name, seconds in fastest.items()}
