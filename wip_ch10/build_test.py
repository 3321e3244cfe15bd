"""Rebuild chapters/10_making_training_fast.ipynb (issue 25, item 2). Keeps the setup cell."""
import nbformat

PATH = "/work/main/chapters/10_making_training_fast.ipynb"; OUT = "/tmp/ch10/test.ipynb"
old = nbformat.read(PATH, 4)
setup = old.cells[1]
assert "BOOK_VERSION" in setup.source

cells = []


def md(text):
    cells.append(nbformat.v4.new_markdown_cell(text.strip("\n")))


def code(text, tags=None, alt=None):
    c = nbformat.v4.new_code_cell(text.strip("\n"))
    if tags:
        c.metadata["tags"] = tags
    if alt:
        c.metadata["mystnb"] = {"image": {"alt": alt}}
    cells.append(c)


exec(open("/tmp/ch10/cells.py").read())

nb = nbformat.v4.new_notebook()
nb.metadata = old.metadata
nb.cells = [cells[0], setup] + cells[1:]
nbformat.write(nb, OUT)
print(len(nb.cells), "cells")
