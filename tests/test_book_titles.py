"""Chapter titles are numbered by the toc only: a title written "1. Queries..." showed as "1. 1. Queries".

The browser test sees the rendered headings; this catches a bad title line without building the book.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

BOOK = Path(__file__).resolve().parents[1] / "book"


@pytest.mark.parametrize("path", sorted(BOOK.glob("*.ipynb")), ids=lambda p: p.name)
def test_each_page_starts_with_one_unnumbered_title(path):
    first = nbformat.read(path, as_version=4).cells[0]
    lines = [line for line in first.source.splitlines() if line.strip() and not re.fullmatch(r"\(.+\)=", line)]
    title = lines[0]
    assert re.fullmatch(r"# \S.*", title), f"{path.name}: the first line is {title!r}, not '# Title'"
    assert not re.match(r"# \d+(\.\d+)*\.?\s", title), f"{path.name}: {title!r} numbers itself; the toc numbers it"
    assert first.source.count("\n# ") + first.source.startswith("# ") == 1, f"{path.name}: more than one title"
