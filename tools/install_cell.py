"""The first code cell of every chapter: install the book's package at the release the chapter
was written for, and nothing else.

One source of truth: the version in pyproject.toml and the repository URL in _config.yml.
`python tools/install_cell.py --write` rewrites the first code cell of every chapter from them
(run it after bumping the version); tools/check_notebooks.py fails when a chapter's cell differs.

The cell compares the installed package's version with the one the chapter asks for, and when it
is missing or different installs exactly that release (the git tag v<version>) from the
repository. It never reinstalls torch: it stops with a message if the installed torch is older
than the book supports, and pip leaves a torch that satisfies the requirement alone.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

TEMPLATE = '''\
# Setup: the book's package at the release this chapter was written for. Colab (or any
# environment without it, or with another release) installs it from the repository; torch and
# the rest of Colab's image are never reinstalled.
import importlib.metadata
import subprocess
import sys

BOOK_VERSION = "{version}"
try:
    installed = importlib.metadata.version("transformer-book")
except importlib.metadata.PackageNotFoundError:
    installed = None
if installed != BOOK_VERSION:
    import torch  # the book needs torch {torch_floor} or later; pip must not replace Colab's

    if tuple(int(p) for p in torch.__version__.split(".")[:2]) < {torch_floor_tuple}:
        raise SystemExit(f"torch {{torch.__version__}} is too old for this book: install torch>={torch_floor}")
    print(f"installing transformer-book {{BOOK_VERSION}} (found {{installed}})")
    subprocess.check_call([sys.executable, "-m", "pip", "install", "--quiet",
                           f"transformer-book @ git+{url}@v{{BOOK_VERSION}}"])
    if "transformer_book" in sys.modules:
        raise SystemExit("transformer-book was replaced: restart the runtime, then run all cells again")'''


def _pyproject() -> str:
    # Read as text (tomllib is Python 3.11+; the book supports 3.10): the two values below have
    # one fixed form in pyproject.toml.
    return (ROOT / "pyproject.toml").read_text()


def book_version() -> str:
    match = re.search(r'^version\s*=\s*"([^"]+)"', _pyproject(), re.MULTILINE)
    if not match:
        raise SystemExit('pyproject.toml: no version = "X.Y.Z" line')
    return match.group(1)


def torch_floor() -> str:
    match = re.search(r'^\s*"torch\s*>=\s*([0-9.]+)"', _pyproject(), re.MULTILINE)
    if not match:
        raise SystemExit("pyproject.toml: no 'torch>=X.Y' dependency")
    return match.group(1)


def repository_url() -> str:
    text = (ROOT / "_config.yml").read_text()
    match = re.search(r"^repository:\s*\n\s+url:\s*(\S+)", text, re.MULTILINE)
    if not match:
        raise SystemExit("_config.yml has no repository.url")
    return match.group(1)


def install_cell_source() -> str:
    floor = torch_floor()
    floor_tuple = tuple(int(p) for p in floor.split(".")[:2])
    return TEMPLATE.format(version=book_version(), url=repository_url(), torch_floor=floor,
                           torch_floor_tuple=floor_tuple)


def first_code_cell(cells: list[dict]) -> dict:
    return next(c for c in cells if c["cell_type"] == "code" and "".join(c["source"]).strip())


def write(nb_path: Path) -> bool:
    import nbformat

    nb = nbformat.read(nb_path, as_version=4)
    cell = first_code_cell(nb.cells)
    source = install_cell_source()
    if cell.source == source:
        return False
    cell.source = source
    tags = cell.metadata.setdefault("tags", [])
    if "hide-input" not in tags:  # set-up, not the lesson: collapsed in the HTML
        tags.append("hide-input")
    nbformat.write(nb, nb_path)
    return True


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        print(install_cell_source())
        raise SystemExit(0)
    for nb in sorted((ROOT / "chapters").glob("*.ipynb")):
        if write(nb):
            print(f"rewrote the install cell of {nb.relative_to(ROOT)}")
