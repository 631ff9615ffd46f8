"""Section numbers follow reading order (tools/sphinx_course.py, number_subpages_in_reading_order).

A chapter page with a page of its own below it in the toc (chapter 8 and its section 8.1) numbers that
page x.1, and its own headings not at all: Sphinx alone numbered the chapter's headings and its child page
in one sequence, so the child page, read after the whole chapter, came out as 8.15 (or as 8.1 read after
8.2-8.15). A small Sphinx project with the book's numbering (sphinx-multitoc-numbering, as Jupyter Book
loads it) and the book's extension shows what a reader sees.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

pytest.importorskip("sphinx", reason="Sphinx comes with the book extra (pip install -e '.[book]')")
pytest.importorskip("sphinx_multitoc_numbering", reason="comes with jupyter-book (the book extra)")

ROOT = Path(__file__).resolve().parents[1]

PAGES = {
    "index": """Book\n====\n\n.. toctree::\n   :numbered:\n\n   one\n   two\n""",
    "one": """One\n===\n\nFirst\n-----\n\ntext\n\nSecond\n------\n\ntext\n""",
    "two": """Two\n===\n\nintro\n\nDates\n-----\n\ntext\n\nSummary\n-------\n\ntext\n\n"""
           """.. toctree::\n\n   two_sub\n""",
    "two_sub": """Translation\n===========\n\nData\n----\n\ntext\n\nBLEU\n----\n\nCorpus\n~~~~~~\n\ntext\n""",
}


def _build(tmp_path: Path) -> dict[str, str]:
    from sphinx.application import Sphinx

    src, out = tmp_path / "src", tmp_path / "out"
    src.mkdir()
    for name, text in PAGES.items():
        (src / f"{name}.rst").write_text(text)
    (src / "conf.py").write_text(
        f"import sys\nsys.path.insert(0, {str(ROOT / 'tools')!r})\n"
        "extensions = ['sphinx_multitoc_numbering', 'sphinx_course']\n"
        "bibtex_bibfiles = []\nhtml_theme = 'basic'\n")
    app = Sphinx(str(src), str(src), str(out), str(tmp_path / "doctrees"), "html", status=None, warning=sys.stderr,
                 freshenv=True)
    app.build()
    return {name: (out / f"{name}.html").read_text() for name in PAGES}


def _headings(html: str) -> list[str]:
    """The page's headings as shown, number included ("2.1. Translation"), without the permalink sign."""
    found = re.findall(r"<h[1-6][^>]*>((?:(?!</h[1-6]>).)*?)<a class=\"headerlink\"", html, re.S)
    return [re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", h)).strip() for h in found]


def test_a_chapters_own_page_numbers_its_subpage_x_1_and_leaves_its_headings_unnumbered(tmp_path):
    pages = _build(tmp_path)
    assert _headings(pages["one"]) == ["1. One", "1.1. First", "1.2. Second"]  # an ordinary chapter
    assert _headings(pages["two"]) == ["2. Two", "Dates", "Summary"]
    assert _headings(pages["two_sub"]) == ["2.1. Translation", "2.1.1. Data", "2.1.2. BLEU", "2.1.2.1. Corpus"]


def test_the_links_to_the_subpage_carry_its_number(tmp_path):
    pages = _build(tmp_path)
    links = re.findall(r'href="two_sub.html">([^<]*)<', pages["index"] + pages["two"])
    assert links and all(link.startswith("2.1. Translation") for link in links), links
