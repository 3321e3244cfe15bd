"""Bring your own corpus: parallel text files read with a clear error for every way they can be
wrong, and a small fixture corpus that trains a tokenizer and batches like Multi30k does."""

from __future__ import annotations

import pytest
from transformer_book.corpus import CorpusError, iter_parallel_text, load_parallel_text
from transformer_book.tokenizer import SubwordTokenizer
from transformer_book.train import prepare_corpus

DE = ["Ein Hund läuft im Schnee.", "Zwei Kinder spielen.", "Eine Frau liest ein Buch."]
EN = ["A dog runs in the snow.", "Two children are playing.", "A woman reads a book."]


def write(tmp_path, name, lines, encoding="utf-8"):
    path = tmp_path / name
    path.write_bytes("".join(line + "\n" for line in lines).encode(encoding))
    return path


def test_reads_parallel_files(tmp_path):
    corpus = load_parallel_text(write(tmp_path, "a.de", DE), write(tmp_path, "a.en", EN),
                                src_lang="de", tgt_lang="en")
    assert corpus.src == DE and corpus.tgt == EN and len(corpus) == 3
    assert list(iter_parallel_text(tmp_path / "a.de", tmp_path / "a.en"))[1] == (DE[1], EN[1])


def test_crlf_and_byte_order_mark_are_removed(tmp_path):
    src = tmp_path / "b.de"
    src.write_bytes("\ufeffEins\r\nZwei\r\n".encode())
    tgt = write(tmp_path, "b.en", ["One", "Two"])
    assert load_parallel_text(src, tgt).src == ["Eins", "Zwei"]


def test_line_count_mismatch_names_both_files(tmp_path):
    src, tgt = write(tmp_path, "c.de", DE), write(tmp_path, "c.en", EN[:2])
    with pytest.raises(CorpusError, match=r"c\.en has 2 lines but .*c\.de has more"):
        load_parallel_text(src, tgt)


def test_bad_utf8_names_file_and_line(tmp_path):
    src = write(tmp_path, "d.de", DE, encoding="latin-1")  # ä is one byte 0xe4 in Latin-1
    with pytest.raises(CorpusError, match=r"d\.de, line 1: not UTF-8 \(byte 0xe4"):
        load_parallel_text(src, write(tmp_path, "d.en", EN))


def test_missing_and_empty_files(tmp_path):
    with pytest.raises(CorpusError, match="nope.de: no such file"):
        load_parallel_text(tmp_path / "nope.de", write(tmp_path, "e.en", EN))
    (tmp_path / "f.de").write_text("")
    (tmp_path / "f.en").write_text("")
    with pytest.raises(CorpusError, match="are empty"):
        load_parallel_text(tmp_path / "f.de", tmp_path / "f.en")


def test_fixture_corpus_trains_a_tokenizer_from_a_stream_and_batches(tmp_path):
    corpus = load_parallel_text(write(tmp_path, "g.de", DE * 20), write(tmp_path, "g.en", EN * 20))
    streamed = SubwordTokenizer.train((s for pair in iter_parallel_text(tmp_path / "g.de", tmp_path / "g.en")
                                       for s in pair), vocab_size=120, min_frequency=1)
    listed = SubwordTokenizer.train(corpus.src + corpus.tgt, vocab_size=120, min_frequency=1)
    # the same text gives the same vocabulary whether streamed or listed (order aside)
    assert sorted(streamed.backend.get_vocab()) == sorted(listed.backend.get_vocab())
    data = prepare_corpus(listed, corpus, max_tokens=64, seed=0)
    batches = list(data.batches(epoch=0))
    assert sum(b.src.shape[0] for b in batches) == 60
    assert listed.decode(listed.encode(EN[0])) == EN[0]


@pytest.fixture
def files(tmp_path, monkeypatch):
    monkeypatch.setenv("TRANSFORMER_BOOK_CACHE", str(tmp_path / "cache"))  # tokenizer cache
    names = {}
    for split, reps in (("train", 30), ("valid", 2)):
        names[f"{split}_src"] = write(tmp_path, f"{split}.de", DE * reps)
        names[f"{split}_tgt"] = write(tmp_path, f"{split}.en", EN * reps)
    return names


def cli_args(files, run_dir, *extra):
    args = ["train", "--preset", "tiny", "--epochs", "1", "--vocab-size", "120", "--max-tokens", "128",
            "--warmup-steps", "10", "--checkpoint-dir", str(run_dir), "--no-progress"]
    for name, path in files.items():
        args += ["--" + name.replace("_", "-"), str(path)]
    return args + list(extra)


def test_cli_trains_and_resumes_on_your_own_corpus(files, tmp_path, capsys):
    import torch
    from transformer_book.__main__ import main
    from transformer_book.checkpoint import load_checkpoint

    torch.set_num_threads(1)
    run = tmp_path / "run"
    assert main(cli_args(files, run)) == 0
    state = load_checkpoint(run / "last.pt", map_location="cpu")
    assert state["extra"]["corpus"]["train_src"] == str(files["train_src"].resolve())
    assert state["model_config"]["src_vocab_size"] <= 120
    # --resume reads the corpus from the checkpoint; another file is a contradiction
    assert main(["train", "--checkpoint-dir", str(run), "--resume", "--epochs", "2", "--no-progress"]) == 0
    assert load_checkpoint(run / "last.pt", map_location="cpu")["epoch"] == 2
    other = write(tmp_path, "other.de", DE * 30)
    assert main(["train", "--checkpoint-dir", str(run), "--resume", "--epochs", "3",
                 "--train-src", str(other), "--train-tgt", str(files["train_tgt"]),
                 "--valid-src", str(files["valid_src"]), "--valid-tgt", str(files["valid_tgt"])]) == 2
    assert "--train-src" in capsys.readouterr().err


def test_cli_corpus_errors_are_one_line(files, tmp_path, capsys):
    from transformer_book.__main__ import main

    partial = ["train", "--train-src", str(files["train_src"]), "--checkpoint-dir", str(tmp_path / "a")]
    assert main(partial) == 2
    err = capsys.readouterr().err
    assert "--train-tgt, --valid-src, --valid-tgt: missing" in err and len(err.strip().splitlines()) == 1
    short = write(tmp_path, "short.en", EN)
    bad = dict(files, train_tgt=short)
    assert main(cli_args(bad, tmp_path / "b")) == 1
    err = capsys.readouterr().err
    assert "short.en has 3 lines but" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "b" / "last.pt").exists()
