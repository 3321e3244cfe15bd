"""Correctness of the measuring helpers in transformer_lab (nothing here is timed)."""

import math

import pytest
import torch
import transformer_lab as benchmark


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


def test_attention_memory_from_scratch_is_quadratic_and_sdpa_is_not(one_thread):
    """The CPU's claim, on one thread: PyTorch's fused CPU kernel (flash attention) works on
    blocks of queries and keys, with a buffer per thread: on 16 threads its buffers outgrow one
    (B, H, 128, 128) score matrix (316 KB against 128 KB), on one they stay well under it."""
    rows = benchmark.measure_attention([128, 256], heads=2, d_k=16, repeats=1, device="cpu")
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


@pytest.mark.skipif(not torch.cuda.is_available(), reason="a claim about CUDA's kernels")
def test_attention_memory_on_cuda_from_scratch_is_quadratic_and_sdpa_is_linear():
    """The same on a CUDA GPU (float32: PyTorch's memory-efficient kernel), at lengths where the
    score matrices dominate: doubling n quadruples the from-scratch peak, while the fused
    kernel's peak (its output and per-row statistics) at most about doubles."""
    rows = benchmark.measure_attention([1024, 2048], heads=2, d_k=16, repeats=1, device="cuda")
    by = {(r["implementation"], r["n"]): r for r in rows}
    for n in (1024, 2048):
        mine, fused = by[("from scratch", n)], by[("PyTorch SDPA", n)]
        assert mine["note"] == fused["note"] == ""
        assert mine["peak_bytes"] >= mine["score_bytes"] == 2 * n * n * 4
        assert fused["peak_bytes"] < mine["score_bytes"] / 4
    mine = by[("from scratch", 2048)]["peak_bytes"] / by[("from scratch", 1024)]["peak_bytes"]
    fused = by[("PyTorch SDPA", 2048)]["peak_bytes"] / by[("PyTorch SDPA", 1024)]["peak_bytes"]
    assert 3.5 < mine < 4.5 and fused < 2.5


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


def test_train_flops_match_the_formula_and_both_models_do_the_same_work():
    from transformer_book.config import TransformerConfig
    from transformer_book.model import Transformer

    cfg = benchmark.matched_configs(TransformerConfig.tiny(src_vocab_size=1000,
                                                           tgt_vocab_size=1000))
    torch.manual_seed(0)
    ours, theirs = Transformer(cfg), benchmark.TorchTransformerBaseline(cfg)
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in theirs.parameters())
    B, S, T = 4, 10, 12
    batch = benchmark.synthetic_batch(B, S, T, 1000)
    assert batch[0].shape == (B, S) and batch[1].shape == (B, T) and (batch[0] != 0).all()
    D, F_, N, V = cfg.d_model, cfg.d_ff, cfg.num_layers, cfg.tgt_vocab_size
    # multiply-adds of one forward pass: projections, attention, feed-forward, output layer
    enc = N * (S * (4 * D * D + 2 * D * F_) + 2 * S * S * D)
    dec = N * (T * (4 * D * D + 2 * D * F_) + 2 * T * T * D  # self-attention and FFN
               + T * 2 * D * D + S * 2 * D * D + 2 * T * S * D)  # cross-attention
    expected = B * 6 * (enc + dec + T * D * V)  # 2 FLOPs per MAC, backward = 2 x forward
    assert benchmark.count_train_flops(ours, *batch) == expected
    assert benchmark.count_train_flops(theirs, *batch) == expected


def test_baseline_gives_finite_logits_and_ignores_padding_like_ours():
    from transformer_book.config import TransformerConfig

    cfg = TransformerConfig.tiny(src_vocab_size=50, tgt_vocab_size=50)
    torch.manual_seed(0)
    model = benchmark.TorchTransformerBaseline(cfg).eval()
    src = torch.tensor([[5, 6, 7, 0, 0]])
    tgt = torch.tensor([[1, 8, 9]])
    logits = model(src, tgt)
    assert logits.shape == (1, 3, 50) and torch.isfinite(logits).all()
    # the padded source gives the same logits as the unpadded one: the masks point the right way
    torch.testing.assert_close(model(src[:, :3], tgt), logits)


def test_source_batches_sort_pad_and_keep_positions():
    sources = [[5, 6, 7], [5], [5, 6]]
    batches = benchmark.source_batches(sources, 2, pad_id=0, eos_id=2)
    assert [idx for idx, _ in batches] == [[1, 2], [0]]
    assert batches[0][1].tolist() == [[5, 2, 0], [5, 6, 2]]
    assert batches[1][1].tolist() == [[5, 6, 7, 2]]


def test_decoding_with_unreachable_eos_runs_fixed_length_and_cache_agrees():
    from transformer_book.config import TransformerConfig
    from transformer_book.model import Transformer

    torch.manual_seed(0)
    model = Transformer(TransformerConfig.tiny(src_vocab_size=300, tgt_vocab_size=300)).eval()
    benchmark.make_eos_unreachable(model, 2)
    g = torch.Generator().manual_seed(0)
    sources = [torch.randint(3, 300, (n,), generator=g).tolist() for n in (4, 7, 5)]
    batches = benchmark.source_batches(sources, 2, pad_id=0, eos_id=2)
    methods = {"greedy": {}, "greedy, no cache": {"use_cache": False},
               "beam": {"beam_size": 3}, "beam, no cache": {"beam_size": 3, "use_cache": False}}
    res = benchmark.measure_decoding(model, batches, methods, bos_id=1, eos_id=2,
                                     max_new_tokens=6)
    for r in res.values():
        assert r["sentences"] == 3 and r["tokens"] == 3 * 6  # every sentence ran 6 steps
        assert all(out[0] == 1 and 2 not in out for out in r["outputs"])
    assert res["greedy"]["outputs"] == res["greedy, no cache"]["outputs"]
    assert res["beam"]["outputs"] == res["beam, no cache"]["outputs"]


def test_operator_names_sees_the_attention_kernel():
    q = torch.randn(1, 2, 8, 4)
    names = benchmark.operator_names(
        lambda: torch.nn.functional.scaled_dot_product_attention(q, q, q), "scaled_dot_product")
    assert "aten::scaled_dot_product_attention" in names


def test_ladder_rows_on_cpu_skip_cuda_rungs_and_compare_both_models():
    from transformer_book.config import TransformerConfig
    from transformer_book.model import Transformer

    cfg = benchmark.matched_configs(TransformerConfig.tiny(src_vocab_size=30, tgt_vocab_size=30,
                                                           dropout=0.1))

    def make():
        torch.manual_seed(0)
        return {"transformer_book": Transformer(cfg),
                "nn.Transformer": benchmark.TorchTransformerBaseline(cfg)}

    rungs = [r for r in benchmark.LADDER if r.name in ("eager baseline", "no host syncs",
                                                       "flash SDPA", "torch.compile")]
    rows = benchmark.measure_ladder(make, batch=2, src_len=5, tgt_len=5, rungs=rungs, steps=1,
                                    rounds=1, config_name="tiny")
    assert [(r["rung"], r["model"]) for r in rows] == [
        (rung.name, m) for rung in rungs for m in ("transformer_book", "nn.Transformer")]
    for r in rows:
        assert {"model", "config", "rung", "device", "ms_per_step", "tokens_per_second",
                "mfu"} <= r.keys() and r["device"] == "cpu" and r["mfu"] is None
        measured = r["rung"] in ("eager baseline", "no host syncs")
        assert (r["ms_per_step"] is not None) == measured, r
        if measured:
            assert r["tokens_per_second"] == pytest.approx(2 * 5 / (r["ms_per_step"] / 1e3))
        else:
            assert r["note"].startswith("skipped")
    table = benchmark.ladder_table_rows(rows)
    assert [t["rung"] for t in table] == [r.name for r in rungs]
    assert table[0]["speedup"] == 1.0 and table[0]["ratio"] > 0
    assert "ours/theirs" in benchmark.format_table(table, benchmark.LADDER_COLUMNS)


def test_baseline_encode_decode_agree_with_forward():
    """TorchTransformerBaseline's two halves (used to score nn.Transformer's BLEU) give the
    logits of its forward pass."""
    from transformer_book.config import TransformerConfig

    torch.manual_seed(0)
    model = benchmark.TorchTransformerBaseline(
        TransformerConfig.tiny(src_vocab_size=30, tgt_vocab_size=30)).eval()
    src = torch.tensor([[5, 6, 7, 2], [8, 9, 2, 0]])
    tgt = torch.tensor([[1, 4, 5], [1, 6, 0]])
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        assert src_mask.shape == (2, 1, 1, 4) and not bool(src_mask[1, 0, 0, 3])
        torch.testing.assert_close(model.decode(tgt, memory, src_mask), model(src, tgt))
    with pytest.raises(ValueError, match="no cache"):
        model.decode(tgt, memory, src_mask, cache=object())


@pytest.mark.parametrize("norm_first", [False, True])
def test_baseline_as_book_model_computes_the_same_and_decodes_with_a_cache(norm_first):
    """to_book_model() copies nn.Transformer's weights into the book's model: same logits, and
    cached beam search gives the baseline's own (uncached) translations."""
    from transformer_book.config import TransformerConfig
    from transformer_book.decode import beam_search, greedy_decode

    torch.manual_seed(0)
    cfg = TransformerConfig.tiny(src_vocab_size=30, tgt_vocab_size=30, norm_first=norm_first,
                                 dropout=0.1)
    model = benchmark.TorchTransformerBaseline(cfg).eval()
    book = model.to_book_model()
    assert not book.training and book.config.attention_dropout == 0.1
    src = torch.tensor([[5, 6, 7, 2], [8, 9, 2, 0]])
    tgt = torch.tensor([[1, 4, 5], [1, 6, 0]])
    with torch.no_grad():
        torch.testing.assert_close(book(src, tgt), model(src, tgt), atol=1e-5, rtol=1e-5)
        # the copy does not share storage: training the baseline further leaves it alone
        model.generator.weight.add_(1.0)
        assert not torch.allclose(book(src, tgt), model(src, tgt))
        model.generator.weight.sub_(1.0)
        kw = dict(bos_id=1, eos_id=2, max_new_tokens=8)
        assert (beam_search(book, src, beam_size=3, use_cache=True, **kw)
                == beam_search(model, src, beam_size=3, use_cache=False, **kw))
        torch.testing.assert_close(greedy_decode(book, src, **kw), greedy_decode(model, src, **kw))
