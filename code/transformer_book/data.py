"""Multi30k task 1 (German-English image descriptions, Elliott et al., 2016): the data the book
trains on instead of the paper's WMT 2014 (Sec. 5.1); 29,000 training pairs, 1,014 validation.

The files come from a local folder (``data_dir``, or ``$MULTI30K_DIR``), else from the user
cache (``$TRANSFORMER_BOOK_CACHE``, or the OS's), downloaded on first use from a pinned commit
of https://github.com/multi30k/dataset; every file is checked against the SHA-256 sums below
before a line is read. Lines are kept raw (only the line end removed): BLEU must score against
the unmodified references, and the tokenizer normalises whitespace itself
(quirks: ``shared/data/multi30k/README.md``).
"""

from __future__ import annotations

import gzip
import hashlib
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from transformer_book.files import utf8_lines

#: Pinned commit of https://github.com/multi30k/dataset; the raw files have not changed since 2020.
MULTI30K_COMMIT = "a3d2e0d26b56f3846f66a952536ffed4e401d05a"
#: Where the gzipped files of task 1 are served; ``<file>`` is e.g. ``train.de.gz``.
MULTI30K_URL = (
    f"https://raw.githubusercontent.com/multi30k/dataset/{MULTI30K_COMMIT}/data/task1/raw/{{file}}"
)

#: SHA-256 of every gzipped file (copied from shared/data/multi30k/SHA256SUMS).
MULTI30K_SHA256 = {
    "train.de.gz": "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6",
    "train.en.gz": "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f",
    "val.de.gz": "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a",
    "val.en.gz": "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28",
    "test_2016_flickr.de.gz": "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8",
    "test_2016_flickr.en.gz": "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9",
    "test_2017_flickr.de.gz": "a2c89666db00c495cd8513b9d708d5a3acc205d7de312ef2bf5fb7ebc1540aee",
    "test_2017_flickr.en.gz": "76a444ee25172e72695cddb13ae4a3bda59430617be88e0bb46b60504f054074",
    "test_2018_flickr.de.gz": "ddd0130c7d97482dc5197a02141dae8dd79f20f03586c480d675c09a32daf608",
    "test_2018_flickr.en.gz": "ef4f4844037d4c5dea75c9a8ed5fd78905967a26f67c255e230cc9780032654d",
    "test_2017_mscoco.de.gz": "799e4854c25d601cb6cb6be29eabe5667734c61ace2f495e03e429031a0bc338",
    "test_2017_mscoco.en.gz": "aab300bfb4427697987e02cd0aacd44bfe8aa50456231b6474c08038bbed2b58",
}

#: Number of sentence pairs in each split (checked when a split is read).
MULTI30K_SIZES = {
    "train": 29000,
    "val": 1014,
    "test_2016_flickr": 1000,
    "test_2017_flickr": 1000,
    "test_2018_flickr": 1071,
    "test_2017_mscoco": 461,
}

LANGUAGES = ("de", "en")
ENV_DATA_DIR = "MULTI30K_DIR"
ENV_CACHE_DIR = "TRANSFORMER_BOOK_CACHE"

#: A pooch downloader: ``downloader(url, output_file, pooch)`` writes the file at ``url``.
Downloader = Callable[..., None]


class Multi30kError(RuntimeError):
    """Base class of the errors raised while locating or reading Multi30k; its message says
    what to do, and a notebook shows it without a traceback (:meth:`_render_traceback_`)."""

    def _render_traceback_(self) -> list[str]:
        """IPython's hook: the lines a notebook shows instead of the traceback."""
        return [f"{type(self).__name__}: {self}"]


class Multi30kMissingError(Multi30kError, FileNotFoundError):
    """A file is not in the local folder, or cannot be downloaded (offline)."""


class Multi30kChecksumError(Multi30kError, ValueError):
    """A file's SHA-256 differs from the pinned one (corrupted, truncated or a different version)."""


class CorpusError(ValueError):
    """A corpus other than Multi30k (:mod:`transformer_book.corpus`,
    :mod:`transformer_book.hf_dataset`) cannot be used; the message says why."""


@dataclass(frozen=True)
class ParallelCorpus:
    """One split of a parallel corpus: ``src[i]`` translates to ``tgt[i]``.

    Attributes:
        name: split name, e.g. ``"train"`` or ``"test_2016_flickr"``.
        src_lang, tgt_lang: language codes, ``"de"`` and ``"en"`` for the book's direction.
        src, tgt: the raw lines (only the final ``"\\n"`` removed), same length.
    """

    name: str
    src_lang: str
    tgt_lang: str
    src: list[str]
    tgt: list[str]

    def __len__(self) -> int:
        return len(self.src)

    def __getitem__(self, i: int) -> tuple[str, str]:
        return self.src[i], self.tgt[i]

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return zip(self.src, self.tgt, strict=True)

    def __repr__(self) -> str:  # the default would print 29,000 sentences
        return (
            f"ParallelCorpus(name={self.name!r}, {self.src_lang}->{self.tgt_lang}, "
            f"{len(self)} pairs)"
        )


def sha256_file(path: str | os.PathLike) -> str:
    """SHA-256 of a file's bytes, as lowercase hex."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def default_cache_dir() -> Path:
    """The folder downloads go to: ``$TRANSFORMER_BOOK_CACHE/multi30k`` or the OS user cache."""
    root = os.environ.get(ENV_CACHE_DIR)
    if root:
        return Path(root).expanduser() / "multi30k"
    # The same folder as pooch.os_cache("transformer_book"), without importing pooch (which
    # imports tqdm.auto and, in a notebook without ipywidgets, prints a warning).
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("transformer_book")) / "multi30k"


def _how_to_supply(filename: str) -> str:
    """What to do instead of downloading: the three ways to point at a local copy."""
    url = MULTI30K_URL.format(file=filename)
    return (
        "To use a local copy, put the gzipped Multi30k task-1 files (such as "
        f"{url}) in a folder and point the book at it:\n"
        f'  - in a notebook or Python session, run  os.environ["{ENV_DATA_DIR}"] = '
        '"/path/to/multi30k"  (after `import os`) before the cell that loads the data;\n'
        f"  - in a shell, before starting Jupyter or Python:  export {ENV_DATA_DIR}=/path/to/multi30k\n"
        "  - on the command line:  python -m transformer_book train --data-dir /path/to/multi30k\n"
        "    (or call load_multi30k(split, data_dir=...) in your own code)."
    )


def _check_filename(filename: str) -> str:
    if filename not in MULTI30K_SHA256:
        raise ValueError(
            f"unknown Multi30k file {filename!r}; expected one of {sorted(MULTI30K_SHA256)}"
        )
    return MULTI30K_SHA256[filename]


def _verify(path: Path, expected: str) -> None:
    actual = sha256_file(path)
    if actual != expected:
        raise Multi30kChecksumError(
            f"{path} has the wrong SHA-256 checksum: expected {expected}, got {actual}. The file "
            "is corrupted, truncated or a different version of Multi30k; replace it with the "
            f"file from {MULTI30K_URL.format(file=path.name)} (or delete it to download again)."
        )


def _download(filename: str, cache_dir: Path, downloader: Downloader | None) -> Path:
    """Fetch one file into ``cache_dir`` with pooch, which streams into a temporary file, checks
    the hash, then moves it into place: a failed download never leaves a complete-looking file."""
    import pooch  # lazy: only downloads need it
    import requests

    expected = MULTI30K_SHA256[filename]
    url = MULTI30K_URL.format(file=filename)
    if downloader is None:
        # No progress bar: the files are small (each under 1 MB), and in a notebook without
        # ipywidgets tqdm.auto would print a warning first.
        downloader = pooch.HTTPDownloader(progressbar=False, timeout=30)
    try:
        path = pooch.retrieve(
            url,
            known_hash=f"sha256:{expected}",
            fname=filename,
            path=cache_dir,
            downloader=downloader,
        )
    except ValueError as err:
        # pooch has already deleted the temporary file; say which file and which hashes.
        match = re.search(r"but got ([0-9a-f]{64})", str(err))
        actual = match.group(1) if match else "a different hash"
        raise Multi30kChecksumError(
            f"downloaded {filename} from {url} has the wrong SHA-256 checksum: expected "
            f"{expected}, got {actual}. The partial download was deleted; nothing was cached. "
            "Try again.\n" + _how_to_supply(filename)
        ) from None  # the message says it all; pooch's own error would only repeat it
    except requests.exceptions.RequestException as err:  # (a subclass of OSError: test it first)
        raise Multi30kMissingError(
            f"could not download {filename}: {_network_cause(err)}.\n" + _how_to_supply(filename)
        ) from None  # requests' chain of urllib3 errors is long and says no more than this
    except OSError as err:
        raise Multi30kMissingError(
            f"could not write {filename} into the cache folder {cache_dir}: "
            f"{err.strerror or type(err).__name__}. Set {ENV_CACHE_DIR} to a writable folder, or "
            "use a local copy.\n" + _how_to_supply(filename)
        ) from None
    return Path(path)


def _network_cause(err: Exception) -> str:
    """The cause of a failed download in a few words (the caller names the file and the fix)."""
    import requests

    host = MULTI30K_URL.split("/")[2]
    if isinstance(err, requests.exceptions.Timeout):
        return f"{host} did not answer in time ({type(err).__name__})"
    if isinstance(err, requests.exceptions.ConnectionError):
        return f"no connection to {host}: offline, or the host is blocked ({type(err).__name__})"
    if isinstance(err, requests.exceptions.HTTPError) and err.response is not None:
        return f"{host} answered HTTP {err.response.status_code} ({type(err).__name__})"
    return f"{type(err).__name__} while fetching {MULTI30K_URL.format(file='...')}"


def multi30k_file(
    filename: str,
    data_dir: str | os.PathLike | None = None,
    *,
    cache_dir: str | os.PathLike | None = None,
    downloader: Downloader | None = None,
) -> Path:
    """Path of one verified Multi30k file, downloading it into the cache if needed.

    Args:
        filename: a file of task 1, e.g. ``"train.de.gz"`` (see ``MULTI30K_SHA256``).
        data_dir: folder holding a local copy (default ``$MULTI30K_DIR``; neither: the cache).
        cache_dir: download cache; defaults to :func:`default_cache_dir`.
        downloader: a pooch downloader (tests pass a fake one; default: HTTPS, 30 s timeout).

    Raises:
        Multi30kMissingError: not in ``data_dir``, or the download failed.
        Multi30kChecksumError: the file has the wrong checksum.
    """
    expected = _check_filename(filename)
    if data_dir is None:
        data_dir = os.environ.get(ENV_DATA_DIR) or None
    if data_dir is not None:
        folder = Path(data_dir).expanduser()
        if not folder.is_dir():
            raise Multi30kMissingError(
                f"Multi30k folder {folder} does not exist (given as data_dir or ${ENV_DATA_DIR}).\n"
                + _how_to_supply(filename)
            )
        path = folder / filename
        if not path.is_file():
            raise Multi30kMissingError(
                f"{filename} is missing from the Multi30k folder {folder}.\n" + _how_to_supply(filename)
            )
        _verify(path, expected)
        return path
    cache = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    return _download(filename, cache, downloader)


def read_lines(path: str | os.PathLike) -> list[str]:
    """The lines of a gzipped UTF-8 text file, each without its line end (nothing else is
    stripped: trailing spaces, tabs and no-break spaces are kept)."""
    with gzip.open(path, "rb") as f:
        return list(utf8_lines(f))


def load_multi30k(
    split: str = "train",
    data_dir: str | os.PathLike | None = None,
    *,
    src_lang: str = "de",
    tgt_lang: str = "en",
    cache_dir: str | os.PathLike | None = None,
    downloader: Downloader | None = None,
) -> ParallelCorpus:
    """Load one split of Multi30k task 1 as raw sentence pairs (German -> English by default).

    Args:
        split: ``"train"``, ``"val"``, ``"test_2016_flickr"`` ... (``MULTI30K_SIZES``).
        src_lang, tgt_lang: ``"de"`` and ``"en"`` in either order.
        data_dir, cache_dir, downloader: see :func:`multi30k_file`.

    Raises:
        ValueError: unknown split or language.
        Multi30kError: as :func:`multi30k_file`, or a side with an unexpected number of lines.
    """
    if split not in MULTI30K_SIZES:
        raise ValueError(f"unknown Multi30k split {split!r}; expected one of {list(MULTI30K_SIZES)}")
    if {src_lang, tgt_lang} != set(LANGUAGES):
        raise ValueError(f"src_lang/tgt_lang must be 'de' and 'en' (in either order), got "
                         f"{src_lang!r}/{tgt_lang!r}")
    sides = {}
    for lang in (src_lang, tgt_lang):
        filename = f"{split}.{lang}.gz"
        path = multi30k_file(filename, data_dir, cache_dir=cache_dir, downloader=downloader)
        sides[lang] = read_lines(path)
        if len(sides[lang]) != MULTI30K_SIZES[split]:
            raise Multi30kError(
                f"{path} has {len(sides[lang])} lines, expected {MULTI30K_SIZES[split]}"
            )
    return ParallelCorpus(split, src_lang, tgt_lang, sides[src_lang], sides[tgt_lang])
