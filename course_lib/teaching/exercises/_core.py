"""The checker registry and the helpers checkers use to say precisely what is wrong."""

from __future__ import annotations

import contextlib
import contextvars
import copy
import sys
import textwrap
import traceback
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

T = TypeVar("T")

_CHECKERS: dict[str, tuple[Callable[[object], int | None], str]] = {}

# Which set of cases a checker draws (0: the book's and the student notebook's; 1, 2, ...: the
# autograder's hidden variants). Set only for the duration of one ``check`` call.
_VARIANT: contextvars.ContextVar[int] = contextvars.ContextVar("course_lib_checker_variant", default=0)
_PACKAGE_DIR = Path(__file__).resolve().parents[2]  # course_lib/


class ExerciseFailure(AssertionError):
    """Raised by a checker with a message that tells the student what is wrong."""


class _NotAnswered(Exception):
    pass


@dataclass(frozen=True)
class CheckResult:
    """The outcome of :func:`check`.

    Attributes:
        exercise: the exercise id.
        answered: ``False`` while the answer is still the stub.
        passed: every check passed.
        message: the feedback printed to the student.
        n_checks: how many checks ran (when passed).
        checker_error: the checker itself failed (a bug in course_lib, not in the answer).
    """

    exercise: str
    answered: bool
    passed: bool
    message: str
    n_checks: int = field(default=0)
    checker_error: bool = field(default=False)

    @property
    def status(self) -> str:
        """One word for a gradebook: passed, not answered, not yet right or checker error."""
        if self.checker_error:
            return "checker error"
        if not self.answered:
            return "not answered"
        return "passed" if self.passed else "not yet right"

    def __bool__(self) -> bool:
        return self.passed

    def __str__(self) -> str:
        return self.message


def checker(exercise_id: str, description: str) -> Callable:
    """Register ``fn(answer) -> n_checks`` as the checker of ``exercise_id``."""

    def register(fn: Callable[[object], int | None]) -> Callable[[object], int | None]:
        if exercise_id in _CHECKERS:
            raise ValueError(f"checker {exercise_id!r} is registered twice")
        _CHECKERS[exercise_id] = (fn, description)
        return fn

    return register


def list_exercises() -> dict[str, str]:
    """All exercise ids with a checker, mapped to their one-line description."""
    return {k: d for k, (_, d) in sorted(_CHECKERS.items())}


def expect(condition: bool, message: str) -> None:
    """Fail the check with ``message`` unless ``condition`` holds."""
    if not condition:
        raise ExerciseFailure(message)


def variant() -> int:
    """Which set of cases the running checker draws: 0 for the book's, 1, 2, ... for the hidden variants."""
    return _VARIANT.get()


def generator(seed: int) -> torch.Generator:
    """A CPU generator for a checker's random cases; hidden variants (``check(..., variant=k)``) shift the seed."""
    return torch.Generator().manual_seed(seed + 7919 * variant())


def book_or_drawn(book: T, seed: int, draw: Callable[[torch.Generator], T]) -> T:
    """The book's hand-picked cases in variant 0; in a hidden variant, ``draw(generator(seed))``: other cases of
    the same kinds."""
    return book if variant() == 0 else draw(generator(seed))


def integer(g: torch.Generator, low: int, high: int) -> int:
    """An int drawn uniformly from ``low, ..., high`` (both included) with ``g``."""
    return int(torch.randint(low, high + 1, (), generator=g))


def call(answer: Callable, case: str, *args: object, **kwargs: object) -> object:
    """Call the student's function; a crash becomes a failure that names the case.

    ``NotImplementedError`` (the stub) and :class:`ExerciseFailure` pass through unchanged.
    """
    return call_explained(answer, lambda error: f"{case}: your function raised {type(error).__name__}: {error}",
                          *args, **kwargs)


def call_explained(answer: Callable, explain: Callable[[Exception], str], *args: object, **kwargs: object
                   ) -> object:
    """:func:`call` with ``explain(error)`` as the failure when the student's function crashes (a case-specific hint).
    """
    try:
        return answer(*args, **kwargs)
    except (NotImplementedError, ExerciseFailure):
        raise
    except Exception as error:
        raise ExerciseFailure(explain(error)) from None


def expect_raises(answer: Callable, args: tuple, error: type[Exception], *, other: Callable[[Exception], str],
                  returned: Callable[[object], str]) -> None:
    """Fail unless ``answer(*args)`` raises ``error``.

    The failure is ``other(exception)`` when it raises another exception and ``returned(result)`` when it
    returns; the stub's ``NotImplementedError`` passes through.
    """
    try:
        result = answer(*args)
    except (NotImplementedError, ExerciseFailure):
        raise
    except error:
        return
    except Exception as exception:
        raise ExerciseFailure(other(exception)) from None
    raise ExerciseFailure(returned(result))


def close(actual: object, expected: torch.Tensor, atol: float = 1e-5, rtol: float = 1e-4) -> bool:
    """Whether ``actual`` is a tensor of ``expected``'s shape with close values (compared in float64 on CPU)."""
    if not isinstance(actual, torch.Tensor) or tuple(actual.shape) != tuple(expected.shape):
        return False
    actual = actual.detach().to("cpu", torch.float64)
    return bool(torch.allclose(actual, expected.detach().to("cpu", torch.float64), atol=atol, rtol=rtol))


def _fmt(t: object) -> str:
    if isinstance(t, torch.Tensor):
        t = t.detach().cpu()
        if t.numel() > 12:
            return f"tensor of shape {tuple(t.shape)}, first values {t.flatten()[:6].tolist()}"
        return str([round(v, 4) if isinstance(v, float) else v for v in t.flatten().tolist()]
                   if t.dim() <= 1 else t.tolist())
    return repr(t)


def expect_tensor(actual: object, what: str, shape: tuple[int, ...] | None = None, layout: str = "", *,
                  floating: bool = False) -> torch.Tensor:
    """Fail unless ``actual`` is a tensor: floating-point if ``floating``, of ``shape`` when given (``layout``
    names its axes in the message, e.g. ``"(batch, T, d)"``). Returns it."""
    expect(isinstance(actual, torch.Tensor), f"{what}: expected a torch.Tensor, got {type(actual).__name__}")
    if floating:
        expect(actual.dtype.is_floating_point, f"{what}: expected a floating-point tensor, got dtype {actual.dtype}")
    if shape is not None:
        expect(tuple(actual.shape) == tuple(shape),
               f"{what}: expected shape {tuple(shape)}{' = ' + layout if layout else ''}, got {tuple(actual.shape)}")
    return actual


def expect_close(actual: object, expected: torch.Tensor, what: str, atol: float = 1e-5,
                 rtol: float = 1e-4) -> None:
    """Fail unless ``actual`` is a tensor of ``expected``'s shape with close values."""
    actual = expect_tensor(actual, what, expected.shape).detach().to("cpu", torch.float64)
    expected = expected.detach().to("cpu", torch.float64)
    expect(not bool(torch.isnan(actual).any()) or bool(torch.isnan(expected).any()),
           f"{what}: your result contains NaN: {_fmt(actual)}")
    if not torch.allclose(actual, expected, atol=atol, rtol=rtol, equal_nan=True):
        worst = (actual - expected).abs().nan_to_num(0).max().item()
        raise ExerciseFailure(
            f"{what}: values differ (largest difference {worst:.3g}).\n"
            f"  expected {_fmt(expected)}\n  got      {_fmt(actual)}"
        )


Mistakes = Iterable[tuple[object, str]]


def equal(actual: object, expected: object) -> bool:
    """Exact equality: a tensor of ``expected``'s shape, dtype and values (on the CPU), other values by ``==``."""
    if isinstance(expected, torch.Tensor) or isinstance(actual, torch.Tensor):
        return (isinstance(actual, torch.Tensor) and isinstance(expected, torch.Tensor)
                and actual.shape == expected.shape and actual.dtype == expected.dtype
                and torch.equal(actual.detach().cpu(), expected.detach().cpu()))
    return type(actual) is type(expected) and actual == expected


def expect_none_of(actual: object, expected: object, mistakes: Mistakes,
                   same: Callable[[object, object], bool] = close) -> None:
    """Unless ``actual`` is the ``expected`` result, fail with the hint of the first anticipated mistake it is.

    ``mistakes``: ``(result, hint)`` pairs, the result a value or a function computing it only when needed;
    ``same(actual, result)`` says whether ``actual`` is that result. Returns when no mistake matches, so that
    the caller's generic comparison (or a check of a property the answer lacks) comes next.
    """
    if same(actual, expected):
        return
    for result, hint in mistakes:
        if same(actual, result() if callable(result) else result):
            raise ExerciseFailure(hint)


def expect_match(actual: object, expected: torch.Tensor, what: str, mistakes: Mistakes = (), *,
                 atol: float = 1e-5, rtol: float = 1e-4) -> None:
    """Fail unless ``actual`` is close to ``expected``.

    When it is not, the hint of the first anticipated mistake whose result ``actual`` equals is the
    message (``mistakes``: ``(result, hint)``, the result a tensor or a function computing it only
    when needed); otherwise the generic comparison of :func:`expect_close`, which always runs last,
    so that a wrong answer that matches no anticipated mistake still fails.
    """
    expect_none_of(actual, expected, mistakes, lambda a, b: close(a, b, atol, rtol))
    expect_close(actual, expected, what, atol=atol, rtol=rtol)


def expect_same(actual: object, expected: object, mistakes: Mistakes = (), *, otherwise: str | Callable[[], str],
                same: Callable[[object, object], bool] = equal) -> None:
    """:func:`expect_match` for results compared otherwise than tensors by closeness (ids, counts, masks, a loss).

    ``same`` decides (default :func:`equal`); when ``actual`` is neither ``expected`` nor an anticipated
    mistake, the failure is ``otherwise`` (a message, or a function that builds it only then).
    """
    expect_none_of(actual, expected, mistakes, same)
    if not same(actual, expected):
        raise ExerciseFailure(otherwise() if callable(otherwise) else otherwise)


@contextlib.contextmanager
def unchanged(message: str, *arguments: object) -> Iterator[None]:
    """Fail with ``message`` when the block (a call of the answer) changed one of ``arguments`` in place.

    Tensors are compared by :func:`equal` with a clone taken before the block, other values with a deep copy.
    """
    before = [a.clone() if isinstance(a, torch.Tensor) else copy.deepcopy(a) for a in arguments]
    yield
    expect(all(equal(a, b) for a, b in zip(arguments, before, strict=True)), message)


@contextlib.contextmanager
def hinted(hint: str) -> Iterator[None]:
    """Append ``hint`` on its own line to the message of a failure raised inside the block."""
    try:
        yield
    except ExerciseFailure as failure:
        raise ExerciseFailure(f"{failure}\n  Hint: {hint}") from None


def count_cases(cases: Iterable[T], check_one: Callable[[T], int | None]) -> int:
    """Run ``check_one`` on each case in order (the first wrong case raises); the number of checks run.

    Each case counts as one check unless ``check_one`` returns how many it made.
    """
    total = 0
    for case in cases:
        made = check_one(case)
        total += 1 if made is None else made
    return total


def _is_stub(answer: object) -> bool:
    return answer is None or answer is ...


def _is_library_file(filename: str) -> bool:
    """Whether a traceback frame belongs to course_lib, the standard library or an installed package."""
    path = Path(filename).resolve() if not filename.startswith("<") else None
    if path is None:
        return False  # <string>, <ipython-input-...>: code the student typed
    if path.is_relative_to(_PACKAGE_DIR):
        return True
    prefixes = {Path(p).resolve() for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)}
    return any(path.is_relative_to(prefix) for prefix in prefixes)


def _student_frame(error: BaseException) -> traceback.FrameSummary | None:
    """The innermost traceback frame of code that is not the library's (the student's), if any."""
    frames = [f for f in traceback.extract_tb(error.__traceback__) if not _is_library_file(f.filename)]
    return frames[-1] if frames else None


def _library_origin(answer: object) -> str | None:
    """The course_lib file that defines ``answer`` when it is the library's own function or class."""
    code = getattr(getattr(answer, "__func__", answer), "__code__", None)
    module = sys.modules.get(getattr(answer, "__module__", None) or "")
    filename = code.co_filename if code is not None else getattr(module, "__file__", None) if isinstance(
        answer, type) else None
    if filename and Path(filename).resolve().is_relative_to(_PACKAGE_DIR):
        return Path(filename).resolve().relative_to(_PACKAGE_DIR.parent).as_posix()
    return None


def check(exercise_id: str, answer: object, *, quiet: bool = False, variant: int = 0) -> CheckResult:
    """Run the checker of ``exercise_id`` on ``answer``, print feedback and return the result.

    Args:
        exercise_id: e.g. ``"scoring.masked_softmax"``; see :func:`list_exercises`.
        answer: what the exercise asks for (usually a function).
        quiet: do not print.
        variant: 0 for the cases shown in the book; 1, 2, ... draw other random cases (the
            autograder's hidden tests).

    Returns:
        A :class:`CheckResult`. It never raises for a wrong or missing answer. An exception raised
        by the checker's own code (not inside the student's code) is reported as a checker error.
    """
    if exercise_id not in _CHECKERS:
        raise KeyError(f"no exercise {exercise_id!r}; known: {', '.join(sorted(_CHECKERS))}")
    fn, _ = _CHECKERS[exercise_id]
    token = _VARIANT.set(variant)
    try:
        if _is_stub(answer):
            raise _NotAnswered
        origin = _library_origin(answer)
        if origin is not None:
            raise ExerciseFailure(f"this is course_lib's own implementation ({origin}); the exercise asks for yours.")
        n = fn(answer) or 0
        result = CheckResult(exercise_id, True, True,
                             f"{exercise_id}: passed ({n} checks)." if n else
                             f"{exercise_id}: passed.", n)
    except (_NotAnswered, NotImplementedError):
        result = CheckResult(exercise_id, False, False,
                             f"{exercise_id}: not answered yet.\nReplace `raise NotImplementedError` "
                             "with your code and run the cell again.")
    except ExerciseFailure as failure:
        result = CheckResult(exercise_id, True, False, f"{exercise_id}: not yet right. {failure}")
    except Exception as error:
        frame = _student_frame(error)
        if frame is not None:  # the student's code crashed: show where, not our internals
            result = CheckResult(
                exercise_id, True, False,
                f"{exercise_id}: your code raised {type(error).__name__}: {error} "
                f"(line {frame.lineno}: {frame.line})",
            )
        else:  # no frame of the student's code: the checker itself is wrong
            where = traceback.extract_tb(error.__traceback__)[-1]
            result = CheckResult(
                exercise_id, True, False,
                f"{exercise_id}: the checker itself failed ({type(error).__name__}: {error}, in "
                f"{Path(where.filename).name} line {where.lineno}). This is a bug in course_lib, not in your "
                "answer: please report it.", checker_error=True,
            )
    finally:
        _VARIANT.reset(token)
    if not quiet:
        print(_wrap(result.message))
    return result


#: Printed feedback fits the book's code column (79 characters at a 1280-px window).
FEEDBACK_WIDTH = 78


def _wrap(message: str, width: int = FEEDBACK_WIDTH) -> str:
    """``message`` with each line wrapped at ``width``, continuation lines indented like their first."""
    lines = []
    for line in message.splitlines():
        indent = line[: len(line) - len(line.lstrip())]
        lines.append(textwrap.fill(line, width, subsequent_indent=indent + "  ", break_long_words=False,
                                   break_on_hyphens=False) if line.strip() else line)
    return "\n".join(lines)


class LargestTensorProbe(TorchDispatchMode):
    """Records the largest tensor (in elements) any operation creates while it is active: checkers use it
    to tell an answer that builds the (n, n) score matrix from one that works block by block."""

    def __init__(self) -> None:
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                self.largest = max(self.largest, t.numel())
        return out
