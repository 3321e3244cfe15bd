"""tools/import_graph.py: the project has no import circle, and the package's longest chain of
imports is at most 9 modules (issue 37's structure targets)."""

from __future__ import annotations

import import_graph

MAX_CHAIN = 9


def test_the_tool_finds_circles_and_chains_on_a_made_up_project(tmp_path):
    package = tmp_path / "code" / "transformer_book"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from transformer_book import b\n")
    (package / "b.py").write_text("def f():\n    from transformer_book.c import x\n")
    (package / "c.py").write_text("from . import a\nimport torch\n")
    (package / "d.py").write_text("import transformer_book.a\n")
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "run.py").write_text("import helper\nfrom transformer_book import d\n")
    (tmp_path / "tools" / "helper.py").write_text("import run\n")
    g = import_graph.graph(tmp_path)
    assert g["transformer_book.b"] == {"transformer_book.c"}  # inside a function too
    assert g["transformer_book.c"] == {"transformer_book.a"}  # relative; torch is not ours
    assert import_graph.circles(g) == [
        ["helper", "run"], ["transformer_book.a", "transformer_book.b", "transformer_book.c"]]
    # the circle a -> b -> c folded into one node of 3 modules, after d
    chain = import_graph.longest_chain(import_graph.package_graph(g))
    assert chain == ["transformer_book.d", "transformer_book.a + transformer_book.b + "
                     "transformer_book.c"]


def test_the_project_has_no_import_circle():
    assert import_graph.circles(import_graph.graph()) == []


def test_the_longest_import_chain_is_at_most_nine_modules():
    chain = import_graph.longest_chain(import_graph.package_graph(import_graph.graph()))
    length = sum(len(node.split(" + ")) for node in chain)
    assert length <= MAX_CHAIN, " -> ".join(chain)


def test_the_teaching_package_never_imports_the_lab():
    """transformer_lab measures transformer_book; a learner's package must not need the lab."""
    import ast
    from pathlib import Path

    package = Path(__file__).resolve().parents[1] / "code" / "transformer_book"
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not any(n.split(".")[0] == "transformer_lab" for n in names), path


def test_no_file_over_400_lines_and_no_class_over_150_outside_the_models():
    """The structure the training half was rewritten to (issue 37): short files, and no class a
    maintainer must scroll through, except the models themselves (the Transformer, its
    attention and the recurrent translator read top to bottom as the paper's figures do)."""
    import ast
    from pathlib import Path

    package = Path(__file__).resolve().parents[1] / "code" / "transformer_book"
    models = {"model.py", "attention.py", "recurrent.py"}
    for path in package.rglob("*.py"):
        source = path.read_text(encoding="utf-8")
        assert source.count("\n") <= 400, f"{path.name}: {source.count(chr(10))} lines"
        if path.name in models:
            continue
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ClassDef):
                size = node.end_lineno - node.lineno + 1
                assert size <= 150, f"{path.name}: class {node.name} has {size} lines"
