"""make assignments: student versions keep everything but the solutions."""

from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat
import pytest

from course_lib.assignments import checker_results, grade_notebook, make_assignments, solution_sources, strip_solutions

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
md, code = nbformat.v4.new_markdown_cell, nbformat.v4.new_code_cell


def _toy_notebook() -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        md("# Toy chapter"),
        code("x = 1"),
        md("```{exercise} Add one\n:label: toy-ex-add\n\nWrite `add_one`.\n```"),
        code("def add_one(x):\n    # YOUR CODE HERE\n    raise NotImplementedError"),
        md("```{solution-start} toy-ex-add\n:class: dropdown\n```"),
        code("def add_one(x):\n    return x + 1  # SECRET-GATED"),
        md("Because adding one is what it asks. SECRET-PROSE"),
        md("```{solution-end}\n```"),
        code("print(add_one)"),
        md("```{exercise} Derive\n:label: toy-ex-derive\n\nDerive it.\n```\n\n"
           "```{solution} toy-ex-derive\n:class: dropdown\n\nSECRET-TEXT derivation.\n```"),
        md("````{solution} toy-ex-derive\n:class: dropdown\n\nSECRET-FOUR ```inner```\n````"),
    ]
    nb.cells[1].outputs = [nbformat.v4.new_output("stream", text="1\n")]
    return nb


def test_strip_solutions_removes_gated_and_directive_solutions():
    student = strip_solutions(_toy_notebook())
    text = json.dumps(student)
    for secret in ("SECRET-GATED", "SECRET-PROSE", "SECRET-TEXT", "SECRET-FOUR", "solution-start",
                   "solution-end", "{solution}"):
        assert secret not in text, secret


def test_strip_solutions_keeps_statements_stubs_and_checker_cells():
    student = strip_solutions(_toy_notebook())
    sources = [c.source for c in student.cells]
    assert sources[0] == "# Toy chapter"
    assert any("raise NotImplementedError" in s for s in sources)
    assert any(s.startswith("```{exercise} Add one") for s in sources)
    assert any("Derive it." in s for s in sources)
    assert "print(add_one)" in sources


def test_strip_solutions_clears_outputs_and_leaves_the_original_untouched():
    nb = _toy_notebook()
    student = strip_solutions(nb)
    assert all(c.outputs == [] for c in student.cells if c.cell_type == "code")
    assert nb.cells[1].outputs, "the instructor notebook must keep its outputs"
    assert any("SECRET-GATED" in c.source for c in nb.cells)


def test_unbalanced_solution_blocks_are_an_error_not_a_silent_truncation():
    nb = _toy_notebook()
    del nb.cells[7]  # the solution-end
    with pytest.raises(ValueError, match="no matching solution-end"):
        strip_solutions(nb)
    nb = _toy_notebook()
    del nb.cells[4]  # the solution-start
    with pytest.raises(ValueError, match="solution-end without a solution-start"):
        strip_solutions(nb)


def test_solution_sources_lists_every_solution():
    sources = solution_sources(_toy_notebook())
    assert any("SECRET-GATED" in s for s in sources)
    assert any("SECRET-TEXT" in s for s in sources)
    assert any("SECRET-FOUR" in s for s in sources)


@pytest.fixture(scope="module")
def dist(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    return out, make_assignments(BOOK, out)


def test_every_chapter_with_exercises_gets_both_versions(dist):
    out, written = dist
    chapters = [p for p in sorted(BOOK.glob("*.ipynb"))
                if "{exercise}" in p.read_text()]
    assert chapters, "the book has no exercises"
    assert sorted(p.name for p in written["student"]) == [p.name for p in chapters]
    assert sorted(p.name for p in written["instructor"]) == [p.name for p in chapters]
    for path in written["instructor"]:
        assert path.read_bytes() == (BOOK / path.name).read_bytes()


def _solution_only_lines(nb: nbformat.NotebookNode) -> set[str]:
    """Lines that occur in solutions and nowhere else in the instructor notebook."""
    solutions = solution_sources(nb)
    rest = json.dumps([c.source for c in strip_solutions(nb).cells])
    lines = set()
    for src in solutions:
        for line in src.splitlines():
            line = line.strip()
            if len(line) >= 12 and json.dumps(line)[1:-1] not in rest:
                lines.add(line)
    return lines


def test_no_solution_code_survives_in_a_student_notebook(dist):
    out, written = dist
    for student_path in written["student"]:
        instructor = nbformat.read(BOOK / student_path.name, as_version=4)
        secret_lines = _solution_only_lines(instructor)
        assert secret_lines, f"{student_path.name}: found no solution to check"
        student_text = student_path.read_text()
        leaked = [line for line in secret_lines if json.dumps(line)[1:-1] in student_text]
        assert not leaked, f"{student_path.name} leaks solution lines: {leaked[:3]}"


def test_instructor_notebooks_pass_every_checker_they_call(dist):
    out, written = dist
    for path in written["instructor"]:
        nb = nbformat.read(path, as_version=4)
        checker_cells = [c for c in nb.cells if c.cell_type == "code" and "check(" in c.source]
        assert checker_cells, f"{path.name}: no checker call"
        for cell in checker_cells:
            text = "".join(o.get("text", "") for o in cell.outputs)
            assert "passed" in text and "not yet right" not in text and "not answered" not in text, (
                f"{path.name}: checker cell {cell.source!r} printed {text!r}"
            )


def _student_notebooks() -> list[str]:
    return [p.name for p in sorted(BOOK.glob("*.ipynb")) if "{exercise}" in p.read_text()]


@pytest.mark.parametrize("name", _student_notebooks())
def test_student_notebook_runs_top_to_bottom_and_reports_not_answered(name, dist):
    from nbclient import NotebookClient

    out, _ = dist
    nb = nbformat.read(out / "student" / name, as_version=4)
    NotebookClient(nb, timeout=900, kernel_name="python3",
                   resources={"metadata": {"path": str(BOOK)}}).execute()
    checker_cells = [c for c in nb.cells if c.cell_type == "code" and "check(" in c.source]
    assert checker_cells
    for cell in checker_cells:
        text = "".join(o.get("text", "") for o in cell.outputs)
        assert "not answered yet" in text, f"{name}: checker cell {cell.source!r} printed {text!r}"


def test_checker_results_reads_every_verdict_of_the_stored_instructor_outputs():
    nb = nbformat.read(BOOK / "03_scoring_functions.ipynb", as_version=4)
    calls = [c for c in nb.cells if c.cell_type == "code" and "check(" in c.source]
    rows = checker_results(nb)
    assert len(rows) == len(calls) >= 2
    assert {status for _, status, _ in rows} == {"passed"}


def test_grading_a_submission_reports_each_exercise_and_survives_a_crashing_cell(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        code("import torch\nfrom course_lib.exercises import check"),
        code("def stub(X, valid_lens=None):\n    raise NotImplementedError"),
        code('_ = check("scoring.masked_softmax", stub)'),
        code("1 / 0  # a broken cell must not stop the grading"),
        code("def ignores_mask(X, valid_lens=None):\n    return torch.softmax(X, dim=-1)"),
        code('_ = check("scoring.masked_softmax", ignores_mask)'),
        code('undefined_name\n_ = check("scoring.masked_softmax", stub)'),
    ]
    path = tmp_path / "submission.ipynb"
    nbformat.write(nb, path)
    rows = grade_notebook(path)
    assert [(exercise, status) for exercise, status, _ in rows] == [
        ("scoring.masked_softmax", "not answered"),
        ("scoring.masked_softmax", "not yet right"),
        ("scoring.masked_softmax", "not run"),
    ]
    assert "not yet right" in rows[1][2] and len(rows[1][2]) > len("scoring.masked_softmax: not yet right. ")
    assert nbformat.read(path, as_version=4).cells[2].outputs == [], "the submission file must stay untouched"


def test_grade_command_prints_a_summary_and_rejects_a_missing_file(tmp_path, capsys):
    from course_lib.assignments import main

    assert main(["grade", str(tmp_path / "nope.ipynb")]) == 2
    assert "no notebook" in capsys.readouterr().err
    assert main(["grade"]) == 2


def test_every_exercise_statement_survives_in_the_student_notebook(dist):
    out, written = dist
    for student_path in written["student"]:
        instructor = (BOOK / student_path.name).read_text()
        labels = set(re.findall(r":label: (\S+?)\\n", instructor))
        assert labels, f"{student_path.name}: no exercise labels found"
        student = student_path.read_text()
        missing = sorted(label for label in labels if f":label: {label}" not in student)
        assert not missing, f"{student_path.name}: the statements of {missing} are missing from the student version"


def test_text_sharing_a_cell_with_a_marker_is_kept_and_the_solution_is_not():
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        md("# Toy"),
        md("```{exercise} One\n:label: toy-one\n\nSTATEMENT-ONE\n```\n\n"
           "```{solution-start} toy-one\n:class: dropdown\n```\nSECRET-HEAD"),
        code("SECRET_CODE = 1"),
        md("SECRET-TAIL\n\n```{solution-end}\n```\n\n```{exercise} Two\n:label: toy-two\n\nSTATEMENT-TWO\n```"),
        md("```{solution-start} toy-two\n:class: dropdown\n```\nSECRET-INLINE\n```{solution-end}\n```\nAFTER-TWO"),
    ]
    text = json.dumps(strip_solutions(nb))
    for kept in ("STATEMENT-ONE", "STATEMENT-TWO", "AFTER-TWO", ":label: toy-one", ":label: toy-two"):
        assert kept in text, kept
    for secret in ("SECRET-HEAD", "SECRET_CODE", "SECRET-TAIL", "SECRET-INLINE", "solution-start", "solution-end"):
        assert secret not in text, secret
    assert {"SECRET-HEAD", "SECRET_CODE = 1", "SECRET-TAIL", "SECRET-INLINE"} <= {
        s.strip() for src in solution_sources(nb) for s in src.split("\n\n")}
