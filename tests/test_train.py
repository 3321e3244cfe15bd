"""Tests of transformer_book.train: label smoothing, Eq. (3) schedule, checkpoint resume, BLEU."""

import math
import random

import pytest
import torch
from torch import nn
from transformer_book.batching import BatchedCorpus
from transformer_book.checkpoint import average_state_dicts, load_checkpoint
from transformer_book.config import TransformerConfig
from transformer_book.model import Transformer
from transformer_book.precision import autocast_dtype
from transformer_book.train import (
    TrainConfig,
    Trainer,
    corpus_bleu,
    label_smoothing_loss,
    make_optimizer,
    noam_lr,
    smoothed_loss_floor,
)

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.3])
def test_label_smoothing_matches_pytorch(eps):
    torch.manual_seed(0)
    logits = torch.randn(3, 7, 11)
    target = torch.randint(0, 11, (3, 7))
    target[0, 4:] = 0  # padding
    ours = label_smoothing_loss(logits, target, eps, pad_id=0)
    ref = nn.CrossEntropyLoss(label_smoothing=eps, ignore_index=0)(
        logits.reshape(-1, 11), target.reshape(-1))
    torch.testing.assert_close(ours, ref)
    ref_sum = nn.CrossEntropyLoss(label_smoothing=eps, ignore_index=0, reduction="sum")(
        logits.reshape(-1, 11), target.reshape(-1))
    torch.testing.assert_close(label_smoothing_loss(logits, target, eps, 0, "sum"), ref_sum)
    per_pos = label_smoothing_loss(logits, target, eps, 0, "none")
    assert per_pos.shape == target.shape and bool((per_pos[target == 0] == 0).all())


def test_label_smoothing_is_cross_entropy_with_smoothed_target():
    torch.manual_seed(1)
    V, eps = 9, 0.2
    logits = torch.randn(5, V)
    target = torch.randint(1, V, (5,))
    q = torch.full((5, V), eps / V)
    q[torch.arange(5), target] += 1 - eps
    explicit = -(q * logits.log_softmax(-1)).sum(-1).mean()
    torch.testing.assert_close(label_smoothing_loss(logits, target, eps, pad_id=None), explicit)
    # the floor: logits equal to log q give exactly the entropy of q
    floor = label_smoothing_loss(q.log(), target, eps, pad_id=None)
    assert math.isclose(float(floor), smoothed_loss_floor(V, eps), rel_tol=1e-5)


def test_label_smoothing_bad_input():
    with pytest.raises(ValueError, match="do not match"):
        label_smoothing_loss(torch.randn(2, 3, 5), torch.zeros(2, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="smoothing"):
        label_smoothing_loss(torch.randn(2, 5), torch.zeros(2, dtype=torch.long), 1.0)


def test_schedule_values():
    d, w = 512, 4000
    assert noam_lr(1, d, w) == pytest.approx(512**-0.5 * 4000**-1.5)
    assert noam_lr(w, d, w) == pytest.approx(512**-0.5 * 4000**-0.5)  # peak, 6.99e-4
    assert noam_lr(w, d, w) == pytest.approx(6.9877e-4, rel=1e-4)
    assert noam_lr(4 * w, d, w) == pytest.approx(noam_lr(w, d, w) / 2)  # step^-0.5 decay
    steps = range(1, 3 * w)
    assert max(steps, key=lambda s: noam_lr(s, d, w)) == w
    assert noam_lr(100, d, w, factor=2.0) == pytest.approx(2 * noam_lr(100, d, w))
    with pytest.raises(ValueError, match="step counts from 1"):
        noam_lr(0, d, w)


def test_optimizer_follows_schedule():
    model = nn.Linear(3, 3)
    opt, sched = make_optimizer(model, d_model=64, warmup_steps=10)
    assert opt.defaults["betas"] == (0.9, 0.98) and opt.defaults["eps"] == 1e-9
    seen = []
    for _ in range(25):
        seen.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert seen == pytest.approx([noam_lr(k, 64, 10) for k in range(1, 26)])


def _toy_data(n=48, vocab=20, seed=0, shuffle=True):
    rng = random.Random(seed)
    src = [[rng.randrange(4, vocab) for _ in range(rng.randint(2, 9))] for _ in range(n)]
    tgt = [list(reversed(x)) for x in src]
    return BatchedCorpus(src, tgt, max_tokens=60, shuffle=shuffle, seed=seed)


def _trainer(tmp_path, **overrides):
    torch.manual_seed(0)
    cfg = TransformerConfig.tiny(src_vocab_size=20, tgt_vocab_size=20, dropout=0.1, max_len=32)
    model = Transformer(cfg)
    settings = dict(max_tokens=60, epochs=3, warmup_steps=5, checkpoint_every=4,
                    checkpoint_dir=str(tmp_path), seed=0, device="cpu", progress=False,
                    clip_grad_norm=1.0)
    settings.update(overrides)
    return Trainer(model, _toy_data(), TrainConfig(**settings), model_config=cfg,
                   val_data=_toy_data(16, seed=1, shuffle=False), extra={"note": "test"})


def test_resume_continues_exactly(tmp_path):
    full = _trainer(tmp_path / "full")
    full.fit()
    total = full.step
    assert total > 8 and full.epoch == 3

    first = _trainer(tmp_path / "cut", max_steps=10)  # "interrupted" after 10 steps
    first.fit()
    assert first.step == 10
    state = load_checkpoint(tmp_path / "cut" / "last.pt")  # weights_only=True
    assert state["step"] == 10 and state["model_config"]["d_model"] == 64
    assert state["extra"] == {"note": "test"}

    torch.manual_seed(123)  # the resumed run must not depend on the RNG state at start
    resumed = _trainer(tmp_path / "cut")
    resumed.load_checkpoint(tmp_path / "cut" / "last.pt")
    resumed.fit()
    assert resumed.step == total
    for (name, a), b in zip(full.model.state_dict().items(), resumed.model.state_dict().values(),
                            strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=name)
    assert resumed.history.train_loss == full.history.train_loss
    # the first run ended at max_steps and validated there; the rest is the same
    assert (10, first.history.val_loss[-1][1]) in resumed.history.val_loss
    assert [v for v in resumed.history.val_loss if v[0] != 10] == full.history.val_loss
    assert len(full.history.val_loss) == 3  # one per epoch


def test_checkpoint_interval_and_atomicity(tmp_path):
    trainer = _trainer(tmp_path, max_steps=6, epochs=100)
    trainer.fit()
    # no temp files left; the run record (transformer_book.runlog) sits beside the checkpoint
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.pt", "metrics.jsonl"]
    assert load_checkpoint(tmp_path / "last.pt")["step"] == 6
    with pytest.raises(ValueError, match="not a transformer_book checkpoint"):
        torch.save({"model": {}}, tmp_path / "other.pt")
        load_checkpoint(tmp_path / "other.pt")
    with pytest.raises(FileNotFoundError):
        load_checkpoint(tmp_path / "missing.pt")


def test_training_reduces_loss(tmp_path):
    trainer = _trainer(tmp_path, epochs=6, checkpoint_dir=None, lr_factor=3.0)
    before = trainer.evaluate()
    trainer.fit()
    assert trainer.evaluate() < before - 0.5


def test_bleu_signature():
    score, signature = corpus_bleu(["A dog runs on the grass ."], ["A dog runs on the grass ."])
    assert score.score == pytest.approx(100.0)
    assert "case:mixed" in signature and "tok:13a" in signature
    with pytest.raises(ValueError, match="references"):
        corpus_bleu(["a"], ["a", "b"])


def test_average_state_dicts():
    a = {"w": torch.tensor([1.0, 3.0]), "n": torch.tensor(1)}
    b = {"w": torch.tensor([3.0, 5.0]), "n": torch.tensor(2)}
    mean = average_state_dicts([a, b])
    torch.testing.assert_close(mean["w"], torch.tensor([2.0, 4.0]))
    assert mean["n"].item() == 2  # integer buffers: the last one's
    with pytest.raises(ValueError, match="other keys"):
        average_state_dicts([a, {"w": a["w"]}])
    with pytest.raises(ValueError, match="nothing to average"):
        average_state_dicts([])


def test_checkpoint_averaging_keeps_last_epochs_and_survives_resume(tmp_path):
    full = _trainer(tmp_path / "full", average_last=2)
    with pytest.raises(ValueError, match="average_last"):
        full.averaged_state_dict()  # before any epoch has ended
    full.fit()
    assert [e for e, _ in full.snapshots] == [2, 3]
    files = sorted(p.name for p in (tmp_path / "full").glob("weights_epoch*.pt"))
    assert files == ["weights_epoch0002.pt", "weights_epoch0003.pt"]  # older ones deleted
    averaged = full.averaged_state_dict()
    expected = average_state_dicts([s for _, s in full.snapshots])
    for k, v in averaged.items():
        torch.testing.assert_close(v, expected[k], rtol=0, atol=0)
    last = full.model.state_dict()
    assert any(not torch.equal(v, last[k]) for k, v in averaged.items())  # not just the last

    cut = _trainer(tmp_path / "cut", average_last=2, max_steps=full.step - 2)
    cut.fit()
    resumed = _trainer(tmp_path / "cut", average_last=2)
    resumed.load_checkpoint(tmp_path / "cut" / "last.pt")
    resumed.fit()
    assert [e for e, _ in resumed.snapshots] == [2, 3]
    for k, v in resumed.averaged_state_dict().items():
        torch.testing.assert_close(v, averaged[k], rtol=0, atol=0, msg=k)


def test_diverged_loss_raises_clearly(tmp_path):
    trainer = _trainer(tmp_path, checkpoint_dir=None)
    with torch.no_grad():
        next(trainer.model.parameters()).fill_(float("nan"))
    with pytest.raises(FloatingPointError, match="diverged"):
        trainer.fit()


def test_autocast_dtype_is_none_on_cpu():
    assert autocast_dtype(torch.device("cpu")) is None


def test_epoch_log_lines(tmp_path, capsys):
    _trainer(tmp_path, checkpoint_dir=None, epochs=2, log_epochs=True).fit()
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("epoch")]
    assert len(lines) == 2 and "val loss" in lines[0] and "tok/s" in lines[0]


# --------------------------------------------------------------------------- fast path (ch. 11)


def _weights(trainer):
    return {k: v.clone() for k, v in trainer.model.state_dict().items()}


def test_sync_free_loop_gives_identical_weights_and_history(tmp_path):
    """Reading losses every few steps, host-side id checks and prefetching change nothing."""
    plain = _trainer(tmp_path / "plain")
    plain.fit()
    assert plain.sync_every == 1 and not plain.prefetch  # the CPU default: the plain loop
    fast = _trainer(tmp_path / "fast", sync_every=5, prefetch=True)
    fast.fit()
    for k, v in _weights(plain).items():
        torch.testing.assert_close(fast.model.state_dict()[k], v, rtol=0, atol=0, msg=k)
    assert fast.history.train_loss == plain.history.train_loss
    assert fast.history.val_loss == plain.history.val_loss
    assert fast.history.lr == plain.history.lr
    assert fast.model.check_token_ids  # switched off during the loop only


def _fused_adam_on_cpu() -> bool:
    """torch 2.3 (the oldest release the book supports) fuses Adam for CUDA parameters only."""
    try:
        torch.optim.Adam([nn.Parameter(torch.zeros(1))], fused=True)
    except RuntimeError:
        return False
    return True


@pytest.mark.skipif(not _fused_adam_on_cpu(), reason="no fused Adam on the CPU in this torch")
def test_fused_adam_matches_plain_adam(tmp_path):
    plain = _trainer(tmp_path / "plain", max_steps=6, clip_grad_norm=None)
    plain.fit()
    fused = _trainer(tmp_path / "fused", max_steps=6, clip_grad_norm=None, fused_adam=True)
    assert fused.optimizer.defaults["fused"]
    fused.fit()
    for k, v in _weights(plain).items():
        if k.endswith("k_proj.bias"):  # its true gradient is 0 (softmax ignores a constant
            continue  # shift per query): Adam scales rounding noise up to full steps there
        torch.testing.assert_close(fused.model.state_dict()[k], v, rtol=1e-4, atol=1e-5, msg=k)
    torch.testing.assert_close([v for _, v in fused.history.train_loss],
                               [v for _, v in plain.history.train_loss], rtol=1e-5, atol=1e-5)


def test_diverged_loss_raises_with_sync_free_loop(tmp_path):
    trainer = _trainer(tmp_path, checkpoint_dir=None, sync_every=3)
    with torch.no_grad():
        next(trainer.model.parameters()).fill_(float("nan"))
    with pytest.raises(FloatingPointError, match="at step 1: the run diverged"):
        trainer.fit()


def test_train_step_compiled_without_breaks_trains(tmp_path):
    """torch.compile(fullgraph=True) of forward + loss: dynamo raises at any graph break (an
    .item() or int() of a device value inside the step would be one), and the compiled step
    gives the eager losses. The "aot_eager" backend traces forward and backward as inductor
    would but skips code generation, which takes minutes on a CPU."""
    from transformer_book.batching import collate
    from transformer_book.train import TrainStep

    batch = collate([[5, 6, 7], [8, 9]], [[3, 4], [5, 6, 7, 8]])
    losses = {}
    for compiled in (False, True):
        torch.manual_seed(0)
        cfg = TransformerConfig.tiny(src_vocab_size=20, tgt_vocab_size=20)
        model = Transformer(cfg)
        optimizer, scheduler = make_optimizer(model, cfg.d_model, 5)
        step = TrainStep(model, optimizer, scheduler, label_smoothing=0.1, pad_id=0)
        if compiled:
            step.loss = torch.compile(step._loss, fullgraph=True, backend="aot_eager")
        losses[compiled] = [float(step(batch)) for _ in range(3)]
    torch._dynamo.reset()
    torch.testing.assert_close(losses[True], losses[False], rtol=1e-5, atol=1e-5)


# --------------------------------------------------------------------------- validation


def test_eval_every_validates_every_n_steps(tmp_path):
    """eval_every=n: validation after every n-th step (not at the epoch ends), in the history
    and in metrics.jsonl, each the loss of the weights at that step."""
    import json

    trainer = _trainer(tmp_path, eval_every=4, max_steps=12, epochs=100, clip_grad_norm=None)
    per_epoch = trainer.train_data.num_batches(0)
    assert per_epoch % 4 != 0  # an epoch end that is not a multiple: no validation there
    trainer.fit()
    assert trainer.step == 12 and trainer.epoch >= 1
    assert [s for s, _ in trainer.history.val_loss] == [4, 8, 12]
    assert trainer.history.val_loss[-1][1] == trainer.evaluate()  # the final weights' loss
    assert len({v for _, v in trainer.history.val_loss}) == 3  # three different weights
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], r["val_loss"]) for r in lines if "val_loss" in r] == \
        trainer.history.val_loss
