"""Tests of the command line (python -m transformer_book): train, resume, translate, and every
bad input of issue 14 (one line on stderr, exit status 2 for bad arguments, 1 for failures).

Most tests run the real command in a subprocess on the tiny preset (one thread each); one tiny
run is trained per test session and copied where a test changes it. Pure argument errors,
which need no data, call ``main()`` in-process to keep the suite fast.
"""

import errno
import io
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
from transformer_book.__main__ import main
from transformer_book.checkpoint import DirectoryLock, load_checkpoint, model_from_checkpoint
from transformer_book.evaluation import translate

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k"
DATA = os.environ.get("MULTI30K_DIR") or (str(SHARED) if SHARED.is_dir() else None)
needs_data = pytest.mark.skipif(DATA is None, reason="no local Multi30k copy (set MULTI30K_DIR)")
TINY = ["--preset", "tiny", "--vocab-size", "500", "--train-limit", "64", "--max-tokens", "400",
        "--device", "cpu", "--no-progress"]
PROG_ERROR = re.compile(r"^python -m transformer_book \w+: error: .+$")


@pytest.fixture(scope="session")
def env(tmp_path_factory):
    """Environment of every subprocess: one thread, a session tokenizer cache, the data."""
    cache = tmp_path_factory.mktemp("cache")
    return {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
            "TRANSFORMER_BOOK_CACHE": str(cache), "MULTI30K_DIR": DATA or "",
            "TRANSFORMER_BOOK_DEBUG": "", "PYTHONIOENCODING": "utf-8"}


def cli(env, *args, stdin: bytes | None = None, umask: int | None = None, timeout=300):
    """Run ``python -m transformer_book ARGS``; returns the CompletedProcess (bytes)."""
    return subprocess.run(
        [sys.executable, "-m", "transformer_book", *map(str, args)], input=stdin,
        capture_output=True, env=env, timeout=timeout,
        preexec_fn=None if umask is None else (lambda: os.umask(umask)))


def call(*args, stdin: bytes = b""):
    """``main(ARGS)`` in this process (needs the ``in_process`` fixture): the same code as the
    command line without the interpreter start; returns a CompletedProcess (bytes)."""
    streams = {name: io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
               for name in ("stdout", "stderr")}
    old = sys.stdin, sys.stdout, sys.stderr
    sys.stdin = io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8")
    sys.stdout, sys.stderr = streams["stdout"], streams["stderr"]
    try:
        try:
            status = main([str(a) for a in args])
        except SystemExit as e:  # argparse
            status = e.code
    finally:
        sys.stdin, sys.stdout, sys.stderr = old
    out = {}
    for name, stream in streams.items():
        stream.flush()
        out[name] = stream.buffer.getvalue()
    return subprocess.CompletedProcess(args, status, out["stdout"], out["stderr"])


def one_error_line(result, status: int) -> str:
    """The error of a failed run: exactly one stderr line in the house style, no traceback."""
    err = result.stderr.decode()
    assert result.returncode == status, (result.returncode, err)
    errors = [line for line in err.splitlines() if ": error:" in line]
    assert "Traceback" not in err, err
    # progress lines ("resumed from ...") may come first; the error is one line, the last
    assert len(errors) == 1 and PROG_ERROR.match(errors[0]), err
    assert err.strip().splitlines()[-1] == errors[0], err
    lines = errors
    assert "weights_only=False" not in err  # never advise the unsafe load
    return lines[0]


@pytest.fixture(scope="session")
def run(env, tmp_path_factory):
    """A tiny run trained once per session: 3 steps, a checkpoint every 2 steps, umask 022."""
    if DATA is None:
        pytest.skip("no local Multi30k copy (set MULTI30K_DIR)")
    folder = tmp_path_factory.mktemp("run") / "tiny"
    result = cli(env, "train", *TINY, "--checkpoint-dir", folder, "--max-steps", 3,
                 "--checkpoint-every", 2, "--num-layers", 1, umask=0o022)
    assert result.returncode == 0, result.stderr.decode()
    return folder


@pytest.fixture
def run_copy(run, tmp_path):
    """A copy of the session's run that a test may change."""
    folder = tmp_path / "run"
    shutil.copytree(run, folder)
    return folder


@pytest.fixture
def in_process(monkeypatch, env):
    """For main() in this process: one thread (restored afterwards), no debug, the session's
    tokenizer cache."""
    monkeypatch.delenv("TRANSFORMER_BOOK_DEBUG", raising=False)
    monkeypatch.setenv("TRANSFORMER_BOOK_CACHE", env["TRANSFORMER_BOOK_CACHE"])
    if DATA:
        monkeypatch.setenv("MULTI30K_DIR", DATA)
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# --------------------------------------------------------------------------- the happy path


@needs_data
def test_train_resume_translate(run, run_copy, env, in_process):
    state = load_checkpoint(run / "last.pt")
    assert state["step"] == 3 and state["model_config"]["d_model"] == 64
    assert state["model_config"]["num_layers"] == 1
    # row 4: the run's checkpoint interval (2) survives --resume without the flag
    result = call("train", *TINY, "--checkpoint-dir", run_copy, "--resume", "--max-steps", 4)
    assert result.returncode == 0, result.stderr.decode()
    assert "resumed from" in result.stderr.decode()
    resumed = load_checkpoint(run_copy / "last.pt")
    assert resumed["step"] == 4 and resumed["train_config"]["checkpoint_every"] == 2

    lines = ["Ein Hund läuft.", "Zwei Männer spielen Fußball im Park."]
    result = cli(env, "translate", "--checkpoint", run / "last.pt", "--beam-size", 2,
                 "--device", "cpu", stdin="\n".join(lines).encode() + b"\n")
    assert result.returncode == 0, result.stderr.decode()
    assert len(result.stdout.decode().splitlines()) == len(lines)  # one line per German line


def test_module_help_runs():
    result = subprocess.run([sys.executable, "-m", "transformer_book", "translate", "--help"],
                            capture_output=True, text=True, check=True)
    assert "--checkpoint" in result.stdout and "--beam-size" in result.stdout


# --------------------------------------------------------------------------- argument errors


@pytest.mark.parametrize("argv, expected", [
    (["train", "--epochs", "0"], "--epochs: must be a positive integer, got 0"),  # row 6
    (["train", "--epochs", "-1"], "--epochs: must be a positive integer, got -1"),
    (["train", "--max-steps", "-5"], "--max-steps: must be a positive integer, got -5"),
    (["train", "--checkpoint-every", "0"], "--checkpoint-every: must be a positive integer"),  # 7
    (["train", "--max-tokens", "ten"], "--max-tokens: expected an integer, got 'ten'"),
    (["train", "--vocab-size", "3"], "--vocab-size: must be an integer >= 5"),
    (["train", "--dropout", "1.5"], "--dropout: must be in [0, 1)"),
    (["train", "--lr-factor", "0"], "--lr-factor: must be in (0, inf)"),
    (["train", "--resume", "--overwrite"], "not allowed with argument"),
    (["translate", "--checkpoint", "x.pt", "--beam-size", "0"], "--beam-size: must be a positive"),
])
def test_bad_arguments_exit_2_with_one_line(argv, expected, capsys, in_process):
    with pytest.raises(SystemExit) as info:
        main(argv)
    err = capsys.readouterr().err
    assert info.value.code == 2 and expected in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_bad_arguments_in_a_subprocess(env, tmp_path):
    """The same in the real command line (row 6): exit 2, no checkpoint path printed."""
    result = cli(env, "train", "--epochs", 0, "--checkpoint-dir", tmp_path / "r")
    assert "--epochs" in one_error_line(result, 2)
    assert not (tmp_path / "r").exists()  # validated before any work: nothing created


def test_missing_paths_are_argument_errors(tmp_path, capsys, in_process):
    assert main(["train", "--checkpoint-dir", str(tmp_path / "none"), "--resume"]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["translate", "--checkpoint", str(tmp_path / "no.pt")]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main(["translate", "--checkpoint", str(tmp_path)]) == 2
    assert "is a folder" in capsys.readouterr().err
    assert main(["train", "--data-dir", str(tmp_path / "nodata")]) == 2
    assert "--data-dir" in capsys.readouterr().err
    if not torch.cuda.is_available():
        assert main(["train", "--device", "cuda", "--checkpoint-dir", str(tmp_path / "c")]) == 2
        assert "CUDA is not available" in capsys.readouterr().err
    assert main(["train", "--device", "nonsense", "--checkpoint-dir", str(tmp_path / "c")]) == 2
    assert "not a device name" in capsys.readouterr().err


@needs_data
def test_vocab_size_smaller_than_the_alphabet(env, tmp_path, in_process):  # row 8
    result = call("train", "--preset", "tiny", "--vocab-size", 10, "--checkpoint-dir",
                 tmp_path / "v", "--max-steps", 1, "--device", "cpu", "--no-progress")
    line = one_error_line(result, 2)
    assert "--vocab-size 10: too small" in line and re.search(r"at least \d+", line)
    assert not (tmp_path / "v" / "last.pt").exists()


def test_debug_shows_the_traceback(env, tmp_path, in_process):
    result = call("translate", "--checkpoint", tmp_path, "--debug")
    assert result.returncode == 2 and "Traceback" in result.stderr.decode()
    result = call("translate", "--checkpoint", tmp_path)
    one_error_line(result, 2)


# --------------------------------------------------------------------------- translate


@needs_data
def test_translate_bad_utf8(run, env, in_process):  # row 2
    text = "Ein Hund läuft.\nZwei Männer.\n".encode() + "Ein Bär.\n".encode("latin-1")
    result = cli(env, "translate", "--checkpoint", run / "last.pt", "--beam-size", 1,
                 "--device", "cpu", stdin=text)
    line = one_error_line(result, 1)
    assert "stdin line 3" in line and "0xe4" in line and "not UTF-8" in line
    assert result.stdout == b""  # checked before anything is translated
    result = call("translate", "--checkpoint", run / "last.pt", "--beam-size", 1,
                 "--device", "cpu", "--invalid-utf8", "replace", stdin=text)
    assert result.returncode == 0 and "stdin line 3" in result.stderr.decode()
    assert len(result.stdout.decode().splitlines()) == 3


@needs_data
def test_translate_empty_long_and_many_lines(run, in_process, capsys, monkeypatch):
    """Rows 1 and 3, and 200 lines in several batches: one output line per input line."""
    good = ["Ein Hund läuft.", "Zwei Männer spielen im Park.", "Eine Frau liest ein Buch."]
    long_line = " ".join(["Hund"] * 70)  # more than --max-tokens 60 allows
    lines = [good[i % 3] for i in range(200)]
    lines[5], lines[7], lines[9], lines[150] = "", "   \t", long_line, long_line
    stdin = io.TextIOWrapper(io.BytesIO(("\r\n".join(lines) + "\r\n").encode()),
                             encoding="utf-8")
    monkeypatch.setattr(sys, "stdin", stdin)
    assert main(["translate", "--checkpoint", str(run / "last.pt"), "--beam-size", "1",
                 "--max-tokens", "60", "--device", "cpu"]) == 0
    captured = capsys.readouterr()
    out = captured.out.split("\n")
    assert out[-1] == "" and len(out[:-1]) == len(lines)  # one to one, newline-terminated
    assert out[5] == "" and out[7] == ""  # empty in, empty out (no made-up "A")
    model, tokenizer, _ = model_from_checkpoint(run / "last.pt", "cpu")
    expected = translate(model, tokenizer, lines, max_tokens=60, truncate=True)
    assert out[:-1] == expected  # in order
    warnings = [w for w in captured.err.splitlines() if "warning" in w]
    assert len(warnings) == 2 and "stdin line 10:" in warnings[0]
    assert "stdin line 151:" in warnings[1] and "first 59 tokens" in warnings[1]


@needs_data
def test_translate_empty_stdin(run, env, in_process):
    result = call("translate", "--checkpoint", run / "last.pt", "--device", "cpu",
                 stdin=b"")
    assert result.returncode == 0 and result.stdout == b""


@needs_data
def test_beam_size_bounded(run, env, in_process, capsys, monkeypatch):  # row 13
    result = call("translate", "--checkpoint", run / "last.pt", "--beam-size", 100000,
                 "--device", "cpu", stdin=b"Ein Hund.\n")
    assert "more beams than the model's 500 target tokens" in one_error_line(result, 2)
    # the memory estimate: refused before decoding when it exceeds half of what is free
    import transformer_book.cli.translate as cli_module

    monkeypatch.setattr(cli_module, "available_memory", lambda device: 40 * 2**20)
    monkeypatch.setattr(sys, "stdin", io.StringIO("Ein Hund läuft.\n"))
    assert main(["translate", "--checkpoint", str(run / "last.pt"), "--beam-size", "400",
                 "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert re.search(r"--beam-size 400: .* would need about [\d.]+ GiB, more than half of the "
                     r"0\.0 GiB available .* use --beam-size \d+ or less", err), err


@needs_data
def test_translate_splits_batches_to_fit_the_memory(run, in_process, capsys, monkeypatch):
    """A memory budget that holds a few sentences per batch: translate decodes in several
    batches, translating what translate() does with that budget (tests/test_evaluation.py:
    the same as one batch)."""
    import transformer_book.cli.translate as cli_translate
    from transformer_book import decode
    from transformer_book.evaluation import decode_memory_bytes

    lines = ["Ein Hund läuft.", "Zwei Männer spielen im Park.", "Eine Frau liest ein Buch.",
             "Ein Kind.", "Drei Hunde spielen im Schnee neben einem Haus."] * 3
    model, tokenizer, _ = model_from_checkpoint(run / "last.pt", "cpu")
    longest = max(len(ids) for ids in tokenizer.encode_batch(lines)) + 1
    budget = 3 * decode_memory_bytes(model.config, longest, 2)  # 3 of the longest sentences
    monkeypatch.setattr(cli_translate, "available_memory", lambda device: 2 * budget)
    sizes, real = [], decode.beam_search

    def counting(model, src, *args, **kwargs):
        sizes.append(src.shape[0])
        return real(model, src, *args, **kwargs)

    monkeypatch.setattr(decode, "beam_search", counting)
    monkeypatch.setattr(sys, "stdin", io.StringIO("\n".join(lines) + "\n"))
    assert main(["translate", "--checkpoint", str(run / "last.pt"), "--beam-size", "2",
                 "--device", "cpu"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(sizes) >= len(lines) / 4 and sum(sizes) == len(lines)  # split: 3 or 4 a batch
    monkeypatch.setattr(decode, "beam_search", real)
    assert out == translate(model, tokenizer, lines, beam_size=2, truncate=True,
                            memory_budget=budget)


# --------------------------------------------------------------------------- train


@needs_data
def test_fresh_run_refuses_existing_checkpoint(run_copy, env, in_process):  # row 5 (second half)
    before = (run_copy / "last.pt").read_bytes()
    result = call("train", *TINY, "--checkpoint-dir", run_copy, "--max-steps", 1)
    line = one_error_line(result, 2)
    assert "already holds last.pt" in line and "--resume" in line and "--overwrite" in line
    assert (run_copy / "last.pt").read_bytes() == before
    result = call("train", *TINY, "--checkpoint-dir", run_copy, "--max-steps", 1,
                 "--overwrite")
    assert result.returncode == 0, result.stderr.decode()
    assert load_checkpoint(run_copy / "last.pt")["step"] == 1


@needs_data
def test_two_runs_on_one_folder(run_copy, env, in_process):  # row 5 (first half)
    with DirectoryLock(run_copy):  # another process holds the folder
        before = (run_copy / "last.pt").read_bytes()
        result = cli(env, "train", *TINY, "--checkpoint-dir", run_copy, "--resume",
                     "--max-steps", 4)
        line = one_error_line(result, 1)
        assert "in use by another training run" in line and f"pid {os.getpid()}" in line
        assert (run_copy / "last.pt").read_bytes() == before
    result = call("train", *TINY, "--checkpoint-dir", run_copy, "--resume", "--max-steps", 4)
    assert result.returncode == 0, result.stderr.decode()  # the lock went with its holder


@needs_data
def test_resume_refuses_contradicting_flags(run, env, in_process):  # row 12
    result = call("train", "--checkpoint-dir", run, "--resume", "--preset", "small",
                 "--vocab-size", 1000, "--num-layers", 3, "--seed", 1, "--max-steps", 5)
    line = one_error_line(result, 2)
    assert "4 flag(s) contradict" in line
    for part in ("--preset small (the run has tiny)", "--vocab-size 1000 (the run has 500)",
                 "--num-layers 3 (the run has 1)", "--seed 1 (the run has 0)"):
        assert part in line, line


@needs_data
def test_resume_of_a_run_without_cpu_amp_and_the_flag_against_it(run_copy, in_process):
    """A checkpoint written before TrainConfig.cpu_amp existed resumes (as a float32 run);
    --cpu-amp on --resume contradicts a float32 run."""
    state = load_checkpoint(run_copy / "last.pt")
    del state["train_config"]["cpu_amp"]
    torch.save(state, run_copy / "last.pt")
    result = call("train", "--checkpoint-dir", run_copy, "--resume", "--cpu-amp",
                  "--max-steps", 4)
    assert "--cpu-amp (the run has False)" in one_error_line(result, 2)
    result = call("train", *TINY, "--checkpoint-dir", run_copy, "--resume", "--max-steps", 4)
    assert result.returncode == 0, result.stderr.decode()
    resumed = load_checkpoint(run_copy / "last.pt")
    assert resumed["step"] == 4 and resumed["train_config"]["cpu_amp"] is False


@needs_data
def test_resume_with_nothing_left_to_do(run, env, in_process):  # row 12: fewer steps/epochs, or finished
    result = call("train", "--checkpoint-dir", run, "--resume", "--max-steps", 2)
    assert "already at step 3" in one_error_line(result, 2)
    result = call("train", "--checkpoint-dir", run, "--resume")
    assert result.returncode == 0
    assert "nothing to do" in result.stderr.decode() and "--max-steps 3" in result.stderr.decode()
    assert "val loss" not in result.stderr.decode()  # no stale metrics reprinted


@needs_data
def test_ctrl_c_writes_a_checkpoint_and_says_how_to_resume(env, tmp_path, in_process):  # row 9
    folder = tmp_path / "int"
    proc = subprocess.Popen(
        [sys.executable, "-m", "transformer_book", "train", *TINY, "--checkpoint-dir",
         str(folder), "--epochs", "1000", "--checkpoint-every", "1000", "--data-dir", DATA],
        stderr=subprocess.PIPE, env=env)
    stderr = b""
    while b"parameters" not in stderr:  # training starts after this line
        chunk = proc.stderr.readline()
        assert chunk, stderr.decode()
        stderr += chunk
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    stderr += proc.communicate(timeout=120)[1]
    err = stderr.decode()
    assert proc.returncode == 130 and "Traceback" not in err, err
    step = int(re.search(r"interrupted at step (\d+)", err).group(1))
    assert step >= 1 and load_checkpoint(folder / "last.pt")["step"] == step
    command = err.strip().splitlines()[-1].split()
    assert command[1:] == ["-m", "transformer_book", "train", "--checkpoint-dir", str(folder),
                           "--resume", "--data-dir", DATA]
    assert command[0] == sys.executable
    result = call(*command[3:], "--max-steps", step + 1, "--no-progress")
    assert result.returncode == 0, result.stderr.decode()
    assert load_checkpoint(folder / "last.pt")["step"] == step + 1


@needs_data
def test_kill_9_then_resume_gives_identical_weights(env, tmp_path, in_process):
    killed = tmp_path / "killed"
    proc = subprocess.Popen(
        [sys.executable, "-m", "transformer_book", "train", *TINY, "--checkpoint-dir",
         str(killed), "--epochs", "1000", "--checkpoint-every", "2", "--data-dir", DATA],
        stderr=subprocess.DEVNULL, env=env)
    deadline = time.time() + 120
    while not (killed / "last.pt").exists() and time.time() < deadline:
        time.sleep(0.1)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    step = load_checkpoint(killed / "last.pt")["step"]  # never a truncated file
    target = step + 3
    result = call("train", *TINY, "--checkpoint-dir", killed, "--resume", "--max-steps",
                 target)
    assert result.returncode == 0, result.stderr.decode()
    straight = tmp_path / "straight"
    result = call("train", *TINY, "--checkpoint-dir", straight, "--epochs", 1000,
                 "--checkpoint-every", 2, "--max-steps", target)
    assert result.returncode == 0, result.stderr.decode()
    a = load_checkpoint(killed / "last.pt")["model"]
    b = load_checkpoint(straight / "last.pt")["model"]
    for name in b:
        torch.testing.assert_close(a[name], b[name], rtol=0, atol=0, msg=name)


# --------------------------------------------------------------------------- checkpoint files


@needs_data
def test_checkpoints_honour_the_umask(run, env, tmp_path, in_process):  # row 14
    assert (run / "last.pt").stat().st_mode & 0o777 == 0o644  # trained under umask 022
    old = os.umask(0o077)
    try:
        result = call("train", *TINY, "--checkpoint-dir", tmp_path / "private", "--max-steps", 1)
    finally:
        os.umask(old)
    assert result.returncode == 0, result.stderr.decode()
    assert (tmp_path / "private" / "last.pt").stat().st_mode & 0o777 == 0o600


def _patched_save(code: int) -> str:
    """Python code that makes torch.save write a little, then fail with OSError(code)."""
    return textwrap.dedent(f"""
        import errno, os, sys, torch
        def failing_save(obj, f, *args, **kwargs):
            f.write(b"partial")
            raise OSError({code}, os.strerror({code}))
        torch.save = failing_save
        from transformer_book.__main__ import main
        sys.exit(main(sys.argv[1:]))
    """)


@needs_data
@pytest.mark.parametrize("code, words", [(errno.ENOSPC, "no space left on the device"),
                                         (errno.EACCES, "permission denied")])
def test_disk_full_or_permission_denied_while_writing(run_copy, env, code, words, in_process,
                                                      monkeypatch):  # row 11
    before = (run_copy / "last.pt").read_bytes()
    argv = ["train", *TINY, "--checkpoint-dir", str(run_copy), "--resume", "--max-steps", "4"]
    if code == errno.ENOSPC:  # in a subprocess
        result = subprocess.run([sys.executable, "-c", _patched_save(code), *argv],
                                capture_output=True, env=env)
    else:  # the same code, in this process
        namespace = {}
        exec(_patched_save(code).split("torch.save = ")[0], namespace)
        monkeypatch.setattr(torch, "save", namespace["failing_save"])
        result = call(*argv)
    line = one_error_line(result, 1)
    assert f"cannot write {run_copy / 'last.pt'}: {words}" in line and "intact" in line
    assert (run_copy / "last.pt").read_bytes() == before  # the previous checkpoint is intact
    assert not [p for p in run_copy.iterdir() if p.name.endswith(".tmp")]  # no temp file left


@needs_data
def test_bad_checkpoint_files(run, env, tmp_path, in_process, capsys, monkeypatch):  # row 10
    good = (run / "last.pt").read_bytes()
    state = load_checkpoint(run / "last.pt")
    cases = {
        "empty.pt": (b"", "is empty (0 bytes)"),
        "truncated.pt": (good[: len(good) // 2], "is truncated or corrupted"),
        "text.pt": (b"hello\n", "is not a PyTorch checkpoint"),
    }
    for name, (data, _) in cases.items():
        (tmp_path / name).write_bytes(data)
    torch.save(state["model"], tmp_path / "weights.pt")
    cases["weights.pt"] = (None, "holds only model weights (a state dict)")
    torch.save({**state, "format": 99, "transformer_book_version": "9.9"}, tmp_path / "v99.pt")
    cases["v99.pt"] = (None, "has checkpoint format 99, but this transformer_book reads format 1")
    other = dict(state["model"])
    first = next(iter(other))
    other[first] = torch.zeros(7)  # another shape
    other["extra_layer.weight"] = torch.zeros(2)  # and a layer this model does not have
    torch.save({**state, "model": other}, tmp_path / "other.pt")
    cases["other.pt"] = (None, "holds weights of another model")
    for name, (_, words) in cases.items():  # in this process (fast); the messages are the same
        monkeypatch.setattr(sys, "stdin", io.StringIO("Ein Hund.\n"))
        assert main(["translate", "--checkpoint", str(tmp_path / name), "--device", "cpu"]) == 1
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and "weights_only=False" not in err
        assert str(tmp_path / name) in err and words in err, (name, err)
    # --resume reads the same messages
    folder = tmp_path / "resume"
    folder.mkdir()
    (folder / "last.pt").write_bytes(good[:1000])
    result = call("train", "--checkpoint-dir", folder, "--resume")
    assert "is truncated or corrupted" in one_error_line(result, 1)


class _Payload:
    def __reduce__(self):
        return (os.system, ("touch PAYLOAD_RAN",))


@needs_data
def test_pickle_payload_is_refused(run, env, tmp_path):
    state = load_checkpoint(run / "last.pt")
    torch.save({**state, "extra": {"tokenizer": _Payload()}}, tmp_path / "evil.pt")
    result = subprocess.run(
        [sys.executable, "-m", "transformer_book", "translate", "--checkpoint",
         str(tmp_path / "evil.pt"), "--device", "cpu"], input=b"Hund\n", capture_output=True,
        env=env, cwd=tmp_path)
    line = one_error_line(result, 1)
    assert "refused because loading them could run code" in line
    assert not (tmp_path / "PAYLOAD_RAN").exists()
