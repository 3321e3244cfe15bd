"""Correctness of the measuring helpers in transformer_book.benchmark (nothing here is timed)."""

import math

import pytest
import torch
from transformer_book import benchmark


def test_loglog_slope_recovers_exponents():
    ns = [64, 128, 256, 512]
    assert benchmark.loglog_slope(ns, [3.0 * n**2 for n in ns]) == pytest.approx(2.0)
    assert benchmark.loglog_slope(ns, [0.5 * n for n in ns]) == pytest.approx(1.0)
    # a failed point (NaN) is left out, not fitted
    assert benchmark.loglog_slope(ns, [n**2 for n in ns[:3]] + [math.nan]) == pytest.approx(2.0)
    with pytest.raises(ValueError, match="at least two"):
        benchmark.loglog_slope([1, 2], [1.0, math.nan])


def test_time_call_counts_calls_and_checks_arguments():
    calls = []
    seconds = benchmark.time_call(lambda: calls.append(1), warmup=2, repeats=3)
    assert len(calls) == 5 and seconds >= 0
    with pytest.raises(ValueError, match="reduce"):
        benchmark.time_call(lambda: None, reduce="mean")
    with pytest.raises(ValueError, match="repeats"):
        benchmark.time_call(lambda: None, repeats=0)


def test_cpu_peak_memory_sees_one_known_tensor():
    n = 1 << 20  # 4 MiB of float32
    peak = benchmark.peak_memory_bytes(lambda: torch.ones(n), "cpu")
    assert 4 * n <= peak < 4 * n + 64 * 1024


def test_cpu_peak_memory_sees_temporaries_that_are_freed():
    n = 1 << 18

    def two_temporaries():
        a = torch.ones(n)  # 1 MiB
        b = a * 2  # 1 MiB more while a is alive
        del a
        return b.sum()

    peak = benchmark.peak_memory_bytes(two_temporaries, "cpu")
    assert 8 * n <= peak < 8 * n + 64 * 1024


def test_attention_memory_from_scratch_is_quadratic_and_sdpa_is_not():
    rows = benchmark.measure_attention([128, 256], heads=2, d_k=16, repeats=1)
    by = {(r["implementation"], r["n"]): r for r in rows}
    for n in (128, 256):
        mine, fused = by[("from scratch", n)], by[("PyTorch SDPA", n)]
        assert mine["score_bytes"] == 2 * n * n * 4
        # the from-scratch path holds at least one full (B, H, n, n) matrix
        assert mine["peak_bytes"] >= mine["score_bytes"]
        assert fused["peak_bytes"] < mine["score_bytes"]
        assert mine["seconds"] > 0 and fused["seconds"] > 0
    ratio = by[("from scratch", 256)]["peak_bytes"] / by[("from scratch", 128)]["peak_bytes"]
    assert 3.5 < ratio < 4.5  # doubling n quadruples the memory


def test_sequence_layers_rows():
    rows = benchmark.measure_sequence_layers([8, 16], d_model=32, heads=4, repeats=1)
    assert {r["implementation"] for r in rows} == {
        "self-attention layer", "Elman RNN (ch. 1)", "nn.GRU"}
    assert all(r["seconds"] > 0 and r["note"] == "" for r in rows)


def test_gpu_peaks_and_formatting():
    assert benchmark.gpu_peak_tflops("NVIDIA H100 80GB HBM3") == 989.4
    assert benchmark.gpu_peak_tflops("NVIDIA H100 PCIe") == 756.0
    assert benchmark.gpu_peak_tflops("NVIDIA H200") == 989.4
    assert benchmark.gpu_peak_tflops("NVIDIA A100-SXM4-80GB") == 312.0
    assert benchmark.gpu_peak_tflops("Tesla T4") is None
    assert benchmark.format_bytes(1536) == "1.5 KiB"
    assert benchmark.format_bytes(math.nan) == "-"
    table = benchmark.format_table([{"n": 64, "t": 1.23456}, {"n": 128}],
                                   [("n", "n", "d"), ("time", "t", ".2f")])
    assert table.splitlines() == ["  n  time", "---  ----", " 64  1.23", "128     -"]
