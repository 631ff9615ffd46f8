"""Assignments from the book: student notebooks, otter-grader autograders, and grading (``make assignments``).

The book's notebooks are the single source. For every chapter with exercises, ``make assignments``
writes:

- ``dist/instructor/<chapter>.ipynb``: the book's notebook (worked solutions, executed outputs);
- ``dist/student/<chapter>.ipynb``: an otter-grader student notebook that reads like the book in plain
  Jupyter and Colab: plain Markdown (no MyST directives or roles; glued numbers, cross-references and
  citations as the HTML shows them), the book's figures with their captions, the statements, a stub or
  an answer cell per exercise, ``grader.check(...)`` cells that run the public tests (the course's
  checkers, with their specific feedback), no solutions;
- ``dist/autograder/<chapter>.zip``: the otter autograder (public and hidden tests, points, the release
  to install, the plugin that skips the cells the answers do not need), for ``otter run``, ``otter
  grade`` (Docker) or Gradescope.

Both are produced by ``otter assign`` from a master notebook that :func:`master_notebook` writes from
the chapter. Each coding exercise's tests call the checker the book calls (``course_lib.exercises``,
one definition): the public test on the book's cases, the hidden test on cases drawn from a secret
variant written only into the zip (``check(..., variant=k)`` with other ``k`` is for practice). An
answer built on the library's own implementation of the exercise scores 0 (the checkers'
``references``). Points come from ``points.toml`` (:mod:`~course_lib.assignments._points`).
Derivations and experiments are manual questions with an answer cell.

Grading (:func:`grade`) runs ``otter run`` on each submission in its own process, with a time limit::

    python -m course_lib.assignments generate [--book book] [--out dist] [--points FILE] [--executed DIR]
    python -m course_lib.assignments grade --out grades [--timeout 600] submissions/*.ipynb
    python -m course_lib.assignments points      # list the book's exercises in points.toml
    python -m course_lib.assignments syllabus    # write book/syllabus.ipynb

and writes ``grades.csv`` (one row per submission and exercise), per-submission feedback and the
manual answers. Scores come from otter's results, never from what a notebook prints.

The package is split by job: :mod:`~course_lib.assignments.generation` (master notebooks, ``otter
assign``), :mod:`~course_lib.assignments.grading` (``otter run``, the gradebook) and the command line
:mod:`~course_lib.assignments.cli`, over two shared helpers: ``_notebook`` (where the solutions are,
the student version, what generated notebooks and the grader agree on) and ``_markdown`` (MyST to
plain Markdown), ``_book`` (the executed book's glue store and cross-reference texts), ``_needed`` (which
cells grading runs) with :mod:`~course_lib.assignments.otter_plugin`, and :mod:`~course_lib.assignments.syllabus`.
"""

from ._markdown import to_plain_markdown
from ._notebook import solution_sources, strip_solutions
from .cli import main
from .generation import make_assignments, master_notebook
from .grading import GRADE_COLUMNS, grade

__all__ = ["strip_solutions", "solution_sources", "to_plain_markdown", "master_notebook", "make_assignments",
           "grade", "GRADE_COLUMNS", "main"]
