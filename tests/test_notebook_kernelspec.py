"""Every notebook of the book names its kernel, so that Jupyter, VS Code and Colab open it without asking.

A notebook without ``metadata.kernelspec`` makes an editor ask which kernel to start (and Colab guess); the
book's notebooks all run in the ``python3`` kernel (the current environment's, as nbval and Jupyter Book
start it). Any notebook added to ``book/`` later is covered by the glob.
"""

import json
from pathlib import Path

import pytest

BOOK = Path(__file__).resolve().parents[1] / "book"
NOTEBOOKS = sorted(BOOK.glob("*.ipynb"))


def test_the_book_has_notebooks():
    assert len(NOTEBOOKS) >= 12, NOTEBOOKS


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_every_notebook_names_its_kernel(path):
    metadata = json.loads(path.read_text(encoding="utf-8"))["metadata"]
    spec = metadata.get("kernelspec")
    assert spec, f"{path.name} has no kernelspec: editors ask for a kernel"
    assert spec == {"display_name": "Python 3", "language": "python", "name": "python3"}, spec
