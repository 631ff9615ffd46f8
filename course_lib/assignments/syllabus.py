"""The syllabus page (``book/syllabus.ipynb``): 4- and 6-week plans, written from what the chapters say.

Nothing on the page is typed twice: each chapter's reading time is the one its opening states ("Reading
time: about 40 minutes (the main path; the collapsed blocks and exercises add about 35)"), its exercises and
whether each is autograded or hand-graded come from the chapter itself (as ``make assignments`` sees them),
the points from the points file, the chapters and their numbers from ``_toc.yml``. Only the plans, which
chapters go in which week, are written here (:data:`PLANS`); a numbered chapter of ``_toc.yml`` that no plan
names (a new one) is read, as optional, in each plan's last week, and a chapter a plan names that the book
does not have yet is left out (:func:`plan_weeks`). After adding or changing a chapter, the plans or the
points, write the page again::

    python -m course_lib.assignments syllabus

``tests/test_syllabus.py`` fails while the page differs from what this writes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import nbformat

from ._book import BookIndex, toc_numbers
from ._points import points_for
from .generation import exercise_table

#: The capstone project: the chapter after chapter 11 (linked once it is in the book).
CAPSTONE = "12_build_a_gpt"
CAPSTONE_TITLE = "Build a GPT"


@dataclass(frozen=True)
class Week:
    theme: str
    chapters: tuple[str, ...]
    optional: tuple[str, ...] = ()


#: Which chapters each plan reads in which week; the last week of each also does the capstone project.
PLANS: dict[str, tuple[str, tuple[Week, ...], str]] = {
    "six": ("Six weeks", (
        Week("Attention as a soft lookup", ("01_queries_keys_values", "02_nadaraya_watson", "03_scoring_functions")),
        Week("Attention in a translator", ("04_bahdanau_attention", "05_multihead_attention")),
        Week("The Transformer", ("06_positional_encoding", "07_transformer_architecture")),
        Week("Training and translating", ("08_training_and_inference", "08b_translation")),
        Week("Long sequences and fast attention", ("09_sparse_attention", "10_efficient_attention")),
        Week("Today's decoder, and a GPT of your own", ("11_modern_decoder",),
             optional=("13_serving", "13b_speculative_decoding")),
    ), "the whole capstone: the model, its training loop and its evaluation, written and trained by the "
       "student (about 6 hours), graded by its checkers and a short report"),
    "four": ("Four weeks", (
        Week("Attention from first principles", ("01_queries_keys_values", "02_nadaraya_watson",
                                                 "03_scoring_functions", "04_bahdanau_attention")),
        Week("The Transformer", ("05_multihead_attention", "06_positional_encoding", "07_transformer_architecture")),
        Week("Training and translating", ("08_training_and_inference", "08b_translation")),
        Week("Attention today", ("10_efficient_attention", "11_modern_decoder"),
             optional=("09_sparse_attention", "13_serving", "13b_speculative_decoding")),
    ), "the capstone's autograded exercises, with one training run of at most 10 minutes on a laptop CPU "
       "(about 3 hours)"),
}

def numbered_chapters(book_dir: str | Path) -> list[str]:
    """The numbered pages of the book (chapters and their sections), in ``_toc.yml``'s order, that exist."""
    book_dir = Path(book_dir)
    return [page for page in toc_numbers(book_dir.parent / "_toc.yml") if (book_dir / f"{page}.ipynb").is_file()]


def plan_weeks(weeks: tuple[Week, ...], chapters: list[str]) -> tuple[Week, ...]:
    """A plan's weeks for the book's numbered ``chapters`` (``_toc.yml`` order).

    A chapter the plan names that is not in ``chapters`` is left out; one of ``chapters`` that the plan
    does not name (and that is not the capstone, the project) is read, as optional, in the last week.
    """
    named = {c for week in weeks for c in (*week.chapters, *week.optional)}
    new = tuple(c for c in chapters if c not in named and c != CAPSTONE)
    present = set(chapters)
    out = [Week(week.theme, tuple(c for c in week.chapters if c in present),
                tuple(c for c in week.optional if c in present)) for week in weeks]
    out[-1] = Week(out[-1].theme, out[-1].chapters, out[-1].optional + new)
    return tuple(out)


_READING = re.compile(
    r"Reading time:\*\*\s+about\s+(?P<main>\d+)\s+minutes.*?add\s+(?:about\s+)?(?P<extra>\d+(?:½)?)"
    r"(?:\s+(?P<unit>hours?|minutes))?", re.DOTALL)


def reading_time(nb: nbformat.NotebookNode) -> tuple[int, int]:
    """``(main path, collapsed blocks and exercises)`` in minutes, as the chapter's opening states them."""
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            found = _READING.search(cell.source)
            if found:
                extra = Fraction(found.group("extra").replace("½", "")) + (Fraction(1, 2) if "½" in found.group(
                    "extra") else 0)
                minutes = extra * 60 if (found.group("unit") or "").startswith("hour") else extra
                return int(found.group("main")), int(minutes)
    raise ValueError("the chapter states no reading time ('**Reading time:** about N minutes (... add about M)')")


def _reading_time_of(path: Path) -> tuple[int, int]:
    try:
        return reading_time(nbformat.read(path, as_version=4))
    except ValueError as error:
        raise ValueError(f"{path.name}: {error}") from None


def _hours(minutes: int) -> str:
    hours, rest = divmod(minutes, 60)
    return f"{hours} h {rest:02d} min" if hours else f"{rest} min"


def syllabus_markdown(book_dir: str | Path) -> str:
    """The syllabus page's Markdown (MyST: ``{doc}`` and ``{ref}`` link the chapters and exercises)."""
    book_dir = Path(book_dir)
    index = BookIndex.from_book(book_dir)
    table = exercise_table(book_dir)
    chapters = numbered_chapters(book_dir)
    times = {c: _reading_time_of(book_dir / f"{c}.ipynb") for c in chapters}
    points = {c: points_for(c, [label for label, _, _ in entries]) for c, entries in table.items()}
    capstone = f"{{doc}}`{CAPSTONE}`" if (book_dir / f"{CAPSTONE}.ipynb").is_file() else (
        f"*{CAPSTONE_TITLE}*, the chapter after chapter 11")

    def exercises(chapters: tuple[str, ...], manual: bool) -> tuple[str, float]:
        found = [(c, label) for c in chapters for label, _, is_manual in table.get(c, []) if is_manual == manual]
        total = sum(points[c][label] for c, label in found)
        return ", ".join(f"{{ref}}`{label}`" for _, label in found) or "none", total

    def graded(chapters: tuple[str, ...], indent: str, which: str) -> list[str]:
        out = []
        for kind, manual in (("Autograded", False), ("Hand-graded", True)):
            found, total = exercises(chapters, manual)
            out.append(f"{indent}- {kind}{which} ({total:g} points): {found}." if total else
                       f"{indent}- {kind}{which}: none.")
        return out

    lines = [
        "# Syllabus",
        "",
        "Two plans for a unit built on this course, with what each week reads and which exercises it hands "
        "in. The reading times are the ones the chapters state: the *main path* reads the chapter and runs its "
        "cells; *with exercises* adds the collapsed derivations and checks and the exercises. *Autograded* "
        "exercises are graded by `make grade` (or Gradescope) from the student notebooks of `make assignments`: "
        "each is checked on the book's cases and on hidden cases drawn from a seed only the autograder has, "
        "and an answer that calls the course library's own implementation of the exercise scores 0. "
        "*Hand-graded* exercises are derivations and experiments: `make grade` collects their answers for the "
        "instructor. The points are those of `course_lib/assignments/points.toml`, which an instructor edits.",
        "",
        "Each plan ends with a project, the capstone chapter " + capstone + ": the student writes a "
        "decoder-only language model and its training loop, shows it equal to the library's, and trains it.",
    ]
    for key, (title, weeks, project) in PLANS.items():
        weeks = plan_weeks(weeks, chapters)
        summary = ["| Week | Chapters | Main path | With exercises | Autograded | Hand-graded |",
                   "|---|---|---|---|---|---|"]
        details = []
        total_main = total_extra = 0
        for n, week in enumerate(weeks, start=1):
            main = sum(times[c][0] for c in week.chapters)
            extra = sum(times[c][1] for c in week.chapters)
            total_main, total_extra = total_main + main, total_extra + extra
            _, auto_points = exercises(week.chapters, manual=False)
            _, hand_points = exercises(week.chapters, manual=True)
            numbers = ", ".join(index.numbers.get(c, "") for c in week.chapters)
            if week.optional:
                numbers += " (" + ", ".join(index.numbers.get(c, "") for c in week.optional) + " optional)"
            summary.append(f"| {n} | {numbers} | {_hours(main)} | {_hours(main + extra)} | {auto_points:g} points "
                           f"| {hand_points:g} points |")
            read = ", ".join(f"{{doc}}`{c}` ({index.numbers.get(c, '')})" for c in week.chapters)
            details += ["", f"**Week {n}: {week.theme}.**", "",
                        f"- Read: {read}; {_hours(main)}, {_hours(main + extra)} with the exercises."]
            details += graded(week.chapters, "", "")
            if week.optional:
                details.append("- Optional: " + ", ".join(f"{{doc}}`{c}` ({index.numbers.get(c, '')})"
                                                        for c in week.optional) + ".")
                details += graded(week.optional, "  ", ", optional")
            if n == len(weeks):
                details.append(f"- Project: {capstone}: {project}.")
                if CAPSTONE in table:
                    details += graded((CAPSTONE,), "  ", "")
        lines += ["", f"(syllabus-{key})=", f"## {title}", "", *summary, "",
                  f"In all: {_hours(total_main)} of reading, {_hours(total_main + total_extra)} with the exercises, "
                  f"and the project in week {len(weeks)}.", *details]
    return "\n".join(lines) + "\n"


def syllabus_notebook(book_dir: str | Path) -> nbformat.NotebookNode:
    """The page as a notebook of one Markdown cell (the book is ``.ipynb`` only)."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(syllabus_markdown(book_dir), id="syllabus")])
    nb.metadata = {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
                   "language_info": {"name": "python"}}
    return nb


def write_syllabus(book_dir: str | Path) -> Path:
    """Write ``book_dir/syllabus.ipynb``; return its path."""
    path = Path(book_dir) / "syllabus.ipynb"
    nbformat.write(syllabus_notebook(book_dir), path)
    return path
