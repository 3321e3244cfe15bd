"""Correctness of the CPU ladder and profile helpers (transformer_lab.cpu_ladder):
the rungs run the step they name, the summaries compute what they say, the profile's groups
add up. Nothing here is timed."""

import functools
from types import SimpleNamespace

import pytest
import torch
from transformer_book.batching import collate
from transformer_book.config import TransformerConfig
from transformer_lab import cpu_ladder
from transformer_lab.cpu_ladder import CPU_LADDER, CpuRung

CONFIG = TransformerConfig.tiny(src_vocab_size=30, tgt_vocab_size=30, dropout=0.1)
BATCHES = [collate([[5, 6, 7, 8], [9, 10]], [[3, 4, 11], [5, 6, 7, 8, 12]]),
           collate([[13, 14], [15, 16, 17]], [[18, 19], [20, 21, 22]])]


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_ladder_rungs_keep_the_rungs_above():
    names = [r.name for r in CPU_LADDER]
    assert names == ["fp32, 1 thread", "2 threads", "bf16 autocast", "bf16, plain attention",
                     "no dropout", "torch.compile"]
    assert [r.threads for r in CPU_LADDER] == [1, 2, 2, 2, 2, 2]
    assert [r.dropout for r in CPU_LADDER] == [0.1] * 4 + [0.0] * 2
    assert [r.recipe_change for r in CPU_LADDER] == [False] * 4 + [True, False]
    assert [r.compile for r in CPU_LADDER] == [False] * 5 + [True]


def _weights_after(step, model, n=3):
    losses = [float(step(BATCHES[i % 2])) for i in range(n)]
    return losses, [p.detach().clone() for p in model.parameters()]


def test_bf16_rungs_run_the_package_step():
    """The traceable bf16 forward computes exactly what the package's CPU bf16 step computes
    (bit for bit); the fused-attention rung differs from it only in the attention kernel."""
    rung = CpuRung("bf16", precision="bf16")
    package = _weights_after(*cpu_ladder.make_cpu_step(rung, CONFIG))
    traceable = _weights_after(*cpu_ladder.make_cpu_step(rung, CONFIG, traceable_bf16=True))
    assert package[0] == traceable[0]
    assert all(torch.equal(a, b) for a, b in zip(package[1], traceable[1], strict=True))
    fused = _weights_after(*cpu_ladder.make_cpu_step(CpuRung("f", precision="bf16 fused"),
                                                     CONFIG))
    torch.testing.assert_close(fused[0], package[0], rtol=0.05, atol=0.05)
    fp32_step, fp32_model = cpu_ladder.make_cpu_step(CpuRung("fp32"), CONFIG)
    assert fp32_step.amp_dtype is None and fp32_model.config.dropout == 0.1
    _, no_dropout = cpu_ladder.make_cpu_step(CpuRung("p0", dropout=0.0), CONFIG)
    assert no_dropout.config.dropout == 0.0
    with pytest.raises(ValueError, match="precision"):
        cpu_ladder.make_cpu_step(CpuRung("x", precision="fp16"), CONFIG)


def test_compiled_bf16_rung_falls_back_to_a_traceable_forward(monkeypatch):
    """The package's CPU autocast (an ExitStack) cannot be traced with fullgraph=True in
    torch 2.13; the compiled rung then compiles BF16Forward and says so. The "aot_eager"
    backend traces as inductor would, without the minutes of code generation."""
    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="aot_eager"))
    rung = CpuRung("compiled", precision="bf16", dropout=0.0, compile=True)
    step, note, failed_seconds = cpu_ladder.first_call(rung, CONFIG, BATCHES[0], seed=0)
    assert failed_seconds >= 0 and (failed_seconds > 0) == bool(note)
    if note:  # the package's step could not be compiled: the fallback ran the same computation
        assert "BF16Forward" in note and isinstance(step.model, cpu_ladder.BF16Forward)
    eager_step, _ = cpu_ladder.make_cpu_step(CpuRung("eager", precision="bf16", dropout=0.0),
                                             CONFIG)
    eager_step(BATCHES[0])  # the step first_call made
    compiled_loss = float(step(BATCHES[1]))
    torch._dynamo.reset()
    torch.testing.assert_close(compiled_loss, float(eager_step(BATCHES[1])), rtol=1e-3, atol=1e-3)


def test_measure_cpu_ladder_rows_and_summary():
    rungs = [CpuRung("fp32"), CpuRung("bf16", precision="bf16", dropout=0.0,
                                      recipe_change=True)]
    rows = cpu_ladder.measure_cpu_ladder(CONFIG, BATCHES, rungs=rungs, rounds=2)
    tokens = sum(b.num_tgt_tokens for b in BATCHES)
    assert [r["rung"] for r in rows] == ["fp32", "bf16"]
    for row in rows:
        assert row["target_tokens"] == tokens and row["sentences"] == 4 and row["steps"] == 2
        assert len(row["seconds"]) == 2 and row["warmup_seconds"] > 0
        assert row["tokens_per_second"] == [tokens / s for s in row["seconds"]]
        assert row["compile_seconds"] is None
    summary = cpu_ladder.summarize_ladder(rows)
    assert summary[0]["vs_first"] == 1.0 and "vs_above" not in summary[0]
    assert summary[1]["vs_above_low"] <= summary[1]["vs_above"] <= summary[1]["vs_above_high"]
    with pytest.raises(ValueError, match="rounds"):
        cpu_ladder.measure_cpu_ladder(CONFIG, BATCHES, rungs=rungs, rounds=0)


def test_summary_ratios_are_paired_round_by_round():
    def row(name, seconds):
        return {"rung": name, "recipe_change": False, "seconds": seconds, "note": "",
                "compile_seconds": None, "tokens_per_second": [100 / s for s in seconds],
                "sentences_per_second": [10 / s for s in seconds]}

    # round 2 was slow for both: the paired ratio is 2 in every round
    summary = cpu_ladder.summarize_ladder([row("a", [1.0, 3.0, 1.2]), row("b", [0.5, 1.5, 0.6])])
    assert summary[1]["vs_above_low"] == pytest.approx(2.0)
    assert summary[1]["vs_above_high"] == pytest.approx(2.0)
    assert summary[1]["faster_every_round"] and not summary[1]["slower_every_round"]
    assert summary[0]["spread"] == pytest.approx(2.0)  # slowest round 3 s, fastest 1 s
    assert summary[1]["vs_first"] == pytest.approx(100 / 0.6 / (100 / 1.2))


def test_compile_payoff():
    # 1.25 times as fast: 600 s of eager work take 480 s, 120 s saved; 100 s of compiling pays
    got = cpu_ladder.compile_payoff(100.0, 1.25, budget=600.0)
    assert got["saved_seconds"] == pytest.approx(120.0) and got["pays_off"]
    assert got["break_even_seconds"] == pytest.approx(500.0)
    got = cpu_ladder.compile_payoff(157.0, 1.04)
    assert not got["pays_off"] and got["break_even_seconds"] > 600
    assert cpu_ladder.compile_payoff(10.0, 0.9)["break_even_seconds"] == float("inf")


def _event(name, *parents):
    parent = None
    for p in reversed(parents):  # parents listed innermost first
        parent = SimpleNamespace(name=p, cpu_parent=parent)
    return SimpleNamespace(name=name, cpu_parent=parent, self_cpu_time_total=1e6)


def test_profile_groups():
    group = cpu_ladder.profile_group
    assert group(_event("aten::mm")) == "matrix products"
    assert group(_event("aten::addmm", "aten::linear")) == "matrix products"
    assert group(_event("aten::mul_", "aten::_foreach_mul_", "Optimizer.step#Adam.step")) == "Adam"
    assert group(_event("Optimizer.step#Adam.step")) == "Adam"
    assert group(_event("aten::_scaled_dot_product_flash_attention_for_cpu_backward")) == \
        "attention"
    assert group(_event("aten::bmm")) == "attention"  # the plain kernel's products
    assert group(_event("aten::mul", "aten::_scaled_dot_product_attention_math")) == "attention"
    assert group(_event("aten::bernoulli_")) == "dropout"
    assert group(_event("aten::_log_softmax_backward_data")) == "log-softmax (output layer)"
    assert group(_event("aten::layer_norm")) == "the rest"
    groups = cpu_ladder.grouped_profile([_event("aten::mm"), _event("aten::mm"),
                                         _event("aten::add")])
    assert list(groups) == list(cpu_ladder.PROFILE_GROUPS)
    assert groups["matrix products"] == 2.0 and groups["the rest"] == 1.0


def test_profile_cpu_step_groups_add_up():
    got = cpu_ladder.profile_cpu_step(CpuRung("fp32"), CONFIG, BATCHES, wait=1, warmup=1,
                                      active=1)
    assert got["total"] == pytest.approx(sum(got["groups"].values()))
    assert got["groups"]["matrix products"] > 0 and got["groups"]["dropout"] > 0
    assert got["groups"]["Adam"] > 0 and got["sdpa_backward"] > 0  # fp32: the fused kernel
    assert got["top"] and got["step_seconds"] > 0 and "aten::mm" in got["table"]
    plain = cpu_ladder.profile_cpu_step(CpuRung("bf16", precision="bf16", dropout=0.0), CONFIG,
                                        BATCHES, wait=1, warmup=1, active=1)
    assert plain["sdpa_backward"] == 0 and plain["groups"]["dropout"] == 0
    assert plain["groups"]["attention"] > 0  # the plain kernel's products and softmax
