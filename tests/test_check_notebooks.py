"""tools/check_notebooks.py catches each problem it names, on small synthetic notebooks."""

from __future__ import annotations

from pathlib import Path

import check_notebooks
import nbformat
import pytest
from install_cell import ROOT, install_cell_source


def make_notebook(tmp_path: Path, *cells) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(install_cell_source(), execution_count=1), *cells]
    path = tmp_path / "chapters" / "99_test.ipynb"
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path


@pytest.fixture
def check(tmp_path, monkeypatch):
    monkeypatch.setattr(check_notebooks, "ROOT", tmp_path)

    def run(path: Path) -> list[str]:
        return check_notebooks.check(path, install_cell_source(), "chapters/99_test")

    return run


def test_clean_notebook_passes(tmp_path, check):
    path = make_notebook(tmp_path, nbformat.v4.new_code_cell("x = 1", execution_count=2))
    assert check(path) == []


@pytest.mark.parametrize("fence", ["```python", "```{code-cell} ipython3", "```py", "~~~python"])
def test_python_block_in_markdown_is_rejected(tmp_path, check, fence):
    md = nbformat.v4.new_markdown_cell(f"Solution:\n\n{fence}\nx = 1\n```\n")
    problems = check(make_notebook(tmp_path, md))
    assert len(problems) == 1 and "python code block" in problems[0]


def test_other_code_blocks_in_markdown_are_fine(tmp_path, check):
    md = nbformat.v4.new_markdown_cell("```bash\nmake test\n```\n\n```\nplain\n```\n")
    assert check(make_notebook(tmp_path, md)) == []


def test_raises_exception_tag_and_error_output_are_rejected(tmp_path, check):
    cell = nbformat.v4.new_code_cell("1 / 0", execution_count=2)
    cell.metadata["tags"] = ["raises-exception"]
    cell.outputs = [nbformat.v4.new_output("error", ename="ZeroDivisionError", evalue="", traceback=[])]
    problems = check(make_notebook(tmp_path, cell))
    assert any("raises-exception" in p and "Run all" in p for p in problems)
    assert any("stores an error output" in p for p in problems)


def test_unexecuted_cell_and_stale_install_cell_are_rejected(tmp_path, check):
    path = make_notebook(tmp_path, nbformat.v4.new_code_cell("x = 1"))
    nb = nbformat.read(path, as_version=4)
    nb.cells[0].source = nb.cells[0].source.replace('BOOK_VERSION = "', 'BOOK_VERSION = "0.0.1')
    nbformat.write(nb, path)
    problems = check(path)
    assert any("never executed" in p for p in problems)
    assert any("install cell" in p for p in problems)


def test_install_cell_asks_for_pyproject_version():
    import re

    version = re.search(r'^version = "(.+)"', (ROOT / "pyproject.toml").read_text(), re.M).group(1)
    assert f'BOOK_VERSION = "{version}"' in install_cell_source()
    compile(install_cell_source(), "install_cell", "exec")  # the cell is valid Python


def test_figure_without_alt_text_is_rejected(tmp_path, check):
    cell = nbformat.v4.new_code_cell("plot()", execution_count=2)
    cell.outputs = [nbformat.v4.new_output("display_data", data={"image/png": "iVBORw0KGgo=",
                                                                  "text/plain": "<Figure>"})]
    problems = check(make_notebook(tmp_path, cell))
    assert len(problems) == 1 and "alt text" in problems[0]
    cell.metadata["mystnb"] = {"image": {"alt": "Loss against training step for two models"}}
    path = make_notebook(tmp_path, cell)
    assert check(path) == []
