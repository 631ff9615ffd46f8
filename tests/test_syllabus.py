"""The syllabus page: written from the chapters (course_lib/assignments/syllabus.py), current, in the front matter."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
import yaml

from course_lib.assignments.generation import exercise_table
from course_lib.assignments.syllabus import (
    CAPSTONE,
    PLANS,
    Week,
    numbered_chapters,
    plan_weeks,
    reading_time,
    syllabus_markdown,
)

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"


def test_the_page_is_what_the_chapters_say():
    page = nbformat.read(BOOK / "syllabus.ipynb", as_version=4)
    assert [c.cell_type for c in page.cells] == ["markdown"]
    assert page.cells[0].source == syllabus_markdown(BOOK), (
        "book/syllabus.ipynb is stale: run `python -m course_lib.assignments syllabus`")


def test_the_page_opens_the_book_before_the_chapters():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    first = toc["parts"][0]
    assert first["chapters"] == [{"file": "syllabus"}] and not first.get("numbered")


def _numbered_chapters() -> list[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    out = []
    for part in toc["parts"]:
        if part.get("numbered"):
            for chapter in part["chapters"]:
                out += [chapter["file"], *(s["file"] for s in chapter.get("sections", []))]
    return out


@pytest.mark.parametrize("plan", list(PLANS))
def test_each_plan_reads_every_chapter_once_and_ends_with_the_capstone(plan):
    title, weeks, project = PLANS[plan]
    assert numbered_chapters(BOOK) == [c for c in _numbered_chapters() if (BOOK / f"{c}.ipynb").is_file()]
    weeks = plan_weeks(weeks, numbered_chapters(BOOK))
    read = [c for week in weeks for c in (*week.chapters, *week.optional)]
    expected = [c for c in numbered_chapters(BOOK) if c != CAPSTONE]
    assert sorted(read) == sorted(expected), f"{title}: a chapter missing or twice"
    assert project and len(weeks) == {"Four weeks": 4, "Six weeks": 6}[title]


def test_a_chapter_no_plan_names_is_read_in_the_last_week_and_one_not_written_yet_is_left_out():
    weeks = (Week("one", ("01_a", "02_b")), Week("two", ("03_c", "04_later"), optional=("05_d",)))
    got = plan_weeks(weeks, ["01_a", "02_b", "03_c", "05_d", "06_new", CAPSTONE, "06b_new_section"])
    assert got == (Week("one", ("01_a", "02_b")),
                   Week("two", ("03_c",), optional=("05_d", "06_new", "06b_new_section")))


def test_reading_times_are_the_chapters_own_and_add_up():
    text = syllabus_markdown(BOOK)
    for plan in PLANS.values():
        _, weeks, _ = plan
        weeks = plan_weeks(weeks, numbered_chapters(BOOK))
        main = sum(reading_time(nbformat.read(BOOK / f"{c}.ipynb", as_version=4))[0]
                   for week in weeks for c in week.chapters)
        assert f"In all: {main // 60} h {main % 60:02d} min of reading" in text
    # chapter 8 states "about 115 minutes ... add about 3½ hours"
    assert reading_time(nbformat.read(BOOK / "08_training_and_inference.ipynb", as_version=4)) == (115, 210)


def test_every_exercise_is_listed_as_autograded_or_hand_graded():
    text = syllabus_markdown(BOOK)
    six = text.split("## Four weeks")[0]
    for entries in exercise_table(BOOK).values():
        for label, _, manual in entries:
            line = next(line for line in six.splitlines() if f"{{ref}}`{label}`" in line)
            assert line.strip().startswith("- Hand-graded" if manual else "- Autograded"), (label, line)
