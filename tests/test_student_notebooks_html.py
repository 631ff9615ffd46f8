"""The student notebooks show the numbers the HTML book shows: every glued value of a chapter, as the built
page prints it, is in its student notebook (dist/student of `make assignments`), in the same order.

It reads the HTML of `make book` (built here as `make book` builds it when _build/html is stale, as the
browser test does; BOOK_HTML=path reads another build), so it is marked `browser` with that test.
"""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from course_lib.assignments import make_assignments, strip_solutions
from course_lib.assignments._book import BookIndex

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import book_build  # noqa: E402

sys.path.pop(0)

pytestmark = pytest.mark.browser
HTML = Path(os.environ.get("BOOK_HTML", book_build.HTML)).resolve()
CHAPTERS = ["08_training_and_inference", "08b_translation", "11_modern_decoder"]  # the most glued numbers
_GLUE = re.compile(r"\{glue:text\}`([^`]*)`")
_PASTED = re.compile(r'<span class="pasted-text">(.*?)</span>', re.DOTALL)


@pytest.fixture(scope="module")
def html_pages() -> Path:
    if "BOOK_HTML" not in os.environ and not book_build.is_up_to_date():
        done = subprocess.run(["make", "--no-print-directory", "book"], cwd=ROOT, capture_output=True, text=True)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return HTML


def _executed(html: Path) -> Path | None:
    """The executed notebooks of the build that wrote ``html`` (their glue stores), if kept beside it."""
    folder = html.parent / "jupyter_execute"
    return folder if folder.is_dir() else None


@pytest.fixture(scope="module")
def student(tmp_path_factory, html_pages) -> Path:
    out = tmp_path_factory.mktemp("dist")
    make_assignments(ROOT / "book", out, chapters=CHAPTERS, seed=2**30, executed=_executed(html_pages))
    return out / "student"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_the_student_notebook_shows_the_numbers_of_the_html_page(chapter, html_pages, student):
    page = (html_pages / f"{chapter}.html").read_text(encoding="utf-8")
    shown = [html.unescape(re.sub(r"<[^>]+>", "", m)) for m in _PASTED.findall(page)]
    book = BookIndex.from_book(ROOT / "book", executed=_executed(html_pages))
    nb = nbformat.read(ROOT / "book" / f"{chapter}.ipynb", as_version=4)
    ours = [book.glued(chapter, c) for cell in nb.cells if cell.cell_type == "markdown"
            for c in _GLUE.findall(cell.source)]
    assert shown == ours, "the numbers the HTML page shows differ from the glue store's, formatted"

    # the numbers outside the worked solutions, in the student notebook, in the book's order
    visible = [book.glued(chapter, c) for cell in strip_solutions(nb).cells if cell.cell_type == "markdown"
               for c in _GLUE.findall(cell.source)]
    assert len(visible) >= 10
    text = "\n".join(c.source for c in nbformat.read(student / f"{chapter}.ipynb", as_version=4).cells
                     if c.cell_type == "markdown")
    position = 0
    for value in visible:
        found = text.find(value, position)
        assert found >= 0, (chapter, value, text[position:position + 300])
        position = found + len(value)
