"""The package as a user installs it: `python -m build` makes a wheel whose `transformer-book`
command works in a fresh virtual environment, with the version defined in pyproject.toml only."""

from __future__ import annotations

import re
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
VERSION = re.search(r'^version = "(.+)"', (ROOT / "pyproject.toml").read_text(), re.M).group(1)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    # --no-isolation: build with the setuptools already installed (no network needed)
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out),
                    str(ROOT)], check=True, capture_output=True, text=True)
    wheels = list(out.glob("transformer_book-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def test_wheel_holds_the_package_and_its_lab_and_only_them(wheel):
    assert wheel.name.startswith(f"transformer_book-{VERSION}-")
    names = zipfile.ZipFile(wheel).namelist()
    assert "transformer_book/__init__.py" in names and "transformer_book/__main__.py" in names
    assert "transformer_lab/__init__.py" in names  # chapters 9-11 import the measuring lab
    top = {n.split("/")[0] for n in names}
    assert top == {"transformer_book", "transformer_lab", f"transformer_book-{VERSION}.dist-info"}, top


def test_command_works_in_a_fresh_venv(wheel, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet",
                    "--no-deps", "--no-index", str(wheel)], check=True)
    # The heavy dependencies (torch, ...) come from this environment's site-packages through a
    # .pth path entry; the editable install of this checkout is not visible there (its own .pth
    # hook is not processed), so the package imported is the wheel's copy.
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    Path(site, "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    where = subprocess.run([str(python), "-c", "import transformer_book as t; print(t.__file__, t.__version__)"],
                           check=True, capture_output=True, text=True).stdout.split()
    assert where[0].startswith(str(venv)), where
    assert where[1] == VERSION
    result = subprocess.run([str(venv / "bin" / "transformer-book"), "--help"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "train" in result.stdout and "translate" in result.stdout
