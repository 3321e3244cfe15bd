"""The browser check of the built book runs only when asked for by path, after a build.

`pytest tests` (make unit) must not open a browser on a missing or stale build, so the files here
are collected only when a command-line argument points inside tests/browser (make browser runs
`pytest tests/browser`, after make build).
"""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent


def _asked_for(config) -> bool:
    for arg in config.args:
        path = Path(arg.split("::", 1)[0])
        path = (Path(config.invocation_params.dir) / path).resolve()
        if path == HERE or HERE in path.parents:
            return True
    return False


def pytest_ignore_collect(collection_path, config):
    if collection_path.suffix == ".py" and not _asked_for(config):
        return True
    return None
