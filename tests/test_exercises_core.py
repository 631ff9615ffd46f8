"""The checkers' shared scaffolding (``course_lib/exercises/_core.py``), and two properties every checker of
the book must have: its generic final comparison catches a wrong answer that matches no anticipated mistake,
and the book's worked solution also passes the hidden variant of its cases (the autograder's hidden tests)."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
import torch
from exercise_helpers import solution_cells, solution_namespace, stub

from course_lib.teaching.exercises import ExerciseFailure, _core, check, checker

BOOK = Path(__file__).resolve().parents[1] / "book"
_CALL = re.compile(r"check\(\s*\"([^\"]+)\",\s*(\w+)\s*\)")


def _book_exercises() -> list[tuple[str, str, str, str]]:
    """``(notebook, solution label, exercise id, answer name)`` of every checker call inside a solution."""
    found = []
    for path in sorted(BOOK.glob("*.ipynb")):
        label = None
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type == "markdown":
                start = re.search(r"\{solution-start\}\s+(\S+)", cell.source)
                if start:
                    label = start.group(1)
                if "{solution-end}" in cell.source and not start:
                    label = None
            elif label is not None:
                found.extend((path.name, label, ex, name) for ex, name in _CALL.findall(cell.source))
    return found


EXERCISES = _book_exercises()


def test_every_registered_checker_is_called_in_a_worked_solution():
    assert sorted({ex for _, _, ex, _ in EXERCISES}) == sorted(_core.list_exercises())


@pytest.mark.parametrize("exercise", sorted(_core.list_exercises()))
def test_an_unanswered_exercise_is_reported_not_answered(exercise):
    # The student notebook's stub raises NotImplementedError when called; None and ... are stubs too.
    for unanswered in (stub, None, ...):
        result = check(exercise, unanswered, quiet=True)
        assert not result.answered and not result.passed and not result.checker_error, result.message
        assert result.status == "not answered"
        assert result.message.startswith(f"{exercise}: not answered yet"), result.message


def _perturb(value: object) -> object:
    """A slightly wrong result: one entry changed, which matches none of the checkers' anticipated mistakes."""
    if isinstance(value, torch.nn.Module):  # a module the exercise asks for: its outputs slightly wrong
        forward = value.forward
        value.forward = lambda *args, **kwargs: _perturb(forward(*args, **kwargs))
        return value
    if isinstance(value, torch.Tensor):
        flat = value.reshape(-1).clone()
        k = int(flat.detach().float().abs().argmax())
        if flat.dtype == torch.bool:
            flat[k] = ~flat[k]
        elif flat.is_floating_point():
            flat[k] = flat[k] * 1.01 + 1e-3
        else:
            flat[k] = flat[k] + 1
        return flat.reshape(value.shape)
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value * 1.01 + 1e-3
    if isinstance(value, str):
        return value + "x"
    if isinstance(value, (list, tuple)) and value:
        return type(value)([_perturb(value[0]), *value[1:]])
    raise TypeError(f"no perturbation for {type(value).__name__}")


def _solution(notebook: str, label: str, name: str):
    """The worked solution ``name``, with the functions of the chapter's earlier solutions it may call."""
    ns = solution_namespace(notebook)
    labels = [lab for nb, lab, _, _ in EXERCISES if nb == notebook]
    for earlier in dict.fromkeys(labels[:labels.index(label) + 1]):
        for source in solution_cells(notebook, earlier):
            if "def " in source:
                try:  # a cell may also run code that needs the chapter's variables: the defs come first
                    exec(compile(source, f"{notebook}:{earlier}", "exec"), ns)
                except Exception:
                    pass
    assert name in ns, f"no solution defines {name}"
    return ns[name]


@pytest.mark.parametrize(("notebook", "label", "exercise", "name"), EXERCISES,
                         ids=[ex for _, _, ex, _ in EXERCISES])
def test_generic_comparison_rejects_a_slightly_wrong_answer(notebook, label, exercise, name):
    solution = _solution(notebook, label, name)

    def slightly_wrong(*args, **kwargs):
        return _perturb(solution(*args, **kwargs))

    for variant in (0, 1):  # the book's cases and the autograder's hidden ones
        result = check(exercise, slightly_wrong, quiet=True, variant=variant)
        assert result.answered and not result.checker_error, result.message
        assert not result.passed, f"{exercise}, variant {variant}: an answer with one entry off passed"


@pytest.mark.parametrize(("notebook", "label", "exercise", "name"), EXERCISES,
                         ids=[ex for _, _, ex, _ in EXERCISES])
def test_worked_solution_passes_the_hidden_variant(notebook, label, exercise, name):
    solution = _solution(notebook, label, name)
    for variant in (0, 1):
        result = check(exercise, solution, quiet=True, variant=variant)
        assert result.passed, f"variant {variant}: {result.message}"


@pytest.fixture
def registered():
    """Register throw-away checkers and remove them afterwards (the registry is global)."""
    ids = []

    def register(exercise_id, fn):
        checker(exercise_id, "a test checker")(fn)
        ids.append(exercise_id)

    yield register
    for exercise_id in ids:
        _core._CHECKERS.pop(exercise_id)


def test_a_bug_in_the_checker_is_not_reported_as_the_students_error(monkeypatch):
    from course_lib.teaching.exercises import scoring

    # The checker's reference now fails (a TypeError raised inside course_lib), after a right answer returned.
    monkeypatch.setattr(scoring, "_loop_masked_softmax", _core._fmt)
    solution = _solution("03_scoring_functions.ipynb", "ch03-ex-masked-softmax", "my_masked_softmax")
    result = check("scoring.masked_softmax", solution, quiet=True)
    assert result.checker_error and result.status == "checker error"
    assert "bug in course_lib, not in your answer" in result.message
    assert "your code raised" not in result.message


def test_an_exception_in_the_students_code_is_the_students_error(registered):
    def direct(answer):
        answer(0)  # called without the call() wrapper: the student's frame is in the traceback
        return 1

    registered("_test.direct", direct)
    result = check("_test.direct", lambda x: 1 / x, quiet=True)
    assert not result.checker_error and result.status == "not yet right"
    assert "your code raised ZeroDivisionError" in result.message and "1 / x" in result.message


def test_call_names_the_case_and_lets_the_stub_through():
    with pytest.raises(ExerciseFailure, match=r"case A: your function raised ValueError: bad"):
        _core.call(lambda: (_ for _ in ()).throw(ValueError("bad")), "case A")
    with pytest.raises(NotImplementedError):
        _core.call(stub, "case B", 1)
    assert _core.call(lambda a, b=0: a + b, "case C", 1, b=2) == 3


def test_close_compares_shape_and_values_in_float64():
    x = torch.tensor([1.0, 2.0])
    assert _core.close(x, x.double())
    assert not _core.close(x, torch.tensor([1.0, 2.0, 3.0]))
    assert not _core.close([1.0, 2.0], x)
    assert not _core.close(x + 1e-3, x)


def test_variants_draw_other_cases_and_the_default_is_restored(registered):
    draws = []

    def record(answer):
        draws.append(torch.randn(3, generator=_core.generator(4)))
        return 1

    registered("_test.record", record)
    check("_test.record", lambda: None, quiet=True)
    check("_test.record", lambda: None, quiet=True, variant=1)
    check("_test.record", lambda: None, quiet=True)
    assert torch.equal(draws[0], draws[2]) and not torch.equal(draws[0], draws[1])
    assert _core._VARIANT.get() == 0


@pytest.mark.parametrize("path", sorted(p for p in BOOK.glob("*.ipynb") if "{exercise}" in p.read_text()),
                         ids=lambda p: p.stem)
def test_the_book_shows_not_answered_after_each_stub_and_passed_inside_each_solution(path):
    # What a reader sees under a stub is what a student sees; "passed" belongs to the hidden solution.
    inside, under_stub, in_solution = False, [], []
    for cell in nbformat.read(path, as_version=4).cells:
        if cell.cell_type == "markdown":
            if "{solution-start}" in cell.source:
                inside = True
            if "{solution-end}" in cell.source:
                inside = False
            continue
        if not _CALL.search(cell.source):
            continue
        text = "".join(o.get("text", "") for o in cell.outputs)
        ids = _CALL.findall(cell.source)
        (in_solution if inside else under_stub).extend(ids)
        for exercise, _ in ids:
            expected = "passed" if inside else "not answered yet"
            assert f"{exercise}: {expected}" in text, (path.name, exercise, text)
        assert "nbval-check-output" in cell.metadata.get("tags", []), (path.name, cell.source)
    assert under_stub and sorted(under_stub) == sorted(in_solution), path.name


def test_expect_match_names_the_first_matching_mistake_and_else_compares():
    expected = torch.tensor([1.0, 2.0, 3.0])
    mistakes = [(expected.flip(0), "reversed"), (lambda: expected * 2, "doubled")]
    _core.expect_match(expected.clone(), expected, "v", mistakes)
    with pytest.raises(ExerciseFailure, match="^doubled$"):
        _core.expect_match(expected * 2, expected, "v", mistakes)
    with pytest.raises(ExerciseFailure, match="v: values differ"):  # no anticipated mistake: the generic message
        _core.expect_match(expected + 0.5, expected, "v", mistakes)


def test_count_cases_counts_one_per_case_unless_told_and_stops_at_the_first_failure():
    assert _core.count_cases([1, 2, 3], lambda case: None) == 3
    assert _core.count_cases([1, 2], lambda case: 2) == 4
    seen = []

    def one(case):
        seen.append(case)
        _core.expect(case < 2, f"case {case} is wrong")

    with pytest.raises(ExerciseFailure, match="case 2 is wrong"):
        _core.count_cases([1, 2, 3], one)
    assert seen == [1, 2]


def test_printed_feedback_fits_the_books_column_and_keeps_every_word(registered, capsys):
    long_hint = "fully masked rows must give all-zero weights, but yours contain NaN " * 3

    def long_feedback(answer):
        raise ExerciseFailure(long_hint + "\n  expected " + ", ".join(["0.125"] * 20))

    registered("_test.long_feedback", long_feedback)
    result = check("_test.long_feedback", lambda: None)
    printed = capsys.readouterr().out
    assert max(len(line) for line in printed.splitlines()) <= _core.FEEDBACK_WIDTH
    assert len(printed.splitlines()) > len(result.message.splitlines())
    assert printed.split() == result.message.split()
    check("_test.long_feedback", None)
    assert max(len(line) for line in capsys.readouterr().out.splitlines()) <= _core.FEEDBACK_WIDTH


def _calls(exercise: str, solution, variant: int) -> list:
    """What the checker passes to the answer (as comparable values), running the worked solution."""
    def canonical(value: object) -> object:
        if isinstance(value, torch.Tensor):
            return ("tensor", tuple(value.shape), str(value.dtype), tuple(value.detach().flatten().tolist()))
        if isinstance(value, torch.nn.Module):  # a model: its kind and its weights
            return (type(value).__name__, tuple(canonical(p) for p in value.parameters()))
        if isinstance(value, (list, tuple)):
            return tuple(canonical(v) for v in value)
        if isinstance(value, dict):
            return tuple((k, canonical(v)) for k, v in sorted(value.items()))
        return repr(value)

    calls = []

    def recording(*args, **kwargs):
        calls.append(canonical((args, kwargs)))
        return solution(*args, **kwargs)

    result = check(exercise, recording, quiet=True, variant=variant)
    assert result.passed, result.message
    return calls


@pytest.mark.parametrize(("notebook", "label", "exercise", "name"), EXERCISES,
                         ids=[ex for _, _, ex, _ in EXERCISES])
def test_the_hidden_variant_draws_mostly_other_cases_than_the_book(notebook, label, exercise, name):
    # The autograder's hidden tests must not repeat the cases a student saw pass in the notebook.
    solution = _solution(notebook, label, name)
    public = _calls(exercise, solution, 0)
    hidden = _calls(exercise, solution, 1)
    repeated = [c for c in hidden if c in public]
    assert len(repeated) <= len(hidden) / 2, f"{len(repeated)} of {len(hidden)} hidden cases are public ones"


@pytest.mark.parametrize(("notebook", "label", "exercise", "name"), EXERCISES,
                         ids=[ex for _, _, ex, _ in EXERCISES])
def test_checking_leaves_the_global_random_state_alone(notebook, label, exercise, name):
    import random

    import numpy as np

    solution = _solution(notebook, label, name)
    torch.manual_seed(1234)  # the student's own seeding
    random.seed(1234)
    np.random.seed(1234)
    expected = torch.rand(5), random.random(), np.random.rand()
    torch.manual_seed(1234)
    random.seed(1234)
    np.random.seed(1234)
    for variant in (0, 1):
        assert check(exercise, solution, quiet=True, variant=variant).passed
    # The next draws are those the student's seed gives, as if no checker had run in between.
    assert torch.equal(torch.rand(5), expected[0]) and random.random() == expected[1]
    assert np.random.rand() == expected[2]


def test_expect_same_compares_exactly_and_names_the_first_matching_mistake():
    mistakes = [([2, 1], "reversed"), (lambda: [1, 2, 2], "repeated")]
    _core.expect_same([1, 2], [1, 2], mistakes, otherwise="wrong")
    with pytest.raises(ExerciseFailure, match="^reversed$"):
        _core.expect_same([2, 1], [1, 2], mistakes, otherwise="wrong")
    with pytest.raises(ExerciseFailure, match="^repeated$"):
        _core.expect_same([1, 2, 2], [1, 2], mistakes, otherwise="wrong")
    with pytest.raises(ExerciseFailure, match="^no: 7$"):  # the generic message, built only when needed
        _core.expect_same(7, 3, mistakes, otherwise=lambda: "no: 7")
    with pytest.raises(ExerciseFailure, match="^far$"):  # another comparison
        _core.expect_same(1.5, 1.0, [(1.4, "near")], otherwise="far", same=lambda a, b: abs(a - b) < 0.01)


def test_equal_needs_the_same_type_shape_dtype_and_values():
    mask = torch.tensor([True, False])
    assert _core.equal(mask, mask.clone()) and _core.equal([1, 2], [1, 2])
    assert not _core.equal(mask.int(), mask)  # an int mask is not a bool mask
    assert not _core.equal(mask[None], mask) and not _core.equal([True, False], mask)
    assert not _core.equal(1.0, 1) and not _core.equal(True, 1)


def test_expect_none_of_is_silent_for_the_right_result_and_for_an_unforeseen_one():
    expected = torch.tensor([1.0, 2.0])
    _core.expect_none_of(expected, expected, [(expected, "the mistake coincides with the answer here")])
    _core.expect_none_of(expected + 1, expected, [(expected * 3, "tripled")])
    with pytest.raises(ExerciseFailure, match="^tripled$"):
        _core.expect_none_of(expected * 3, expected, [(expected * 3, "tripled")])


def test_expect_raises_and_call_explained_word_the_failure_per_case():
    def raising(error):
        def answer(*args):
            raise error
        return answer

    _core.expect_raises(raising(KeyError("k")), (1,), KeyError, other=str, returned=str)
    with pytest.raises(ExerciseFailure, match="^other ValueError$"):
        _core.expect_raises(raising(ValueError()), (1,), KeyError,
                            other=lambda e: f"other {type(e).__name__}", returned=str)
    with pytest.raises(ExerciseFailure, match="^returned 2$"):
        _core.expect_raises(lambda x: x + 1, (1,), KeyError, other=str, returned=lambda r: f"returned {r}")
    with pytest.raises(NotImplementedError):
        _core.expect_raises(stub, (1,), KeyError, other=str, returned=str)
    with pytest.raises(ExerciseFailure, match="^crashed: boom$"):
        _core.call_explained(raising(RuntimeError("boom")), lambda e: f"crashed: {e}")
    with pytest.raises(NotImplementedError):
        _core.call_explained(stub, str, 1)
    assert _core.call_explained(lambda a, b: a * b, str, 3, b=4) == 12


def test_variant_is_the_running_checks_variant(registered):
    seen = []
    registered("_test.variant", lambda answer: seen.append(_core.variant()) or 1)
    check("_test.variant", lambda: None, quiet=True, variant=3)
    check("_test.variant", lambda: None, quiet=True)
    assert seen == [3, 0] and _core.variant() == 0


def test_hinted_appends_the_hint_to_a_failure_only():
    with _core.hinted("look at the axes"):
        pass
    with pytest.raises(ExerciseFailure, match=r"^values differ\n  Hint: look at the axes$"), _core.hinted(
            "look at the axes"):
        raise ExerciseFailure("values differ")


def test_book_or_drawn_gives_the_books_cases_only_in_variant_0(registered):
    seen = []
    registered("_test.cases", lambda answer: seen.append(_core.book_or_drawn(
        [1, 2], 5, lambda g: [_core.integer(g, 10, 20) for _ in range(2)])) or 1)
    for variant in (0, 1, 2, 0):
        check("_test.cases", lambda: None, quiet=True, variant=variant)
    assert seen[0] == seen[3] == [1, 2]
    assert seen[1] != seen[2] and all(10 <= v <= 20 for v in seen[1] + seen[2])


def test_expect_tensor_checks_type_then_dtype_then_shape_and_returns_the_tensor():
    x = torch.zeros(2, 3)
    assert _core.expect_tensor(x, "v", (2, 3), "(a, b)", floating=True) is x
    assert _core.expect_tensor(torch.zeros(4, dtype=torch.long), "v") is not None  # no dtype or shape asked
    with pytest.raises(ExerciseFailure, match=r"^v: expected a torch.Tensor, got list$"):
        _core.expect_tensor([1.0], "v", (1,))
    with pytest.raises(ExerciseFailure, match=r"^v: expected a floating-point tensor, got dtype torch.int64$"):
        _core.expect_tensor(torch.zeros(3, 2, dtype=torch.long), "v", (2, 3), floating=True)
    with pytest.raises(ExerciseFailure, match=r"^v: expected shape \(2, 3\) = \(a, b\), got \(3, 2\)$"):
        _core.expect_tensor(torch.zeros(3, 2), "v", (2, 3), "(a, b)")
    with pytest.raises(ExerciseFailure, match=r"^v: expected shape \(2, 3\), got \(3, 2\)$"):
        _core.expect_tensor(torch.zeros(3, 2), "v", (2, 3))


def test_unchanged_fails_only_when_an_argument_was_changed_in_place():
    x, words = torch.arange(3.0), [["a", "b"]]
    with _core.unchanged("changed", x, words):
        y = x * 2  # a new tensor: fine
    assert y[1] == 2
    with pytest.raises(ExerciseFailure, match="^changed X$"), _core.unchanged("changed X", x, words):
        x.mul_(2)
    with pytest.raises(ExerciseFailure, match="^changed words$"), _core.unchanged("changed words", x, words):
        words[0].append("c")
    with pytest.raises(NotImplementedError), _core.unchanged("not reached", x):  # the stub passes through
        stub()
