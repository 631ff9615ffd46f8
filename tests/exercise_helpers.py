"""What the tests of the exercises share (``tests/test_exercises_*.py``): running a book notebook's worked
solutions, and asserting what a checker says about an answer.

A solution is the code between a markdown cell holding ```` ```{solution-start} label ```` and the
next one holding ```` ```{solution-end} ````, the format every chapter uses. The checker call that
closes a solution (``check(...)``, showing "passed" in the book) is not part of it.

A test module sets ``NOTEBOOK`` and takes the fixtures ``solutions`` / ``solution_function``
(``tests/conftest.py``) to run that notebook's solutions. The stub of every checker is tested once,
in ``test_exercises_core.py``.
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import nbformat
import torch
import torch.nn.functional as F

import course_lib as cl
from course_lib.teaching.exercises import CheckResult, check

BOOK = Path(__file__).resolve().parents[1] / "book"


def _is_checker_call(source: str) -> bool:
    return source.lstrip().startswith("_ = check(")


def solution_cells(notebook: str, label: str) -> list[str]:
    """The sources of the code cells of the solution ``label`` in ``book/notebook``."""
    path = BOOK / notebook
    cells, inside, found = [], False, False
    for cell in nbformat.read(path, as_version=4).cells:
        if cell.cell_type == "markdown" and f"{{solution-start}} {label}" in cell.source:
            inside, found = True, True
            continue
        if inside and cell.cell_type == "markdown" and "{solution-end}" in cell.source:
            break
        if inside and cell.cell_type == "code" and not _is_checker_call(cell.source):
            cells.append(cell.source)
    assert found, f"no solution-start for {label} in {notebook}"
    return cells


def solution_namespace(notebook: str, *labels: str, defining: str | None = None, **names: object) -> dict:
    """Exec the solutions ``labels`` in turn in one namespace and return it.

    The namespace starts with ``torch``, ``nn``, ``cl``, ``math``, ``F``, ``Counter`` and ``names``. With
    ``defining``, only the cells that define that function run (the others may need the notebook's
    trained models).
    """
    ns: dict = {"torch": torch, "nn": torch.nn, "cl": cl, "math": math, "F": F, "Counter": Counter, **names}
    for label in labels:
        for source in solution_cells(notebook, label):
            if defining is None or f"def {defining}(" in source:
                exec(compile(source, f"{notebook}:{label}", "exec"), ns)
    if defining is not None:
        assert defining in ns, f"the solutions {labels} do not define {defining}"
    return ns


def stub(*args: object, **kwargs: object) -> None:
    """An unanswered exercise: what the student notebook's stub cell does."""
    raise NotImplementedError


def passes(exercise: str, answer: object, *, variant: int = 0) -> CheckResult:
    """Check ``answer``: it must pass. Returns the result (to look at its ``n_checks``)."""
    result = check(exercise, answer, quiet=True, variant=variant)
    assert result.passed, result.message
    return result


def fails_with(exercise: str, answer: object, *hints: str) -> CheckResult:
    """Check ``answer``: it must be answered and not yet right (no checker error), and its message must
    contain every one of ``hints``. Returns the result."""
    result = check(exercise, answer, quiet=True)
    assert result.answered and result.passed is False and not result.checker_error, result.message
    for hint in hints:
        assert hint in result.message, result.message
    return result
