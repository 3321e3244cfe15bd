"""The training step (transformer_book.step): the plain step and the general one compute the
same update; gradient clipping clips; bf16 autocast on the CPU (TrainConfig.cpu_amp) runs its
matrix products in bf16 and keeps the weights and Adam's moments in float32."""

import math
import random

import pytest
import torch
from torch import nn
from transformer_book.batching import BatchedCorpus, collate
from transformer_book.config import TransformerConfig
from transformer_book.loss import label_smoothing_loss
from transformer_book.model import Transformer
from transformer_book.schedule import make_optimizer
from transformer_book.step import TrainStep, autocast_dtype
from transformer_book.train import TrainConfig, Trainer

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

BATCHES = [collate([[5, 6, 7, 8], [9, 4]], [[3, 4, 11], [5, 6, 7, 8, 12]]),
           collate([[10, 11], [12, 13, 14]], [[15, 16], [17]])]


def _model(seed=0, **overrides) -> Transformer:
    torch.manual_seed(seed)
    return Transformer(TransformerConfig.tiny(src_vocab_size=20, tgt_vocab_size=20, **overrides))


def _weights(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_plain_step_is_the_general_step_on_one_batch():
    """`step(batch)` (the dozen lines chapter 8 writes) and `accumulate([(batch, 1.0)])` (the
    path with the speed features) give bitwise the same losses and weights."""
    runs = {}
    for general in (False, True):
        model = _model(dropout=0.1)
        optimizer, scheduler = make_optimizer(model, 64, warmup_steps=3)
        step = TrainStep(model, optimizer, scheduler, label_smoothing=0.1, pad_id=0,
                         clip_grad_norm=0.5)
        assert step.plain
        torch.manual_seed(1)  # the same dropout masks
        losses = [float(step.accumulate([(b, 1.0)]) if general else step(b))
                  for b in BATCHES * 2]
        runs[general] = losses, _weights(model)
    assert runs[True][0] == runs[False][0]
    for k, v in runs[False][1].items():
        assert torch.equal(runs[True][1][k], v), k


@pytest.mark.parametrize("general", [False, True], ids=["plain", "accumulate"])
def test_clipping_scales_the_gradient_to_the_max_norm(general):
    """With plain SGD the update is -lr * gradient, so clipping shows: the weights are those of
    an update with the gradient scaled to the max norm by hand, not those of the raw gradient,
    and the update's norm is lr * max_norm."""
    max_norm, lr = 0.05, 0.1
    batch = BATCHES[0]
    model = _model()
    before = [p.detach().clone() for p in model.parameters()]
    step = TrainStep(model, torch.optim.SGD(model.parameters(), lr=lr), label_smoothing=0.1,
                     pad_id=0, clip_grad_norm=max_norm)
    step.accumulate([(batch, 1.0)]) if general else step(batch)
    after = [p.detach() for p in model.parameters()]

    reference = _model()  # the same weights, the gradient of the same loss
    loss = label_smoothing_loss(reference(batch.src, batch.tgt_in), batch.tgt_out, 0.1, 0)
    loss.backward()
    grads = [p.grad for p in reference.parameters()]
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    assert norm > 10 * max_norm  # the raw gradient is far longer than the max norm
    scaled = [w - lr * g * (max_norm / norm) for w, g in zip(before, grads, strict=True)]
    raw = [w - lr * g for w, g in zip(before, grads, strict=True)]
    for got, want in zip(after, scaled, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-7)
    assert any(not torch.allclose(got, r, rtol=1e-3, atol=1e-5)
               for got, r in zip(after, raw, strict=True))
    update = torch.linalg.vector_norm(torch.cat([(a - b).flatten()
                                                 for a, b in zip(after, before, strict=True)]))
    assert float(update) == pytest.approx(lr * max_norm, rel=1e-2)


def _trainer(**overrides) -> Trainer:
    rng = random.Random(0)
    src = [[rng.randrange(4, 20) for _ in range(rng.randint(2, 9))] for _ in range(48)]
    data = BatchedCorpus(src, [x[::-1] for x in src], max_tokens=60, seed=0)
    val = BatchedCorpus(src[:16], [x[::-1] for x in src[:16]], max_tokens=60, shuffle=False)
    cfg = TransformerConfig.tiny(src_vocab_size=20, tgt_vocab_size=20, dropout=0.1, max_len=32)
    torch.manual_seed(0)
    settings = dict(max_tokens=60, warmup_steps=5, device="cpu", progress=False, seed=0)
    return Trainer(Transformer(cfg), data, TrainConfig(**{**settings, **overrides}),
                   model_config=cfg, val_data=val)


def test_the_trainer_clips_the_gradients_adam_sees():
    norms = {}
    for clip in (None, 0.05):
        trainer = _trainer(max_steps=3, clip_grad_norm=clip)
        seen = norms[clip] = []

        def record(optimizer, args, kwargs, seen=seen):  # runs before each Adam step
            grads = [p.grad for group in optimizer.param_groups for p in group["params"]
                     if p.grad is not None]
            seen.append(float(torch.linalg.vector_norm(
                torch.stack([torch.linalg.vector_norm(g) for g in grads]))))

        trainer.optimizer.register_step_pre_hook(record)
        trainer.fit()
    assert len(norms[None]) == len(norms[0.05]) == 3
    assert min(norms[None]) > 0.5  # unclipped: far longer than the max norm
    assert norms[0.05] == pytest.approx([0.05] * 3, rel=1e-4)


# --------------------------------------------------------------------------- bf16 on the CPU


def test_autocast_dtype_on_the_cpu():
    cpu = torch.device("cpu")
    assert autocast_dtype(cpu) is None  # the default: full precision
    assert autocast_dtype(cpu, cpu=True) == torch.bfloat16
    assert autocast_dtype(torch.device("meta"), cpu=True) is None  # neither CPU nor CUDA


def _linear_output_dtypes(model: nn.Module) -> tuple[list, list]:
    """Record the output dtype of every nn.Linear (every projection and the output layer)."""
    seen = []
    handles = [m.register_forward_hook(lambda m, i, o: seen.append(o.dtype))
               for m in model.modules() if isinstance(m, nn.Linear)]
    return seen, handles


def test_bf16_step_on_the_cpu():
    model = _model()
    optimizer, scheduler = make_optimizer(model, 64, warmup_steps=3)
    step = TrainStep(model, optimizer, scheduler, label_smoothing=0.1, pad_id=0,
                     amp_dtype=torch.bfloat16)
    seen, handles = _linear_output_dtypes(model)
    losses = [step(b) for b in BATCHES]
    for h in handles:
        h.remove()
    assert seen and set(seen) == {torch.bfloat16}  # every matrix product ran in bf16
    assert all(loss.dtype == torch.float32 and torch.isfinite(loss) for loss in losses)
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert all(s.dtype == torch.float32 for state in optimizer.state.values()
               for s in state.values() if s.is_floating_point() and s.dim() > 0)


def test_trainer_cpu_amp_trains_in_bf16_and_keeps_float32_weights(tmp_path):
    assert _trainer().amp_dtype is None  # the default CPU run: full precision
    trainer = _trainer(cpu_amp=True, epochs=2, checkpoint_dir=str(tmp_path))
    assert trainer.amp_dtype == torch.bfloat16 and not trainer.scaler.is_enabled()
    seen, handles = _linear_output_dtypes(trainer.model)
    before = trainer.evaluate()
    trainer.fit()
    for h in handles:
        h.remove()
    assert torch.bfloat16 in seen and torch.float32 not in seen
    losses = [v for _, v in trainer.history.train_loss]
    assert len(losses) == trainer.step > 10 and all(map(math.isfinite, losses))
    assert trainer.evaluate() < before  # it learns
    assert all(p.dtype == torch.float32 for p in trainer.model.parameters())
    state = torch.load(tmp_path / "last.pt", weights_only=True)
    assert state["train_config"]["cpu_amp"] is True
    assert all(v.dtype == torch.float32 for v in state["model"].values() if v.is_floating_point())


def test_cpu_amp_none_follows_the_cpu_and_cpu_bf16_uses_the_plain_attention_kernel(monkeypatch):
    """cpu_amp=None (the cpu preset) means bf16 where the CPU has bf16 instructions; under CPU
    bf16 autocast, attention runs through the plain (math) kernel, not the fused one."""
    from transformer_book.step import autocast, autocast_dtype, native_cpu_bf16

    cpu = torch.device("cpu")
    assert autocast_dtype(cpu, cpu=None) == (torch.bfloat16 if native_cpu_bf16() else None)
    for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported"):
        monkeypatch.setattr(torch.cpu, name, lambda: False, raising=False)
    assert not native_cpu_bf16()
    assert autocast_dtype(cpu, cpu=None) is None
    assert autocast_dtype(cpu, cpu=True) == torch.bfloat16 and autocast_dtype(cpu) is None
    assert torch.backends.cuda.flash_sdp_enabled()  # the default outside
    with autocast("cpu", torch.bfloat16):
        assert torch.is_autocast_enabled("cpu")
        assert not torch.backends.cuda.flash_sdp_enabled()
        assert torch.backends.cuda.math_sdp_enabled()
    with autocast("cpu", None):
        assert not torch.is_autocast_enabled("cpu") and torch.backends.cuda.flash_sdp_enabled()
    assert torch.backends.cuda.flash_sdp_enabled() and not torch.is_autocast_enabled("cpu")


def test_cpu_bf16_forward_and_loss_trace_as_one_graph():
    """``TrainStep(compile=True)`` compiles forward + loss with ``fullgraph=True``: under CPU bf16
    that includes the autocast and the attention-kernel contexts, which must trace (an
    ExitStack did not: TrainConfig(compile=True, cpu_amp=True) failed on a CPU). The "eager"
    backend checks the tracing without compiling kernels."""
    torch._dynamo.reset()
    model = _model()
    optimizer, scheduler = make_optimizer(model, 64, warmup_steps=3)
    step = TrainStep(model, optimizer, scheduler, label_smoothing=0.1, pad_id=0,
                     amp_dtype=torch.bfloat16)
    batch = BATCHES[0]
    traced = torch.compile(step._loss, fullgraph=True, backend="eager")
    loss = traced(batch.src, batch.tgt_in, batch.tgt_out)
    assert loss.dtype == torch.float32 and torch.isfinite(loss)
    assert torch.allclose(loss, step._loss(batch.src, batch.tgt_in, batch.tgt_out))
    torch._dynamo.reset()
