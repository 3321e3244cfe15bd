"""Training on several processes (transformer_book.distributed, issue 19): torchrun + DDP.

The reference for a run on W processes is one process whose steps take the same W batches,
gradients accumulated and weighted by target tokens (``--accumulate W``): the same global batch,
so the same loss trajectory, up to the order in which float32 sums are taken.

Tolerance: with W = 2, DDP's average (2 a + 2 b) / 2 is bitwise the accumulated a + b (scaling by
2 is exact, and a sum of two terms is the same in either order), and we measured identical
losses to the last digit; ``rtol=1e-5`` (about 80 float32 ulps) leaves room for a gloo or DDP
release that sums buckets in another order, whose rounding differences (1e-7 relative per
step) Adam can amplify over a few steps, while a wrong weighting or a wrong batch changes the
loss in the second or third digit (the steps below differ by more than 1e-2 from each other).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from transformer_book import distributed
from transformer_book.batching import BatchedCorpus
from transformer_book.distributed import Context, shard_steps, token_shares
from transformer_book.train import TrainStep, label_smoothing_loss, make_optimizer

DE = ["Ein Hund läuft im Schnee.", "Zwei Kinder spielen.", "Eine Frau liest ein Buch.",
      "Ein Mann fährt Fahrrad auf der Straße.", "Die Katze schläft."]
EN = ["A dog runs in the snow.", "Two children are playing.", "A woman reads a book.",
      "A man rides a bike on the street.", "The cat sleeps."]
RTOL = 1e-5  # see the module docstring


# --------------------------------------------------------------------------- sharding


@pytest.mark.parametrize("world,accumulate,start", [(2, 1, 0), (2, 2, 3), (3, 1, 5), (1, 4, 2)])
def test_shards_cover_the_epoch_once_without_overlap(world, accumulate, start):
    n = 15
    per_step = world * accumulate
    plans = [shard_steps(n, start, per_step, Context(r, world)) for r in range(world)]
    groups = [g for g, _ in plans[0]]
    assert all([g for g, _ in p] == groups for p in plans)  # every rank sees the same steps
    assert [p for g in groups for p in g] == list(range(start, n))  # consecutive, from start
    assert all(len(g) == per_step for g in groups[:-1]) and 0 < len(groups[-1]) <= per_step
    for step, group in enumerate(groups):
        shards = [plans[r][step][1] for r in range(world)]
        assert sorted(p for s in shards for p in s) == list(group)  # no overlap, nothing left
        assert all(len(s) <= accumulate for s in shards)


def test_a_short_last_group_leaves_a_rank_without_a_batch():
    (group, mine), = shard_steps(5, 4, 2, Context(1, 2))
    assert list(group) == [4] and mine == []  # the trainer gives it weight 0 (see _fit)
    with pytest.raises(ValueError, match="multiple of world_size"):
        shard_steps(5, 0, 3, Context(0, 2))


def test_token_shares_undo_the_ddp_average():
    tokens = [30, 10, 20, 40]  # a step of 4 batches over 2 ranks: rank 0 has 30 and 20
    shares = [token_shares(tokens[r::2], sum(tokens), 2) for r in range(2)]
    assert shares[0] == [30 * 2 / 100, 20 * 2 / 100]
    # DDP divides the sum over ranks by 2: the weights each batch ends up with are n_b / N
    assert sum(s for r in shares for s in r) / 2 == pytest.approx(1.0)
    assert token_shares([57], 57, 1) == [1.0]  # one batch, one process: the plain loss


def test_batches_at_positions_and_their_target_tokens():
    g = torch.Generator().manual_seed(0)
    lens = torch.randint(1, 12, (40, 2), generator=g).tolist()
    data = BatchedCorpus([[5] * a for a, _ in lens], [[6] * b for _, b in lens], max_tokens=48)
    every = list(data.batches(1))
    assert data.target_tokens(1) == [b.num_tgt_tokens for b in every]
    picked = list(data.batches(1, positions=[3, 0, 3]))
    assert [torch.equal(b.src, every[i].src) for b, i in zip(picked, [3, 0, 3], strict=True)] \
        == [True] * 3


def test_environment_of_torchrun(monkeypatch):
    for k in distributed.TORCHRUN_VARS:
        monkeypatch.delenv(k, raising=False)
    assert distributed.from_environment() == Context()  # plain python: one process
    monkeypatch.setenv("RANK", "1")
    with pytest.raises(ValueError, match="WORLD_SIZE, LOCAL_RANK not set"):
        distributed.from_environment()
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_RANK", "1")
    ctx = distributed.from_environment()
    assert (ctx.rank, ctx.world_size, ctx.enabled, ctx.is_main) == (1, 4, True, False)
    assert distributed.device_for(ctx, "cpu") == "cpu"
    assert distributed.device_for(ctx, "cuda:0") == "cuda:1"  # one GPU per process
    monkeypatch.setenv("RANK", "4")
    with pytest.raises(ValueError, match="inconsistent"):
        distributed.from_environment()


# --------------------------------------------------------------------------- accumulation


def test_token_weighted_accumulation_is_the_gradient_of_the_whole_step():
    """TrainStep.accumulate with token shares = one loss over all the step's target tokens."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(20, 8), torch.nn.Linear(8, 20))

    class Wrap(torch.nn.Module):  # (src, tgt_in) -> logits, like the Transformer
        def __init__(self):
            super().__init__()
            self.net = model

        def forward(self, src, tgt_in):
            return self.net(tgt_in)

    wrap = Wrap()
    data = BatchedCorpus([[3] * n for n in range(1, 13)],
                         [[4 + n % 7] * (13 - n) for n in range(1, 13)], max_tokens=30)
    batches = list(data.batches(0))[:3]
    tokens = [b.num_tgt_tokens for b in batches]
    assert len(set(tokens)) > 1  # unequal batches: a plain mean of means would be wrong
    optimizer, _ = make_optimizer(wrap, 8, warmup_steps=10)
    step = TrainStep(wrap, optimizer, label_smoothing=0.1, pad_id=0)
    step.optimizer.step = lambda *a, **k: None  # keep the gradients, skip the update
    loss = step.accumulate([(b, s) for b, s in zip(batches, token_shares(tokens, sum(tokens), 1),
                                                    strict=True)])
    grads = [p.grad.clone() for p in wrap.parameters()]
    wrap.zero_grad()
    whole = sum(label_smoothing_loss(wrap(b.src, b.tgt_in), b.tgt_out, 0.1, 0, "sum")
                for b in batches) / sum(tokens)
    whole.backward()
    torch.testing.assert_close(loss, whole.detach(), rtol=1e-6, atol=0)
    for got, want in zip(grads, (p.grad for p in wrap.parameters()), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-8)


# --------------------------------------------------------------------------- torchrun


@pytest.fixture
def corpus(tmp_path):
    files = {}
    for split, reps in (("train", 12), ("valid", 2)):  # 15 training batches: a short last step
        for flag, lines, lang in (("src", DE, "de"), ("tgt", EN, "en")):
            path = tmp_path / f"{split}.{lang}"
            path.write_text("".join(line + "\n" for line in lines * reps), encoding="utf-8")
            files[f"--{split}-{flag}"] = str(path)
    return files


def _run(cmd, env, cwd):
    result = subprocess.run(cmd, capture_output=True, env=env, cwd=cwd, timeout=300)
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    return result.stderr.decode()


def _losses(run: Path) -> dict[int, float]:
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in records if "loss" in r}


def _val(run: Path) -> list[tuple[int, float]]:
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [(r["step"], r["val_loss"]) for r in records if "val_loss" in r]


def test_two_gloo_processes_match_one_with_the_same_global_batch_and_resume_across(
        corpus, tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "TRANSFORMER_BOOK_CACHE": str(tmp_path / "cache"), "TRANSFORMER_BOOK_DEBUG": "1",
           "PYTHONIOENCODING": "utf-8"}
    for k in distributed.TORCHRUN_VARS:
        env.pop(k, None)
    common = ["train", "--preset", "tiny", "--vocab-size", "120", "--max-tokens", "64",
              "--warmup-steps", "10", "--dropout", "0", "--epochs", "2", "--device", "cpu",
              "--no-progress", *[x for kv in corpus.items() for x in kv]]
    one = [sys.executable, "-m", "transformer_book"]
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                "--standalone", "-m", "transformer_book"]
    ref, run = tmp_path / "ref", tmp_path / "run"
    # the reference: one process, 2 batches per step, 10 steps (the first epoch ends at step 8,
    # whose group is 1 batch: the 15th)
    _run([*one, *common, "--accumulate", "2", "--checkpoint-dir", ref, "--max-steps", "10"],
         env, tmp_path)
    # the same run in three parts: 1 process to step 4, 2 processes to the end of the epoch
    # (step 8: rank 1 has no batch there), 1 process again
    _run([*one, *common, "--accumulate", "2", "--checkpoint-dir", run, "--max-steps", "4"],
         env, tmp_path)
    err = _run([*torchrun, "train", "--checkpoint-dir", run, "--resume", "--accumulate", "1",
                "--max-steps", "8", "--device", "cpu", "--no-progress"], env, tmp_path)
    assert "2 processes (cpu)" in err and "resumed from" in err
    assert err.count("resumed from") == 1  # rank 0 speaks for both
    state = torch.load(run / "last.pt", weights_only=True)
    assert (state["step"], state["epoch"], state["batch_in_epoch"], state["world_size"]) \
        == (8, 1, 0, 2)
    shutil.copytree(run, tmp_path / "after2")
    err = _run([*one, "train", "--checkpoint-dir", run, "--resume", "--accumulate", "2",
                "--max-steps", "10", "--device", "cpu", "--no-progress"], env, tmp_path)
    assert "batches per step, now" not in err  # 2 x 1 then, 1 x 2 now: the same global batch
    state = torch.load(run / "last.pt", weights_only=True)
    assert (state["step"], state["epoch"], state["batch_in_epoch"]) == (10, 1, 4)

    want, got = _losses(ref), _losses(run)
    assert sorted(got) == list(range(1, 11)) == sorted(want)
    diffs = [abs(got[s] - want[s]) for s in range(1, 11)]
    assert max(abs(want[s + 1] - want[s]) for s in range(1, 10)) > 1e-2  # the losses move
    for s in range(1, 11):
        assert got[s] == pytest.approx(want[s], rel=RTOL), (s, diffs)
    # validation at the end of the first epoch, on 2 processes (3 batches shared 2 + 1)
    (step_r, val_r), (end_r, last_r) = _val(ref)  # and where the run ends (max_steps)
    (step_1, _), (step_2, val_2) = _val(tmp_path / "after2")  # each part validates at its end
    assert step_1 == 4
    assert step_r == step_2 == 8 and val_2 == pytest.approx(val_r, rel=RTOL)
    (end, last) = _val(run)[-1]
    assert end == end_r == 10 and last == pytest.approx(last_r, rel=RTOL)


def test_the_resume_hint_after_ctrl_c_names_torchrun(monkeypatch):
    import argparse

    from transformer_book.cli.train import resume_command

    args = argparse.Namespace(checkpoint_dir="runs/ddp", data_dir=None)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert " -m transformer_book train --checkpoint-dir runs/ddp --resume" in resume_command(args)
    assert "torchrun" not in resume_command(args)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert resume_command(args) == ("torchrun --standalone --nproc-per-node 2 -m transformer_book "
                                     "train --checkpoint-dir runs/ddp --resume")
    monkeypatch.setenv("WORLD_SIZE", "16")  # two machines of 8
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    assert resume_command(args).startswith("torchrun <the same --nnodes/--rdzv-* flags> "
                                            "--nproc-per-node 8 -m transformer_book train")


# --------------------------------------------------------------------------- Trainer on 2 ranks


def _tiny_trainer(ctx, tmp: Path | None, **config):
    from transformer_book.config import TransformerConfig
    from transformer_book.model import Transformer
    from transformer_book.train import TrainConfig, Trainer

    g = torch.Generator().manual_seed(0)
    def ids(n):
        return [torch.randint(4, 40, (int(k),), generator=g).tolist()
                for k in torch.randint(2, 9, (n,), generator=g)]
    train = BatchedCorpus(ids(48), ids(48), max_tokens=40, seed=1)
    val = BatchedCorpus(ids(20), ids(20), max_tokens=40, shuffle=False)
    torch.manual_seed(0)
    model_config = TransformerConfig.tiny(src_vocab_size=40, tgt_vocab_size=40, num_layers=1,
                                          dropout=0.0)
    cfg = TrainConfig(device="cpu", progress=False, warmup_steps=4, checkpoint_every=1000,
                      checkpoint_dir=None if tmp is None else str(tmp), **config)
    return Trainer(Transformer(model_config), train, cfg, model_config=model_config,
                   val_data=val, distributed=ctx)


def _rank_main(rank: int, port: int, out: str) -> None:
    """One of 2 gloo ranks: a time-budgeted linear-schedule run whose rank 1 reads a clock 40%
    ahead (the ranks must still stop at the same step with the same rates)."""
    import torch.distributed as dist

    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    trainer = _tiny_trainer(Context(rank, 2, rank), None, schedule="linear",
                            time_budget=3.0, epochs=1000)
    if rank == 1:
        trainer.clock.now = lambda: 1.4 * time.perf_counter()
    history = trainer.fit()
    val = trainer.evaluate()
    torch.save({"step": trainer.step, "lr": history.lr, "loss": history.train_loss, "val": val,
                "params": {k: v.clone() for k, v in trainer.model.state_dict().items()}},
               f"{out}/rank{rank}.pt")
    dist.destroy_process_group()


def test_ranks_stay_replicas_and_agree_on_time_and_validation(tmp_path):
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:  # a free port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_rank_main, args=(port, str(tmp_path)), nprocs=2, join=True)
    r0, r1 = (torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in range(2))
    assert r0["step"] == r1["step"] >= 2  # stopped by the budget at the same step
    assert r0["lr"] == r1["lr"] and r0["loss"] == r1["loss"]  # one clock, one reduced loss
    assert r0["lr"][-1][1] < max(lr for _, lr in r0["lr"])  # the linear decay ran
    assert r0["val"] == r1["val"]  # every rank reports the same validation loss
    for k, v in r0["params"].items():  # the replicas stayed bitwise identical
        assert torch.equal(v, r1["params"][k]), k
    # and the validation loss is that of the whole validation set on one process
    one = _tiny_trainer(Context(), None)
    one.model.load_state_dict(r0["params"])
    assert one.evaluate() == pytest.approx(r0["val"], rel=1e-12)
