"""A Hugging Face translation dataset as the corpus (the optional `datasets` extra), offline: local
dataset folders stand in for the Hub (`save_to_disk` and plain JSON-lines files), and a missing
`datasets` package gives one line saying what to install."""

from __future__ import annotations

import json
import os
import sys
import tempfile

import pytest

# never the network, and no Hugging Face cache outside the test's own folder
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HOME", tempfile.mkdtemp(prefix="hf-home-"))

from transformer_book.corpus import CorpusError, hf_translation_pairs  # noqa: E402

DE = ["Ein Hund läuft im Schnee.", "Zwei Kinder spielen.", "Eine Frau liest ein Buch."]
EN = ["A dog runs in the snow.", "Two children are playing.", "A woman reads a book."]


def rows(reps):
    return [{"translation": {"de": d, "en": e}} for d, e in zip(DE * reps, EN * reps, strict=True)]


@pytest.fixture
def saved(tmp_path):
    """A DatasetDict in the layout of wmt14 de-en, written with save_to_disk."""
    datasets = pytest.importorskip("datasets")
    folder = tmp_path / "wmt-toy"
    datasets.DatasetDict({"train": datasets.Dataset.from_list(rows(30)),
                          "validation": datasets.Dataset.from_list(rows(2))}).save_to_disk(folder)
    return folder


def test_missing_datasets_package_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)  # import datasets -> ImportError
    with pytest.raises(CorpusError, match=r"pip install 'transformer-book\[hf\]'"):
        hf_translation_pairs("wmt14", "de-en")


def test_saved_dataset_streams_translation_pairs(saved):
    pairs = hf_translation_pairs(str(saved), "de-en", split="validation")
    assert (pairs.src_lang, pairs.tgt_lang) == ("de", "en")
    assert list(pairs) == list(zip(DE * 2, EN * 2, strict=True))
    assert list(pairs) == list(pairs)  # every pass reads afresh
    reverse = hf_translation_pairs(str(saved), split="validation", src_lang="en", tgt_lang="de")
    assert next(iter(reverse)) == (EN[0], DE[0])


def test_saved_dataset_errors_are_one_line(saved):
    with pytest.raises(CorpusError, match=r"no split 'test' \(it has train, validation\)"):
        hf_translation_pairs(str(saved), "de-en", split="test")  # at once, before any pass
    with pytest.raises(CorpusError, match=r"translations are in \['de', 'en'\], not both 'fr'"):
        list(hf_translation_pairs(str(saved), "fr-en"))
    with pytest.raises(CorpusError, match="give the source and target language"):
        hf_translation_pairs(str(saved), None)


def test_folder_of_jsonl_files_streams_with_load_dataset(tmp_path):
    pytest.importorskip("datasets")
    folder = tmp_path / "jsonl"
    folder.mkdir()
    for split, reps in (("train", 3), ("validation", 1)):  # flat columns, not "translation"
        lines = [json.dumps({"de": d, "en": e}) for d, e in zip(DE * reps, EN * reps, strict=True)]
        (folder / f"{split}.jsonl").write_text("\n".join(lines) + "\n")
    pairs = hf_translation_pairs(str(folder), split="train", src_lang="de", tgt_lang="en")
    assert list(pairs) == list(zip(DE * 3, EN * 3, strict=True))
    with pytest.raises(CorpusError, match=r"no 'translation' column and no columns 'fr'"):
        list(hf_translation_pairs(str(folder), split="train", src_lang="fr", tgt_lang="en"))
    with pytest.raises(CorpusError, match=r"nope.*cannot be loaded"):
        hf_translation_pairs(str(tmp_path / "nope"), "de-en")


def test_cli_trains_and_resumes_on_a_hugging_face_dataset(saved, tmp_path, monkeypatch, capsys):
    import torch
    from transformer_book.__main__ import main
    from transformer_book.checkpoint import load_checkpoint

    torch.set_num_threads(1)
    monkeypatch.setenv("TRANSFORMER_BOOK_CACHE", str(tmp_path / "cache"))
    run = tmp_path / "run"
    args = ["train", "--preset", "tiny", "--epochs", "1", "--vocab-size", "120", "--max-tokens",
            "128", "--warmup-steps", "10", "--checkpoint-dir", str(run), "--no-progress",
            "--hf-dataset", str(saved), "--hf-config", "de-en"]
    assert main(args) == 0, capsys.readouterr().err
    assert "90 training pairs" in capsys.readouterr().err
    corpus = load_checkpoint(run / "last.pt", map_location="cpu")["extra"]["corpus"]
    assert corpus == {"hf_dataset": str(saved.resolve()), "hf_config": "de-en", "hf_src": "de",
                      "hf_tgt": "en", "hf_split": "train", "hf_valid_split": "validation"}
    # --resume reads the dataset from the checkpoint; another split is a contradiction
    assert main(["train", "--checkpoint-dir", str(run), "--resume", "--epochs", "2",
                 "--no-progress"]) == 0
    assert load_checkpoint(run / "last.pt", map_location="cpu")["epoch"] == 2
    capsys.readouterr()
    assert main(["train", "--checkpoint-dir", str(run), "--resume", "--epochs", "3",
                 "--hf-split", "validation"]) == 2
    assert "--hf-split validation (the run has train)" in capsys.readouterr().err


def test_cli_hugging_face_errors_are_one_line(saved, tmp_path, monkeypatch, capsys):
    from transformer_book.__main__ import main

    base = ["train", "--checkpoint-dir", str(tmp_path / "a"), "--preset", "tiny"]
    assert main(base + ["--hf-dataset", str(saved), "--train-src", str(saved)]) == 2
    assert "--hf-src/--hf-tgt: give the source and target language (no config names them" in \
        capsys.readouterr().err
    assert main(base + ["--hf-dataset", str(saved), "--hf-config", "de-en", "--train-src",
                        str(saved)]) == 2
    assert "not both" in capsys.readouterr().err
    assert main(base + ["--hf-config", "de-en"]) == 2
    assert "--hf-config: only with --hf-dataset" in capsys.readouterr().err
    assert main(base + ["--hf-dataset", str(saved), "--hf-config", "de-en",
                        "--hf-valid-split", "test"]) == 1
    err = capsys.readouterr().err  # before the tokenizer is trained (no warning about it)
    assert "no split 'test'" in err and len(err.strip().splitlines()) == 1
    monkeypatch.setitem(sys.modules, "datasets", None)
    assert main(base + ["--hf-dataset", "wmt14", "--hf-config", "de-en"]) == 1
    err = capsys.readouterr().err
    assert "pip install 'transformer-book[hf]'" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "a" / "last.pt").exists()


def test_the_hf_extra_and_the_pin_agree():
    """pyproject's [hf] extra names datasets with a floor that requirements.txt's pin meets."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    floor = re.search(r'^hf = \["datasets>=([\d.]+)"\]', (root / "pyproject.toml").read_text(),
                      re.M)
    pin = re.search(r"^datasets==([\d.]+)$", (root / "requirements.txt").read_text(), re.M)
    assert floor and pin

    def version(text):
        return tuple(int(p) for p in text.split("."))

    assert version(pin.group(1)) >= version(floor.group(1))
