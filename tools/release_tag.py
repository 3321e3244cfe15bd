"""The release the published chapters install: the git tag v<version> of pyproject.toml's version.

Every chapter's first cell installs `transformer-book @ git+<repository>@v<version>` (see
tools/install_cell.py). A book published without that tag sends every Colab reader to a pip
error, and a tag that holds another package than the one the book was built with sends them to
code that does not match the chapter. The Pages workflow runs this script before it builds:

    python tools/release_tag.py --create --push   # the workflow: tag HEAD and push, if missing
    python tools/release_tag.py                   # check only (exit 1 with the reason)

It passes when the tag exists and the package the install cell installs (code/ and
pyproject.toml) is the same at the tag as at HEAD. With --create a missing tag is made on HEAD,
and with --push that new tag is pushed to origin. It fails when the tag exists but the package changed since: bump
`version` in pyproject.toml, run `python tools/install_cell.py --write`, and commit.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from install_cell import ROOT, book_version

# What `pip install git+...@tag` builds: the package's source and its metadata.
PACKAGE_PATHS = ("code", "pyproject.toml")


def git(*args: str, repo: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True)


def tag_name(version: str | None = None) -> str:
    return f"v{version or book_version()}"


def check(repo: Path = ROOT, version: str | None = None, create: bool = False,
          push: bool = False) -> str | None:
    """None when the release tag matches HEAD's package; else the reason, in one line."""
    tag = tag_name(version)
    if git("rev-parse", "--verify", "--quiet", f"refs/tags/{tag}", repo=repo).returncode != 0:
        if not create:
            return (f"the install cell asks for {tag}, and the repository has no tag {tag}: "
                    f"run `git tag {tag} && git push origin {tag}` (or this script with --create)")
        made = git("tag", tag, "HEAD", repo=repo)  # lightweight: needs no committer identity
        if made.returncode != 0:
            return f"could not create tag {tag}: {made.stderr.strip()}"
        if push:
            pushed = git("push", "origin", f"refs/tags/{tag}", repo=repo)
            if pushed.returncode != 0:
                git("tag", "-d", tag, repo=repo)
                return f"could not push tag {tag}: {pushed.stderr.strip()}"
        print(f"created tag {tag} on HEAD" + (" and pushed it" if push else ""))
        return None
    changed = git("diff", "--name-only", f"{tag}^{{commit}}", "HEAD", "--", *PACKAGE_PATHS, repo=repo)
    if changed.returncode != 0:
        return f"could not compare {tag} with HEAD: {changed.stderr.strip()}"
    if changed.stdout.strip():
        files = ", ".join(changed.stdout.split()[:5])
        return (f"the package changed since {tag} ({files}), but the chapters still install {tag}: "
                "bump version in pyproject.toml, run `python tools/install_cell.py --write`, commit")
    return None


def main(argv: list[str]) -> int:
    if argv not in ([], ["--create"], ["--create", "--push"]):
        print(__doc__)
        return 2
    problem = check(create="--create" in argv, push="--push" in argv)
    if problem:
        print(f"release tag: {problem}", file=sys.stderr)
        return 1
    print(f"release tag {tag_name()} holds the package the chapters install")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
