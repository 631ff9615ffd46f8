"""The exercises' checkers, where the book and the student notebooks call them::

    from course_lib.exercises import check
    check("scoring.masked_softmax", my_masked_softmax)

The code lives in :mod:`course_lib.teaching.exercises`; this module is its public name.
"""

from .teaching.exercises import (
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

__all__ = ["CheckResult", "ExerciseFailure", "check", "checker", "count_cases", "expect", "expect_close",
           "expect_match", "expect_same", "list_exercises"]
