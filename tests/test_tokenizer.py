"""Tests of transformer_book.tokenizer: special ids, determinism, round trip, cache."""

import os
from pathlib import Path

import pytest
from transformer_book.data import ParallelCorpus, load_multi30k
from transformer_book.tokenizer import SubwordTokenizer, cache_key, load_or_train_tokenizer

DE = ["Ein Hund läuft über die Wiese.", "Zwei Männer spielen Fußball.", "Eine Frau liest ein Buch."]
EN = ["A dog runs across the meadow.", "Two men play soccer.", "A woman reads a book."]
SMALL = ParallelCorpus("toy", "de", "en", DE * 3, EN * 3)


@pytest.fixture(scope="module")
def toy():
    return SubwordTokenizer.train(SMALL.src + SMALL.tgt, vocab_size=120, min_frequency=1)


def test_special_ids(toy):
    assert (toy.pad_id, toy.bos_id, toy.eos_id, toy.unk_id) == (0, 1, 2, 3)
    assert [toy.backend.id_to_token(i) for i in range(4)] == ["<pad>", "<bos>", "<eos>", "<unk>"]
    assert all(i > 3 for i in toy.encode(DE[0]))  # encode adds no special token


def test_training_is_deterministic(toy):
    again = SubwordTokenizer.train(SMALL.src + SMALL.tgt, vocab_size=120, min_frequency=1)
    assert again.to_str() == toy.to_str()


def test_round_trip_normalises_only_whitespace(toy):
    text = "  Zwei\tMänner\u00a0spielen  Fußball. "
    assert toy.decode(toy.encode(text)) == "Zwei Männer spielen Fußball."
    for line in DE + EN:
        assert toy.decode(toy.encode(line)) == line
    assert toy.tokens("Buch.")[-1] == "."  # punctuation is its own token


def test_decode_stops_at_eos_and_drops_specials(toy):
    ids = toy.encode(EN[1])
    assert toy.decode([toy.bos_id] + ids + [toy.eos_id] + ids + [toy.pad_id]) == EN[1]
    assert toy.decode_batch([ids + [toy.eos_id, toy.pad_id], [toy.bos_id]]) == [EN[1], ""]
    assert toy.encode_batch(EN) == [toy.encode(x) for x in EN]


def test_unseen_character_becomes_unk(toy):
    assert toy.unk_id in toy.encode("Ω")


def test_wrong_special_ids_rejected():
    import tokenizers

    bare = tokenizers.Tokenizer(tokenizers.models.BPE())
    with pytest.raises(ValueError, match="<pad> must have id 0"):
        SubwordTokenizer(bare)
    with pytest.raises(ValueError, match="vocab_size"):
        SubwordTokenizer.train(["a"], vocab_size=4)


def test_cache_is_reused_and_keyed(tmp_path):
    first = load_or_train_tokenizer(SMALL, vocab_size=120, min_frequency=1, cache_dir=tmp_path)
    files = list(tmp_path.iterdir())
    assert len(files) == 1 and files[0].suffix == ".json"
    stamp = files[0].stat().st_mtime_ns
    second = load_or_train_tokenizer(SMALL, vocab_size=120, min_frequency=1, cache_dir=tmp_path)
    assert second.to_str() == first.to_str()
    assert files[0].stat().st_mtime_ns == stamp  # read, not retrained
    texts = SMALL.src + SMALL.tgt
    assert cache_key(texts, 120, 1) != cache_key(texts, 121, 1)
    assert cache_key(texts, 120, 1) != cache_key(texts[:-1] + ["x"], 120, 1)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temp left


def test_save_load(toy, tmp_path):
    toy.save(tmp_path / "tok.json")
    assert SubwordTokenizer.load(tmp_path / "tok.json").to_str() == toy.to_str()
    assert SubwordTokenizer.from_str(toy.to_str()).encode(DE[0]) == toy.encode(DE[0])


SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k"


def test_multi30k_round_trip_on_val(tmp_path_factory):
    folder = os.environ.get("MULTI30K_DIR") or (str(SHARED) if SHARED.is_dir() else None)
    if folder is None:
        pytest.skip("no local Multi30k copy (set MULTI30K_DIR)")
    # a small vocabulary keeps the test fast; the round trip does not depend on its size
    tok = load_or_train_tokenizer(vocab_size=2000, cache_dir=tmp_path_factory.mktemp("tok"),
                                  data_dir=folder)
    val = load_multi30k("val", folder)
    for lines in (val.src, val.tgt):
        decoded = tok.decode_batch(tok.encode_batch(lines))
        assert decoded == [" ".join(line.split()) for line in lines]


def test_cached_tokenizer_honours_the_umask(tmp_path):
    import os

    tok = SubwordTokenizer.train(["ein Hund", "a dog"] * 3, vocab_size=30, min_frequency=1)
    old = os.umask(0o022)
    try:
        tok.save(tmp_path / "t.json")
    finally:
        os.umask(old)
    assert (tmp_path / "t.json").stat().st_mode & 0o777 == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["t.json"]  # no temporary file left
    assert SubwordTokenizer.load(tmp_path / "t.json").to_str() == tok.to_str()
