"""Shared fixtures: a tiny Transformer trained on the copy task, used by test_model,
test_decode and test_evaluation (trained once per test session on the CPU, whatever the machine,
about 10 s), and the device a device-independent test runs on."""

import os
from dataclasses import dataclass

import pytest
import torch
import torch.nn.functional as F
from transformer_book.config import TransformerConfig
from transformer_book.model import Transformer

# Copy task vocabulary: 0 = pad, 1 = BOS, 2 = EOS, 3..9 = symbols to copy.
PAD, BOS, EOS, VOCAB, LENGTH = 0, 1, 2, 10, 6


@dataclass
class CopyTask:
    model: Transformer
    final_loss: float


def copy_batch(n: int, generator: torch.Generator | None = None):
    """Source = a random symbol sequence; target = the same sequence followed by EOS."""
    seq = torch.randint(3, VOCAB, (n, LENGTH), generator=generator)  # (n, LENGTH)
    tgt_in = torch.cat([torch.full((n, 1), BOS), seq], dim=1)  # (n, LENGTH + 1): shifted right
    tgt_out = torch.cat([seq, torch.full((n, 1), EOS)], dim=1)  # (n, LENGTH + 1)
    return seq, tgt_in, tgt_out


@pytest.fixture(scope="session")
def copy_task() -> CopyTask:
    """Train the tiny preset on copying: 300 Adam steps (Sec. 5.3 betas), warm-up then decay."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small matrices: one thread is as fast and does not fight others
    try:
        torch.manual_seed(0)
        config = TransformerConfig.tiny(src_vocab_size=VOCAB, tgt_vocab_size=VOCAB, max_len=16)
        model = Transformer(config)
        steps = 300
        opt = torch.optim.Adam(model.parameters(), lr=5e-3, betas=(0.9, 0.98), eps=1e-9)
        sched = torch.optim.lr_scheduler.LambdaLR(
            opt, lambda s: min(1.0, (s + 1) / 30) * max(0.0, 1 - s / steps)
        )
        model.train()
        for _ in range(steps):
            src, tgt_in, tgt_out = copy_batch(64)
            logits = model(src, tgt_in)  # (64, LENGTH + 1, VOCAB)
            loss = F.cross_entropy(logits.reshape(-1, VOCAB), tgt_out.reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
        model.eval()
        return CopyTask(model=model, final_loss=loss.item())
    finally:
        torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def device() -> torch.device:
    """Where a test whose claim holds on any device runs: ``TRANSFORMER_BOOK_DEVICE`` (``make
    gpu-check`` sets ``cuda``), else the CPU. A test whose claim is the CPU's (a training outcome,
    a memory or time figure) does not take this fixture: it names the CPU itself."""
    name = os.environ.get("TRANSFORMER_BOOK_DEVICE") or "cpu"
    if torch.device(name).type == "cuda" and not torch.cuda.is_available():
        pytest.skip(f"TRANSFORMER_BOOK_DEVICE={name} but CUDA is not available")
    return torch.device(name)


@pytest.fixture
def one_thread():
    """Tiny models train fastest on one thread (and the CI machine has only two cores)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
