"""Run chapters the way a reader's "Run all" does, and say where the first one stops.

Usage:
    python tools/run_all.py [--python KERNEL_PYTHON] [--timeout SECONDS] chapters/*.ipynb

Colab's (and Jupyter's) "Run all" semantics, one notebook at a time:

- a fresh kernel per notebook, started with ``--python`` (default: this interpreter), so the
  chapters can run in another environment, e.g. one with the oldest torch the book supports;
- every code cell from top to bottom, stopping at the first cell that raises (a
  ``raises-exception`` tag does not help here, exactly as in Colab);
- in a fresh temporary working directory (Colab starts in an empty /content; files a chapter
  writes, such as checkpoints, go there and are deleted afterwards);
- no comparison of outputs (numbers differ across releases and machines: that is nbval's job
  with the pinned environment), and the notebook files are never modified: each is executed as
  a copy in memory.

For each notebook it prints the time it took, or the failing cell (its index among all cells
and among code cells, its first line) and the error's type and message. The exit status is 1 if
any notebook failed, 0 otherwise.

The training chapter reads Multi30k from ``$MULTI30K_DIR``; when that is unset or empty and the
shared copy CI uses exists (``../shared/data/multi30k`` beside the repository), it is used.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

ROOT = Path(__file__).resolve().parent.parent
SHARED_DATA = ROOT.parent / "shared" / "data" / "multi30k"
KERNEL_NAME = "run-all"


def kernel_versions(python: str) -> str:
    """One line naming the kernel interpreter's Python, torch and numpy versions."""
    code = (
        "import platform, numpy, torch; "
        "print(f'python {platform.python_version()}, torch {torch.__version__}, "
        "numpy {numpy.__version__}')"
    )
    result = subprocess.run([python, "-c", code], capture_output=True, text=True)
    if result.returncode != 0:
        return f"(could not import torch/numpy: {result.stderr.strip().splitlines()[-1:]})"
    return result.stdout.strip()


def kernel_manager(python: str, spec_dir: Path) -> KernelManager:
    """A manager whose kernel runs ``python -m ipykernel_launcher``, whatever kernelspecs the
    user has installed: a kernelspec of its own, in ``spec_dir``, is the only one it sees."""
    (spec_dir / KERNEL_NAME).mkdir(parents=True)
    spec = {
        "argv": [python, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": f"Python ({python})",
        "language": "python",
    }
    (spec_dir / KERNEL_NAME / "kernel.json").write_text(json.dumps(spec))
    return KernelManager(
        kernel_name=KERNEL_NAME, kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(spec_dir)])
    )


def clear_outputs(nb) -> None:
    """Start from a clean copy, as a reader who opens the notebook and clicks "Run all"."""
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None


def run_notebook(path: Path, python: str, timeout: int) -> tuple[bool, float, str]:
    """Execute ``path`` top to bottom in a fresh kernel; (ok, seconds, message)."""
    nb = nbformat.read(path, as_version=4)  # in memory only: the file is never written
    clear_outputs(nb)
    current = {"index": None}

    def on_cell_execute(cell, cell_index, **_):
        current["index"] = cell_index

    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="run_all_") as workdir:
        client = NotebookClient(
            nb,
            timeout=timeout,
            kernel_name=KERNEL_NAME,
            allow_errors=False,
            force_raise_errors=True,  # stop at the first error, raises-exception tag or not
            resources={"metadata": {"path": workdir}},
            on_cell_execute=on_cell_execute,
        )
        client.km = kernel_manager(python, Path(workdir) / ".kernels")
        try:
            client.execute()
        except (CellExecutionError, CellTimeoutError, DeadKernelError) as err:
            seconds = time.perf_counter() - start
            return False, seconds, describe_failure(nb, current["index"], err)
    return True, time.perf_counter() - start, ""


def describe_failure(nb, index: int | None, err: Exception) -> str:
    """Which cell failed (index among all cells, among code cells, first line) and with what."""
    if index is None:
        where = "before the first cell"
    else:
        cell = nb.cells[index]
        code_number = sum(c.cell_type == "code" for c in nb.cells[: index + 1])
        first = next((ln for ln in cell.source.splitlines() if ln.strip()), "")
        where = f"cell {index} (code cell {code_number}): {first[:100]}"
    if isinstance(err, CellExecutionError):
        what = f"{err.ename}: {err.evalue}"
    else:
        what = f"{type(err).__name__}: {str(err).strip().splitlines()[0] if str(err) else ''}"
    return f"stopped at {where}\n    {what}"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument(
        "--python", default=sys.executable,
        help="interpreter of the kernel (needs ipykernel); default: this one",
    )
    parser.add_argument("--timeout", type=int, default=3600, help="seconds per cell (3600)")
    args = parser.parse_args(argv)

    if not os.environ.get("MULTI30K_DIR") and SHARED_DATA.is_dir():
        os.environ["MULTI30K_DIR"] = str(SHARED_DATA)
    # Notebooks draw through the kernel's inline backend (an inherited Agg would store nothing).
    os.environ.pop("MPLBACKEND", None)

    print(f"kernel: {args.python} ({kernel_versions(args.python)})")
    print(f"MULTI30K_DIR={os.environ.get('MULTI30K_DIR', '')}", flush=True)
    results = []
    for path in args.notebooks:
        ok, seconds, message = run_notebook(path, args.python, args.timeout)
        results.append((path, ok, seconds))
        status = "ok" if ok else "FAILED"
        print(f"{path}: {status} in {seconds:.1f} s", flush=True)
        if message:
            print(f"    {message}", flush=True)
    failed = [p for p, ok, _ in results if not ok]
    total = sum(s for _, _, s in results)
    print(f"{len(results)} notebooks in {total:.0f} s")
    print(f"{len(results) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
