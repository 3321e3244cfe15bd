"""The project's import graph, drawn statically from the source (``ast``; nothing is imported):
its import circles, and the longest chain of imports among the package's modules.

Usage: python tools/import_graph.py            # prints the circles and the longest chain

The modules are the package's (``code/transformer_book``, named ``transformer_book.x.y``) and the
scripts' (``benchmarks/*.py``, ``tools/*.py``, ``_ext/*.py``, named by their file, as each
folder's scripts import one another). Every ``import`` and ``from ... import`` statement counts,
wherever it stands (inside a function or an ``if TYPE_CHECKING:`` block too: the modules still
depend on each other). ``from a.b import c`` is an edge to ``a.b.c`` when that is a module, else
to ``a.b``; the parent packages that Python initialises on the way are not edges (every module
would otherwise depend on ``transformer_book/__init__.py``).

A chain's length is the number of modules on it (``a -> b -> c`` is 3). Where the graph has a
circle, the chain is measured over its circles folded into one node each (a circle's modules
all count); with no circle, that is the longest path itself.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "transformer_book"
SCRIPT_FOLDERS = ("benchmarks", "tools", "_ext")


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Module name -> file, for the package and the scripts."""
    out = {}
    for path in sorted((root / "code" / PACKAGE).rglob("*.py")):
        parts = path.relative_to(root / "code").with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    for folder in SCRIPT_FOLDERS:
        for path in sorted((root / folder).glob("*.py")):
            out[path.stem] = path
    return out


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The modules among ``known`` that module ``name`` (in ``path``) imports."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package, up level - 1 packages
                up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*up, *([base] if base else [])])
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                       for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:  # import a.b.c: the deepest module we know
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def graph(root: Path = ROOT) -> dict[str, set[str]]:
    files = modules(root)
    return {name: imports(name, path, set(files)) for name, path in files.items()}


def circles(g: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (or a module importing
    itself), each sorted; Tarjan's algorithm, iterative."""
    index, low, on_stack, stack, out, counter = {}, {}, set(), [], [], [0]

    def visit(start):
        work = [(start, iter(sorted(g[start])))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(g[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1 or node in g[node]:
                    out.append(sorted(component))

    for node in sorted(g):
        if node not in index:
            visit(node)
    return sorted(out)


def longest_chain(g: dict[str, set[str]]) -> list[str]:
    """The longest chain of imports (a list of modules, the importer first); circles folded."""
    folded = {m: tuple(c) for c in circles(g) for m in c}
    node_of = {m: folded.get(m, (m,)) for m in g}
    dag = {}
    for m, targets in g.items():
        dag.setdefault(node_of[m], set()).update(node_of[t] for t in targets
                                                 if node_of[t] != node_of[m])
    best: dict[tuple, list] = {}

    def chain(node):
        if node not in best:
            tails = [chain(t) for t in sorted(dag[node])]
            best[node] = [node, *max(tails, key=_length, default=[])]
        return best[node]

    sys.setrecursionlimit(max(1000, 10 * len(dag)))
    top = max((chain(n) for n in sorted(dag)), key=_length, default=[])
    return [" + ".join(node) for node in top]


def _length(chain: list) -> int:
    return sum(len(node) for node in chain)


def package_graph(g: dict[str, set[str]]) -> dict[str, set[str]]:
    """The graph among the package's modules only."""
    mine = {m for m in g if m == PACKAGE or m.startswith(PACKAGE + ".")}
    return {m: g[m] & mine for m in mine}


def main() -> int:
    g = graph()
    found = circles(g)
    print(f"{len(g)} modules ({len(package_graph(g))} in the package), "
          f"{sum(map(len, g.values()))} imports among them")
    print(f"import circles: {len(found)}")
    for c in found:
        print("  " + " <-> ".join(c))
    chain = longest_chain(package_graph(g))
    length = sum(len(node.split(" + ")) for node in chain)
    print(f"longest import chain in the package: {length} modules")
    print("  " + " -> ".join(m.removeprefix(PACKAGE + ".") for m in chain))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
