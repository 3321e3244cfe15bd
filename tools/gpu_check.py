"""``make gpu-check``: what the CPU suite cannot show, checked on a CUDA GPU in a few minutes.

Usage:
    python tools/gpu_check.py [--data DIR] [--out SUMMARY.json]
    python tools/gpu_check.py --device cpu --smoke   # the plumbing, with tiny sizes, on a CPU

Three parts, each in its own process with its own time limit, each timed:

1. ``tests``: the unit tests that exercise the device (``GPU_TESTS``), with
   ``TRANSFORMER_BOOK_DEVICE=cuda`` (tests taking conftest's ``device`` fixture run there; the
   package's default device is CUDA on such a machine anyway);
2. ``quick``: chapter 8's quick configuration (its model, batches and schedule, one epoch)
   through the package's ``Trainer``, as the chapter runs it, then greedy BLEU on validation
   and greedy and beam-4 BLEU on test 2016;
3. ``full``: the first ``--full-steps`` steps (300) of chapter 8's full configuration, then the
   validation loss and greedy BLEU on test 2016 (a model this young scores near 0: the number
   is printed, not judged).

It prints what each part measured (steps, seconds, target tokens per second, train and
validation loss, BLEU, the GPU and the torch version), writes the same as JSON (``--out``;
a full log beside it) and exits 1 if any part fails or runs out of time. Without a CUDA GPU
it refuses in one line (exit 2), except with ``--device cpu --smoke``.

Nothing but PyTorch and the package's own dependencies is needed (no venv: the package is put on
the path), and no network: Multi30k comes from ``--data``, ``$MULTI30K_DIR`` or ``.gpudata/multi30k``;
tokenizers are trained into a temporary cache.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REFUSAL = "gpu-check needs a CUDA GPU; none found"
#: The unit tests that run on the device: the ones taking conftest's ``device`` fixture, the
#: CUDA-only claims, and those that train or decode on the package's default device.
GPU_TESTS = ["tests/test_evaluation.py", "tests/test_benchmark.py", "tests/test_amp_choice.py",
             "tests/test_corpus.py", "tests/test_rnn_vs_transformer.py"]
#: --smoke: a few of them, on the CPU (the plumbing, not the claims)
SMOKE_TESTS = ["tests/test_evaluation.py", "tests/test_benchmark.py", "-k",
               "memory_budget or attention_memory"]
PARTS = ("tests", "quick", "full")


def _log(out, text: str = "") -> None:
    print(text, flush=True)
    out.write(text + "\n")


# --------------------------------------------------------------------------- training parts


def _tokens_trained(data, steps: int) -> int:
    """Target tokens of the first ``steps`` batches (one batch per step, one process)."""
    total, epoch = 0, 0
    while steps > 0:
        per_batch = data.target_tokens(epoch)
        total += sum(per_batch[:steps])
        steps -= len(per_batch)
        epoch += 1
    return total


def _losses(history, name: str) -> list[float]:
    return [float(v[1] if isinstance(v, (tuple, list)) else v) for v in getattr(history, name, [])]


def train_part(name: str, device: str, data_dir: str, smoke: bool, full_steps: int) -> dict:
    """Chapter 8's ``quick`` configuration, or ``full_steps`` steps of its ``full`` one, trained
    as the chapter trains it; what it measured."""
    import torch
    from transformer_book import describe_hardware, set_seed
    from transformer_book.config import TransformerConfig
    from transformer_book.data import load_multi30k
    from transformer_book.model import Transformer
    from transformer_book.tokenizer import load_or_train_tokenizer
    from transformer_book.train import TrainConfig, Trainer, corpus_bleu, prepare_corpus, translate

    set_seed(0)
    train, val, test = (load_multi30k(s, data_dir) for s in ("train", "val", "test_2016_flickr"))
    if smoke:  # the plumbing only: a small vocabulary, a few pairs, a few steps, a few sentences
        tokenizer = load_or_train_tokenizer(list(zip(train.src[:2000], train.tgt[:2000],
                                                     strict=True)), vocab_size=500)
    else:
        tokenizer = load_or_train_tokenizer(train, vocab_size=8000)  # chapter 8's
    v = tokenizer.vocab_size
    if name == "quick":  # chapter 8, CONFIGURATION == "quick"
        model_config = TransformerConfig.small(src_vocab_size=v, tgt_vocab_size=v, d_model=128,
                                               num_heads=4, num_layers=2, d_ff=512)
        settings = dict(max_tokens=1024, epochs=1, warmup_steps=200, lr_factor=0.5,
                        label_smoothing=0.1, seed=0)
        plan = [("val", val, [1]), ("test_2016_flickr", test, [1, 4])]
    else:  # chapter 8, CONFIGURATION == "full", its first full_steps steps
        model_config = TransformerConfig.base(src_vocab_size=v, tgt_vocab_size=v, num_layers=3,
                                              dropout=0.3)
        settings = dict(max_tokens=4096, epochs=40, warmup_steps=1000, lr_factor=0.5,
                        label_smoothing=0.1, average_last=5, seed=0, max_steps=full_steps)
        plan = [("test_2016_flickr", test, [1])]
    if smoke:
        settings["max_steps"] = 3
    limit, sentences = (200, 10) if smoke else (None, None)
    result: dict = {"configuration": name, "device": str(device),
                    "hardware": describe_hardware(device), "torch": torch.__version__}
    with tempfile.TemporaryDirectory(prefix=f"gpu_check_{name}_") as folder:
        config = TrainConfig(**settings, progress=False, log_epochs=True,
                             checkpoint_dir=folder, device=device)
        train_data = prepare_corpus(tokenizer, train, config.max_tokens, seed=config.seed,
                                    limit=limit)
        val_data = prepare_corpus(tokenizer, val, config.max_tokens, shuffle=False,
                                  limit=limit)
        set_seed(0)
        model = Transformer(model_config)
        trainer = Trainer(model, train_data, config, model_config=model_config,
                          val_data=val_data, extra={"tokenizer": tokenizer.to_str()})
        if trainer.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(trainer.device)
        start = time.perf_counter()
        history = trainer.fit()
        if trainer.device.type == "cuda":
            torch.cuda.synchronize(trainer.device)
        seconds = time.perf_counter() - start
        losses = _losses(history, "train_loss")
        k = max(1, min(20, len(losses) // 5))
        tokens = _tokens_trained(train_data, trainer.step)
        amp = getattr(trainer, "amp_dtype", None)
        result.update({
            "parameters": model.num_parameters(), "steps": trainer.step,
            "precision": str(amp).replace("torch.", "") if amp is not None else "float32",
            "train_seconds": round(seconds, 2), "target_tokens": tokens,
            "target_tokens_per_second": round(tokens / seconds),
            # the means of the first and last 20 steps' losses (chapter 8's check), or of the
            # first and last fifth of those read back, if there were fewer
            "train_loss_first20": round(sum(losses[:k]) / k, 4),
            "train_loss_last20": round(sum(losses[-k:]) / k, 4),
            "train_loss_final": round(losses[-1], 4) if losses else None,
        })
        rates = _losses(history, "tokens_per_second")
        if rates:  # the Trainer's own figure: the last epoch, end to end
            result["trainer_tokens_per_second_last_epoch"] = round(rates[-1])
        result["val_loss"] = round(float(trainer.evaluate()), 4)
    if trainer.device.type == "cuda":
        result["peak_gpu_memory_GiB"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    bleu = []
    for split, corpus, beams in plan:
        src, ref = corpus.src[:sentences], corpus.tgt[:sentences]
        for beam in beams:
            start = time.perf_counter()
            hyps = translate(model, tokenizer, src, beam_size=beam, length_penalty=0.6)
            score, _ = corpus_bleu(hyps, ref)
            bleu.append({"split": split, "decoding": "greedy" if beam == 1 else f"beam {beam}",
                         "sentences": len(src), "bleu": round(score.score, 2),
                         "seconds": round(time.perf_counter() - start, 2)})
    result["bleu"] = bleu
    problems = []
    if not losses or not all(map(math.isfinite, losses)) or not math.isfinite(result["val_loss"]):
        problems.append("a loss is not finite")
    if trainer.step != settings.get("max_steps", trainer.step):
        problems.append(f"{trainer.step} steps, {settings['max_steps']} asked for")
    if not smoke:  # chapter 8's own check of the quick run; a weaker one for 300 full steps
        fell = result["train_loss_first20"] - result["train_loss_last20"]
        if fell < (1.0 if name == "quick" else 0.0):
            problems.append(f"the training loss fell by {fell:.2f} only")
    result["problems"] = problems
    return result


# --------------------------------------------------------------------------- the driver


def _run(cmd: list[str], env: dict, timeout: float) -> tuple[int | None, str]:
    """Run ``cmd`` in its own process group; (exit status or None on timeout, output)."""
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=timeout)
        return proc.returncode, output
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        return None, output or ""


def _junit_counts(path: Path) -> dict:
    counts = dict.fromkeys(("tests", "failures", "errors", "skipped"), 0)
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return counts
    for suite in root.iter("testsuite"):
        for key in counts:
            counts[key] += int(suite.get(key, 0))
    return counts


def run_part(part: str, args, env: dict, work: Path, log) -> dict:
    timeout = getattr(args, f"{part}_timeout")
    start = time.perf_counter()
    if part == "tests":
        xml = work / "junit.xml"
        selection = SMOKE_TESTS if args.smoke else GPU_TESTS
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfE",
               "--tb=short", f"--junitxml={xml}", *selection]
    else:
        json_path = work / f"{part}.json"
        cmd = [sys.executable, str(Path(__file__).resolve()), "--part", part, "--device",
               args.device, "--data", args.data, "--full-steps", str(args.full_steps),
               "--out", str(json_path), *(["--smoke"] if args.smoke else [])]
    code, output = _run(cmd, env, timeout)
    seconds = time.perf_counter() - start
    lines = output.rstrip().splitlines()
    log.write(f"---- {part}: {' '.join(cmd)}\n{output}\n")
    for line in lines[-40:]:  # the whole output is in the log file
        print(f"  {line}", flush=True)
    result = {"seconds": round(seconds, 1), "timeout_seconds": timeout, "exit_status": code}
    if part == "tests":
        result.update(_junit_counts(xml))
        result["selection"] = selection
    elif json_path.is_file():
        result.update(json.loads(json_path.read_text()))
    problems = list(result.pop("problems", []))
    if code is None:
        problems.append(f"ran out of its {timeout:g} s")
    elif code != 0:
        problems.append(f"exit status {code}")
    if part == "tests" and code is not None and result["tests"] == 0:
        problems.append("no test ran")
    result["ok"], result["problems"] = not problems, problems
    return result


def _print_part(part: str, r: dict, log) -> None:
    verdict = "ok" if r["ok"] else "FAILED: " + "; ".join(r["problems"])
    _log(log, f"== {part}: {r['seconds']:.1f} s (limit {r['timeout_seconds']:g} s): {verdict}")
    if part == "tests":
        passed = r["tests"] - r["failures"] - r["errors"] - r["skipped"]
        _log(log, f"   {passed} passed, {r['failures']} failed, {r['errors']} errors, "
             f"{r['skipped']} skipped")
        return
    if "steps" not in r:
        return
    _log(log, f"   {r['configuration']}: {r['parameters']:,} parameters, {r['precision']}, "
         f"on {r['hardware']}")
    _log(log, f"   {r['steps']} steps in {r['train_seconds']:.1f} s (validation and checkpoint "
         f"included), {r['target_tokens_per_second']:,} target tokens/s"
         + (f" (the Trainer's last epoch: {r['trainer_tokens_per_second_last_epoch']:,})"
            if "trainer_tokens_per_second_last_epoch" in r else ""))
    _log(log, f"   train loss {r['train_loss_first20']:.3f} (first 20 steps) -> "
         f"{r['train_loss_last20']:.3f} (last 20), final {r['train_loss_final']}; "
         f"validation loss {r['val_loss']:.3f}"
         + (f"; peak GPU memory {r['peak_gpu_memory_GiB']} GiB"
            if "peak_gpu_memory_GiB" in r else ""))
    for b in r["bleu"]:
        _log(log, f"   BLEU {b['split']} {b['decoding']}: {b['bleu']:.2f} "
             f"({b['sentences']} sentences, {b['seconds']:.1f} s)")


def _data_dir(given: str | None) -> str | None:
    for candidate in (given, os.environ.get("MULTI30K_DIR"), str(ROOT / ".gpudata" / "multi30k"),
                      str(ROOT.parent / "shared" / "data" / "multi30k")):
        if candidate and Path(candidate).is_dir():
            return str(Path(candidate).resolve())
    return None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", help="write the JSON summary here (a log beside it: .log)")
    p.add_argument("--data", help="the Multi30k folder (default: $MULTI30K_DIR, "
                   ".gpudata/multi30k, ../shared/data/multi30k)")
    p.add_argument("--device", default="cuda", help="cuda (default); cpu only with --smoke")
    p.add_argument("--smoke", action="store_true", help="tiny sizes: test the plumbing")
    p.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, of {PARTS}")
    p.add_argument("--full-steps", type=int, default=300, help="steps of the full part (300)")
    p.add_argument("--tests-timeout", type=float, default=200.0, help="seconds (200)")
    p.add_argument("--quick-timeout", type=float, default=150.0, help="seconds (150)")
    p.add_argument("--full-timeout", type=float, default=120.0, help="seconds (120)")
    p.add_argument("--part", choices=PARTS[1:], help=argparse.SUPPRESS)  # the child process
    args = p.parse_args(argv)

    if args.part:  # one training part, in its own process; the driver reads its JSON
        result = train_part(args.part, args.device, args.data, args.smoke, args.full_steps)
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
        return 0
    try:
        import torch
    except ImportError:
        print("gpu-check needs PyTorch; none found for " + sys.executable, file=sys.stderr)
        return 2
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print(REFUSAL, file=sys.stderr)
        return 2
    if not args.device.startswith("cuda") and not args.smoke:
        print(f"gpu-check: --device {args.device} is only for --smoke", file=sys.stderr)
        return 2
    parts = [s for s in args.parts.split(",") if s]
    if not parts or set(parts) - set(PARTS):
        print(f"gpu-check: --parts: choose from {','.join(PARTS)}", file=sys.stderr)
        return 2
    args.data = _data_dir(args.data)
    if args.data is None and set(parts) != {"tests"}:
        print("gpu-check: no Multi30k copy: pass --data DIR or set MULTI30K_DIR", file=sys.stderr)
        return 2

    out = Path(args.out).resolve() if args.out else None
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="gpu_check_") as tmp, \
            open(out.with_suffix(".log") if out else Path(tmp) / "gpu_check.log", "w") as log:
        work = Path(tmp)
        env = {**os.environ, "TRANSFORMER_BOOK_DEVICE": args.device, "PYTHONUNBUFFERED": "1",
               "MPLBACKEND": "Agg",
               "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "code"),
                                                           os.environ.get("PYTHONPATH")]))}
        env.setdefault("TRANSFORMER_BOOK_CACHE", str(work / "cache"))  # tokenizers (no platformdirs)
        if args.data:
            env["MULTI30K_DIR"] = args.data
        cuda = args.device.startswith("cuda")
        summary = {
            "gpu": torch.cuda.get_device_name(args.device) if cuda else None,
            "torch": torch.__version__, "cuda": torch.version.cuda, "python": platform.python_version(),
            "device": args.device, "smoke": args.smoke, "data": args.data, "parts": {},
        }
        _log(log, f"gpu-check on {summary['gpu'] or 'the CPU (smoke)'}: torch {summary['torch']}, "
             f"CUDA {summary['cuda']}, Python {summary['python']}"
             + (" (--smoke: tiny sizes, nothing measured)" if args.smoke else ""))
        start = time.perf_counter()
        for part in parts:
            _log(log, f"-- {part} ...")
            summary["parts"][part] = run_part(part, args, env, work, log)
            _print_part(part, summary["parts"][part], log)
        summary["seconds"] = round(time.perf_counter() - start, 1)
        failed = [k for k, r in summary["parts"].items() if not r["ok"]]
        summary["ok"] = not failed
        _log(log, "== summary: " + ", ".join(f"{k} {r['seconds']:.0f} s" for k, r in
                                            summary["parts"].items())
             + f"; {summary['seconds']:.0f} s in all")
        _log(log, "gpu-check: FAILED: " + ", ".join(failed) if failed
             else f"gpu-check: all {len(parts)} parts passed")
        if out:
            out.write_text(json.dumps(summary, indent=1) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
