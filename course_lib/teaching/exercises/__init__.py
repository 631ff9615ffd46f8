"""Checkers for the book's coding exercises.

A student writes a function in the notebook and calls::

    from course_lib.exercises import check
    check("scoring.masked_softmax", my_masked_softmax)

which prints specific feedback and returns a :class:`CheckResult`. An answer that is still the
stub (it raises ``NotImplementedError``, or is ``None``/``...``) is reported as "not answered yet"
instead of crashing the notebook, so a student notebook runs top to bottom.

Each chapter's checkers live in a module named after the chapter (``attention_pooling``,
``nadaraya_watson``, ``scoring``, ...) and register themselves with :func:`checker`.
"""

from __future__ import annotations

from ._core import (
    CheckResult,
    ExerciseFailure,
    check,
    checker,
    count_cases,
    expect,
    expect_close,
    expect_match,
    expect_same,
    list_exercises,
)

# Importing the chapter modules registers their checkers.
from . import (  # noqa: E402,F401  isort: skip
    attention_pooling,
    bahdanau,
    efficient,
    decoder,
    gpt,
    multihead,
    nadaraya_watson,
    positional,
    scoring,
    serving,
    sparse,
    speculative,
    training,
    transformer,
    translation,
)

__all__ = ["CheckResult", "ExerciseFailure", "check", "checker", "count_cases", "expect", "expect_close",
           "expect_match", "expect_same", "list_exercises"]
