"""Tests of transformer_book.data: local copies, checksums, downloads (faked: no network)."""

import gzip
import hashlib
import os
from pathlib import Path

import pytest
import requests
from transformer_book import data
from transformer_book.data import (
    Multi30kChecksumError,
    Multi30kMissingError,
    load_multi30k,
    multi30k_file,
)

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k"

# A tiny stand-in for the "val" split, with the data's quirks: trailing space, TAB, NBSP, &amp;.
FAKE_DE = ["Ein Hund läuft. ", "Zwei\tMänner\u00a0gehen.", "Ein Kind &amp; ein Ball."]
FAKE_EN = ["A dog runs.", "Two  men walk.", "A child &amp; a ball."]


def _gz_bytes(lines):
    return gzip.compress(("\n".join(lines) + "\n").encode("utf-8"), mtime=0)


@pytest.fixture
def fake_val(monkeypatch, tmp_path):
    """A folder with a fake val split, its checksums and size registered in the module."""
    folder = tmp_path / "copy"
    folder.mkdir()
    blobs = {"val.de.gz": _gz_bytes(FAKE_DE), "val.en.gz": _gz_bytes(FAKE_EN)}
    for name, blob in blobs.items():
        (folder / name).write_bytes(blob)
        monkeypatch.setitem(data.MULTI30K_SHA256, name, hashlib.sha256(blob).hexdigest())
    monkeypatch.setitem(data.MULTI30K_SIZES, "val", len(FAKE_DE))
    monkeypatch.delenv(data.ENV_DATA_DIR, raising=False)
    return folder, blobs


def _no_files_left(folder):
    return [p.name for p in Path(folder).rglob("*") if p.is_file()] == []


def test_local_copy_keeps_raw_lines(fake_val):
    folder, _ = fake_val
    corpus = load_multi30k("val", folder)
    assert corpus.src == FAKE_DE  # trailing space, TAB, NBSP and &amp; all kept
    assert corpus.tgt == FAKE_EN
    assert corpus[1] == (FAKE_DE[1], FAKE_EN[1])
    reverse = load_multi30k("val", folder, src_lang="en", tgt_lang="de")
    assert reverse.src == FAKE_EN
    assert "3 pairs" in repr(corpus)


def test_env_var_selects_the_folder(fake_val, monkeypatch):
    folder, _ = fake_val
    monkeypatch.setenv(data.ENV_DATA_DIR, str(folder))
    assert load_multi30k("val").src == FAKE_DE


def test_missing_file_in_folder_says_what_to_do(fake_val):
    folder, _ = fake_val
    (folder / "val.en.gz").unlink()
    with pytest.raises(Multi30kMissingError, match=r"(?s)val\.en\.gz is missing.*MULTI30K_DIR"):
        load_multi30k("val", folder)


def test_missing_folder(tmp_path):
    with pytest.raises(Multi30kMissingError, match="does not exist"):
        multi30k_file("val.de.gz", tmp_path / "nowhere")


def test_corrupted_local_file_names_file_and_hashes(fake_val):
    folder, blobs = fake_val
    bad = blobs["val.de.gz"][:-5]  # truncated
    (folder / "val.de.gz").write_bytes(bad)
    expected = data.MULTI30K_SHA256["val.de.gz"]
    actual = hashlib.sha256(bad).hexdigest()
    with pytest.raises(Multi30kChecksumError) as info:
        load_multi30k("val", folder)
    message = str(info.value)
    assert "val.de.gz" in message and expected in message and actual in message


def test_unknown_split_and_file():
    with pytest.raises(ValueError, match="unknown Multi30k split"):
        load_multi30k("training")
    with pytest.raises(ValueError, match="unknown Multi30k file"):
        multi30k_file("train.fr.gz")
    with pytest.raises(ValueError, match="'de' and 'en'"):
        load_multi30k("val", src_lang="de", tgt_lang="de")


def _fake_downloader(blobs, calls, corrupt=False):
    def download(url, output_file, pooch):
        name = url.rsplit("/", 1)[1]
        calls.append(url)
        blob = blobs[name]
        Path(output_file).write_bytes(blob[:-3] + b"xyz" if corrupt else blob)

    return download


def test_download_into_cache_then_reuse(fake_val, tmp_path):
    _, blobs = fake_val
    cache = tmp_path / "cache"
    calls = []
    corpus = load_multi30k("val", cache_dir=cache, downloader=_fake_downloader(blobs, calls))
    assert corpus.tgt == FAKE_EN
    assert sorted(p.name for p in cache.iterdir()) == ["val.de.gz", "val.en.gz"]
    assert calls[0] == data.MULTI30K_URL.format(file="val.de.gz")
    assert data.MULTI30K_COMMIT in calls[0]
    load_multi30k("val", cache_dir=cache, downloader=_fake_downloader(blobs, calls))
    assert len(calls) == 2  # the second load reads the verified cache


def test_download_with_wrong_checksum_leaves_nothing(fake_val, tmp_path):
    _, blobs = fake_val
    cache = tmp_path / "cache"
    with pytest.raises(Multi30kChecksumError) as info:
        multi30k_file("val.de.gz", cache_dir=cache, downloader=_fake_downloader(blobs, [], True))
    message = str(info.value)
    assert "val.de.gz" in message and data.MULTI30K_SHA256["val.de.gz"] in message
    assert "got " in message and "a different hash" not in message
    assert _no_files_left(cache)


def test_offline_error_says_how_to_supply_files(fake_val, tmp_path):
    def offline(url, output_file, pooch):
        Path(output_file).write_bytes(b"partial")  # half a file, then the network fails
        raise requests.exceptions.ConnectionError("Name or service not known")

    cache = tmp_path / "cache"
    with pytest.raises(Multi30kMissingError) as info:
        multi30k_file("val.en.gz", cache_dir=cache, downloader=offline)
    message = str(info.value)
    assert "offline" in message and "MULTI30K_DIR" in message
    assert data.MULTI30K_URL.format(file="val.en.gz") in message
    assert _no_files_left(cache)


def _offline_error(tmp_path, exc):
    """The error multi30k_file raises when the downloader fails with ``exc``."""

    def failing(url, output_file, pooch):
        raise exc

    with pytest.raises(data.Multi30kError) as info:
        multi30k_file("val.en.gz", cache_dir=tmp_path / "cache", downloader=failing)
    return info.value


def test_offline_error_is_one_short_message_for_notebooks(fake_val, tmp_path):
    err = _offline_error(tmp_path, requests.exceptions.ConnectionError("Name or service not known"))
    message = str(err)
    assert isinstance(err, Multi30kMissingError)
    # the cause, named in words, and the three ways to point at a local copy
    assert message.startswith("could not download val.en.gz: no connection to raw.githubusercontent.com")
    assert 'os.environ["MULTI30K_DIR"] = "/path/to/multi30k"' in message  # notebook / Python
    assert "export MULTI30K_DIR=/path/to/multi30k" in message  # shell
    assert "python -m transformer_book train --data-dir /path/to/multi30k" in message  # CLI
    # no chained traceback: requests' urllib3 chain is suppressed (still kept as __context__)
    assert err.__cause__ is None and err.__suppress_context__
    assert isinstance(err.__context__, requests.exceptions.ConnectionError)
    # Jupyter/IPython show _render_traceback_() instead of the traceback: one short message
    lines = err._render_traceback_()
    assert lines == [f"Multi30kMissingError: {message}"] and len(message.splitlines()) <= 8


def test_download_errors_name_their_cause(fake_val, tmp_path):
    timeout = _offline_error(tmp_path, requests.exceptions.ReadTimeout("read timed out"))
    assert "did not answer in time" in str(timeout)
    response = requests.Response()
    response.status_code = 404
    http = _offline_error(tmp_path, requests.exceptions.HTTPError("404", response=response))
    assert "answered HTTP 404" in str(http)
    # an OSError that is not a network error: the cache folder cannot be written
    readonly = _offline_error(tmp_path, PermissionError(13, "Permission denied"))
    assert "could not write val.en.gz into the cache folder" in str(readonly)
    assert "Permission denied" in str(readonly) and "TRANSFORMER_BOOK_CACHE" in str(readonly)
    for err in (timeout, http, readonly):
        assert err.__cause__ is None and err.__suppress_context__ and "MULTI30K_DIR" in str(err)


def test_checksum_error_of_a_download_has_no_chain(fake_val, tmp_path):
    _, blobs = fake_val
    with pytest.raises(Multi30kChecksumError) as info:
        multi30k_file("val.de.gz", cache_dir=tmp_path / "c", downloader=_fake_downloader(blobs, [], True))
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_interrupted_download_leaves_nothing(fake_val, tmp_path):
    def interrupted(url, output_file, pooch):
        Path(output_file).write_bytes(b"partial")
        raise KeyboardInterrupt

    cache = tmp_path / "cache"
    with pytest.raises(KeyboardInterrupt):
        multi30k_file("val.en.gz", cache_dir=cache, downloader=interrupted)
    assert _no_files_left(cache)


def test_cache_dir_from_env(monkeypatch, tmp_path):
    monkeypatch.setenv(data.ENV_CACHE_DIR, str(tmp_path))
    assert data.default_cache_dir() == tmp_path / "multi30k"


def _real_copy():
    folder = os.environ.get(data.ENV_DATA_DIR) or (str(SHARED) if SHARED.is_dir() else None)
    if folder is None:
        pytest.skip("no local Multi30k copy (set MULTI30K_DIR)")
    return folder


def test_real_copy_sizes_and_quirks():
    folder = _real_copy()
    for split, size in [("train", 29000), ("val", 1014), ("test_2016_flickr", 1000)]:
        corpus = load_multi30k(split, folder)
        assert len(corpus.src) == len(corpus.tgt) == size
    train = load_multi30k("train", folder)
    assert sum(line.endswith(" ") for line in train.src) == 40  # documented quirk, kept
    assert "\t" in train.src[7365]  # line 7366 (1-based) holds a TAB
