"""The published chapters install the package at the git tag v<version> (tools/install_cell.py);
tools/release_tag.py makes sure that tag exists and holds the package the book was built with, and
the Pages workflow runs it before anything is published."""

from __future__ import annotations

import subprocess
from pathlib import Path

import install_cell
import pytest
import release_tag
import yaml

ROOT = Path(__file__).resolve().parent.parent


def sh(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.org", *args],
                   cwd=repo, check=True, capture_output=True)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "model.py").write_text("x = 1\n")
    (tmp_path / "pyproject.toml").write_text('version = "1.0.0"\n')
    (tmp_path / "chapter.ipynb").write_text("{}\n")
    sh(tmp_path, "init", "-q")
    sh(tmp_path, "add", ".")
    sh(tmp_path, "commit", "-q", "-m", "first")
    return tmp_path


def test_missing_tag_is_an_error_unless_created(repo):
    problem = release_tag.check(repo, "1.0.0")
    assert problem and "no tag v1.0.0" in problem
    assert release_tag.check(repo, "1.0.0", create=True) is None
    assert release_tag.check(repo, "1.0.0") is None


def test_tag_holding_another_package_is_an_error(repo):
    release_tag.check(repo, "1.0.0", create=True)
    (repo / "chapter.ipynb").write_text('{"cells": []}\n')       # a chapter edit needs no release
    sh(repo, "commit", "-q", "-am", "chapter")
    assert release_tag.check(repo, "1.0.0") is None
    (repo / "code" / "model.py").write_text("x = 2\n")            # a package edit does
    sh(repo, "commit", "-q", "-am", "package")
    problem = release_tag.check(repo, "1.0.0", create=True)
    assert problem and "code/model.py" in problem and "bump version" in problem


def test_install_cell_installs_the_tag_release_tag_checks():
    source = install_cell.install_cell_source()
    version = install_cell.book_version()
    assert f'BOOK_VERSION = "{version}"' in source
    assert "@v{BOOK_VERSION}" in source  # the ref pip installs is v + the version
    assert release_tag.tag_name() == f"v{version}"


def test_pages_workflow_tags_the_release_before_publishing():
    wf = yaml.safe_load((ROOT / ".github" / "workflows" / "pages.yml").read_text())
    assert wf["permissions"]["contents"] == "write"  # to push the tag
    steps = wf["jobs"]["build"]["steps"]
    checkout = next(s for s in steps if s.get("uses", "").startswith("actions/checkout"))
    assert checkout["with"]["fetch-depth"] == 0      # the tags are fetched
    names = [s.get("run", s.get("uses", "")) for s in steps]
    tag = next(i for i, n in enumerate(names) if "tools/release_tag.py --create --push" in n)
    upload = next(i for i, n in enumerate(names) if n.startswith("actions/upload-pages-artifact"))
    assert tag < upload   # the deploy job needs this one: no tag, nothing published
