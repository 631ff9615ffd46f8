"""The book as a lesson: what a reader who skips every collapsed block meets (issue "A book that teaches").

Measured by tools/lesson_measures.py: the main path's words and the check lines left in view.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import nbformat
import pytest

# In tests/ this is the repository; the copy in /work/notes is run from a checkout (cwd).
ROOT = Path(__file__).resolve().parents[1] if Path(__file__).parent.name == "tests" else Path.cwd()
sys.path.insert(0, str(ROOT / "tools"))
import lesson_measures  # noqa: E402

CHAPTERS = lesson_measures.chapters()
ERRATA = ROOT / "book" / "errata.ipynb"
# The five sets of lecture notes the course follows, by their real titles (their bibliography entries).
NOTES_TITLES = [
    "Attention Mechanisms and Transformer Architecture",
    "Attention Mechanism and Transformers",
    "A study of transformer and attention mechanics in the industry of artificial intelligence",
    "Attention Neural Networks",
    "Transformers (Part 4)",
]


def _markdown_cells(path: Path) -> list[str]:
    return [c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "markdown"]


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_no_check_line_is_in_view(path):
    lines = lesson_measures.visible_check_lines(path)
    assert not lines, f"{path.name} shows {len(lines)} check lines (fold the checks away):\n" + "\n".join(lines)


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_no_exercise_checker_shows_not_answered_yet_in_the_book(path):
    """The checker under an exercise stub prints "not answered yet" (the student notebooks keep it); the book
    removes that output (tag remove-output), so a reader of the HTML never meets it."""
    shown = []
    for index, cell in enumerate(nbformat.read(path, as_version=4).cells):
        tags = set(cell.metadata.get("tags", []))
        if cell.cell_type != "code" or tags & {"remove-output", "remove-cell"}:
            continue
        text = "".join(str(out.get("text", "")) + str(out.get("data", {}).get("text/plain", ""))
                       for out in cell.get("outputs", []))
        if "not answered yet" in text:
            shown.append(index)
    assert not shown, f"{path.name}: cells {shown} show 'not answered yet' (tag them remove-output)"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_a_chapter_opens_with_its_prerequisites_and_reading_time(path):
    opening = _markdown_cells(path)[0].lower()
    assert "prerequisites" in opening and "reading time" in opening, path.name


@pytest.mark.parametrize("path", [p for p in CHAPTERS if "b_" not in p.stem], ids=lambda p: p.name)
def test_a_chapter_ends_its_argument_with_a_summary(path):
    assert any(re.search(r"^## Summary", md, re.M) for md in _markdown_cells(path)), path.name


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_the_notes_errata_live_in_the_appendix_not_in_a_chapter(path):
    boxes = [md[:60] for md in _markdown_cells(path) if "Where the notes differ" in md]
    assert not boxes, f"{path.name}: move these to book/errata.ipynb: {boxes}"


def test_the_errata_appendix_quotes_corrects_and_links_at_least_fifteen_entries():
    markdown = "\n".join(_markdown_cells(ERRATA))
    entries = re.split(r"^### ", markdown, flags=re.M)[1:]
    assert len(entries) >= 15, len(entries)
    for entry in entries:
        title = entry.splitlines()[0]
        assert re.search(r"^> ", entry, re.M), f"{title}: no quotation of the note"
        assert re.search(r"\{(doc|ref|numref)\}`", entry), f"{title}: no link to the cell that checks it"


def test_the_main_path_of_chapters_1_to_11_is_at_most_nineteen_thousand_words():
    """Issue 30: a quarter of the main path cut (25,361 words when it was filed; 27,652 before the cut)."""
    words = {p.name: lesson_measures.main_path_words(p) for p in CHAPTERS if p.stem[:2] <= "11"}
    assert len(words) == 12 and sum(words.values()) <= 19_000, words


def test_the_main_path_of_chapters_1_to_7_is_at_most_ten_thousand_words():
    words = {p.name: lesson_measures.main_path_words(p) for p in CHAPTERS if p.stem[:2] <= "07"}
    assert sum(words.values()) <= 10_000, words


def test_the_notes_are_cited_by_their_real_titles():
    bib = (ROOT / "book" / "references.bib").read_text()
    missing = [title for title in NOTES_TITLES if title.lower() not in bib.lower()]
    assert not missing, missing
