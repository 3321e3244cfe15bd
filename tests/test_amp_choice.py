"""Mixed precision by GPU generation, with the GPU faked: bf16 autocast where the GPU has bf16
units (compute capability 8.0, Ampere, and later), fp16 with a gradient scaler on older ones such
as Colab's free T4 (7.5), full precision on CPU.

No GPU is needed: the fixture fakes what torch asks the driver (CUDA available, the device's
compute capability) and the one probe by which torch's own ``is_bf16_supported()`` decides that
bf16 is *emulated*: creating a bf16 tensor, which succeeds on every CUDA GPU since CUDA 10.
torch's code itself is not replaced, so the test checks the choice with the installed release's
``is_bf16_supported`` (its signature and behaviour changed between releases; ``make compat``
runs this test with the oldest supported torch).
"""

from types import SimpleNamespace

import pytest
import torch
from torch import nn
from transformer_book.batching import BatchedCorpus
from transformer_book.precision import autocast_dtype
from transformer_book.train import TrainConfig, Trainer

T4, V100, A100, H100 = (7, 5), (7, 0), (8, 0), (9, 0)


@pytest.fixture
def fake_gpu(monkeypatch):
    """Make torch believe one CUDA GPU of the given compute capability is present."""

    def install(capability: tuple[int, int], name: str = "Fake GPU"):
        major, minor = capability
        props = SimpleNamespace(major=major, minor=minor, name=name, total_memory=16 * 2**30)
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
        monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
        monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device=None: props)
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
        # A CUDA build (the CPU wheel has torch.version.cuda None), not ROCm.
        monkeypatch.setattr(torch.version, "cuda", "12.1")
        monkeypatch.setattr(torch.version, "hip", None)
        # bf16 emulation: a bf16 tensor can be created on any CUDA GPU, with or without bf16 units
        monkeypatch.setattr(torch.cuda, "_check_bf16_tensor_supported", lambda device: True,
                            raising=False)

    return install


def test_fake_gpu_looks_like_emulated_bf16(fake_gpu):
    """The trap the choice must avoid: on a T4, torch's plain bf16 query answers True."""
    fake_gpu(T4, "Tesla T4")
    assert torch.cuda.is_available() and torch.cuda.get_device_capability() == (7, 5)
    assert torch.cuda.is_bf16_supported()  # emulated: slow, and not what mixed precision needs


@pytest.mark.parametrize(
    ("capability", "expected"),
    [(T4, torch.float16), (V100, torch.float16), (A100, torch.bfloat16), (H100, torch.bfloat16)],
    ids=["T4", "V100", "A100", "H100"],
)
def test_autocast_dtype_follows_compute_capability(fake_gpu, capability, expected):
    fake_gpu(capability)
    assert autocast_dtype(torch.device("cuda")) == expected, (
        f"compute capability {capability}: expected {expected}"
    )


def test_autocast_dtype_is_full_precision_on_cpu(fake_gpu):
    fake_gpu(A100)  # a GPU in the machine does not change a CPU run
    assert autocast_dtype(torch.device("cpu")) is None


class StaysOnCPU(nn.Linear):
    """A model whose ``.to(device)`` is a no-op, so a Trainer can be built for a faked GPU."""

    def to(self, *args, **kwargs):
        return self


def _cuda_trainer(amp: bool = True) -> Trainer:
    data = BatchedCorpus([[4, 5, 6]] * 4, [[6, 5, 4]] * 4, max_tokens=32)
    # The parameters stay on the CPU, where torch 2.3 has no fused Adam (the CUDA default).
    config = TrainConfig(device="cuda", amp=amp, progress=False, checkpoint_dir=None,
                         fused_adam=False)
    return Trainer(StaysOnCPU(4, 4), data, config, d_model=4)


@pytest.mark.parametrize("capability", [T4, V100], ids=["T4", "V100"])
def test_trainer_scales_the_loss_in_fp16(fake_gpu, capability):
    fake_gpu(capability)
    trainer = _cuda_trainer()
    assert trainer.amp_dtype == torch.float16
    assert isinstance(trainer.scaler, torch.amp.GradScaler) and trainer.scaler.is_enabled(), (
        "fp16 training needs loss scaling: small gradients underflow in float16"
    )


@pytest.mark.parametrize("capability", [A100, H100], ids=["A100", "H100"])
def test_trainer_needs_no_scaler_in_bf16(fake_gpu, capability):
    fake_gpu(capability)
    trainer = _cuda_trainer()
    assert trainer.amp_dtype == torch.bfloat16
    assert not trainer.scaler.is_enabled()  # bf16 has float32's exponent range


def test_trainer_without_amp_uses_full_precision(fake_gpu):
    fake_gpu(T4)
    trainer = _cuda_trainer(amp=False)
    assert trainer.amp_dtype is None and not trainer.scaler.is_enabled()
