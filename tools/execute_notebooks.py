"""Execute chapter notebooks in place with the .venv kernel, so their stored outputs are fresh.

Usage: python tools/execute_notebooks.py chapters/01_rnn_limitations.ipynb [more.ipynb ...]

Outputs are written only after a notebook ran to the end without error (cells tagged
`raises-exception` may raise), so a failing run never leaves a half-executed file behind.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from transformer_book.files import atomic_write


def execute(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    client = NotebookClient(
        nb,
        timeout=3600,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
    )
    # Run the kernel with this interpreter (the .venv), whatever kernelspecs the user has.
    client.kernel_manager_class = "jupyter_client.manager.KernelManager"
    client.km = client.create_kernel_manager()
    client.km.kernel_cmd = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    client.execute()
    text = nbformat.writes(nb)
    with atomic_write(path) as f:  # as nbformat.write writes it: with a final newline
        f.write((text if text.endswith("\n") else text + "\n").encode())
    print(f"{path}: executed in {time.perf_counter() - start:.1f} s")


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    for name in argv:
        execute(Path(name))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
