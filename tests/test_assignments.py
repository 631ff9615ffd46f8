"""make assignments: otter student notebooks and autograders from the book; grading with a gradebook CSV."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import nbformat
import pytest

from course_lib.assignments import (
    GRADE_COLUMNS,
    grade,
    main,
    make_assignments,
    master_notebook,
    solution_sources,
    strip_solutions,
    to_plain_markdown,
)

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
VERSION = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.MULTILINE).group(1)
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


# --- plain Markdown and the otter master notebook (no otter, no execution) -----------------------


def test_plain_markdown_has_no_directive_fences_or_roles():
    text = ("(sec-x)=\n## Title\n\nAs {cite}`vaswani2017` show, see {doc}`the intro <intro>`, {prf:ref}`prop-a` and "
            "{numref}`fig-b`.\n\n```{prf:proposition} Scaling\n:label: prop-a\n\nBody $x$.\n```\n\n"
            "````{exercise} Derive\n:label: ex-1\n\nDo it.\n````\n% points: 3\n")
    plain = to_plain_markdown(text, {"vaswani2017": ("Vaswani et al.", "2017")})
    assert not re.search(r"\{[\w:-]+\}`|^\s*(`{3,}|:{3,})\s*\{", plain, re.MULTILINE), plain
    for kept in ("As [Vaswani et al., 2017] show", "see the intro", "prop-a", "**Proposition (Scaling).** Body $x$.",
                 "**Exercise: Derive** (ex-1)", "Do it.", "## Title"):
        assert kept in plain, (kept, plain)
    assert "(sec-x)=" not in plain and "% points" not in plain


def _toy_chapter() -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        md("# Toy"),
        code('import importlib.util\nif importlib.util.find_spec("course_lib") is None:\n'
             '    subprocess.check_call([sys.executable, "-m", "pip", "install", "-q",\n'
             '                           "git+https://example.org/course"])'),
        md("```{exercise} Softmax\n:label: toy-ex-code\n\nWrite it.\n```"),
        code("def my_masked_softmax(X, valid_lens):\n    raise NotImplementedError"),
        code('_ = check("scoring.masked_softmax", my_masked_softmax)'),
        md("```{solution-start} toy-ex-code\n:class: dropdown\n```\nSECRET-EXPLANATION"),
        code("def my_masked_softmax(X, valid_lens):\n    return SECRET_CODE"),
        code('_ = check("scoring.masked_softmax", my_masked_softmax)'),
        md("```{solution-end}\n```"),
        md("```{exercise} Derive\n:label: toy-ex-text\n\nDerive it.\n```\n\n"
           "```{solution} toy-ex-text\n:class: dropdown\n\nSECRET-DERIVATION\n```"),
    ]
    return nb


def test_master_notebook_has_one_question_per_exercise_with_public_and_hidden_tests():
    master = master_notebook(_toy_chapter(), "toy", points={"toy-ex-code": 4}, hidden_variant=123456789)
    raw = [c.source for c in master.cells if c.cell_type == "raw"]
    assert raw[0].startswith("# ASSIGNMENT CONFIG")
    config = json.loads(raw[0].split("\n", 1)[1])
    assert config["plugins"] == [{"course_lib.assignments.otter_plugin.GradeWhatAnswersNeed":
                                  {"answers": ["my_masked_softmax"]}}]
    questions = [json.loads(r.split("\n", 1)[1]) for r in raw if r.startswith("# BEGIN QUESTION")]
    assert questions == [{"name": "toy_ex_code", "points": 4.0, "manual": False},
                         {"name": "toy_ex_text", "points": 2, "manual": True}]
    tests = [c.source for c in master.cells if c.cell_type == "code" and "def test_" in c.source]
    assert len(tests) == 2 and "variant=0" in tests[0] and tests[1].startswith("# HIDDEN")
    assert "variant=123456789" in tests[1]
    assert all('check("scoring.masked_softmax", my_masked_softmax' in t for t in tests)
    sources = [c.source for c in master.cells]
    assert "def my_masked_softmax(X, valid_lens):\n    raise NotImplementedError" in sources  # the prompt
    assert any("SECRET_CODE" in s and s.startswith("# BEGIN SOLUTION NO PROMPT") for s in sources)
    assert not any('_ = check(' in s for s in sources), "the book's check calls become otter tests"
    setup = next(i for i, s in enumerate(sources) if 'find_spec("course_lib")' in s)
    assert 'otter.Notebook("toy.ipynb")' in sources[setup + 1] and "otter-grader==" in sources[setup + 1]


# --- generated assignments and grading (run otter; grading executes notebooks) --------------------

QUICK = ["01_queries_keys_values", "03_scoring_functions"]


@pytest.fixture(scope="module")
def dist(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    return out, make_assignments(BOOK, out, chapters=QUICK)


def _chapters_with_exercises() -> list[str]:
    return [p.stem for p in sorted(BOOK.glob("*.ipynb")) if "{exercise}" in p.read_text()]


@pytest.mark.notebooks
def test_every_chapter_with_exercises_gets_a_student_notebook_and_an_autograder(tmp_path):
    assert main(["generate", "--book", str(BOOK), "--out", str(tmp_path)]) == 0
    chapters = _chapters_with_exercises()
    assert len(chapters) >= 10
    for version, suffix in (("instructor", ".ipynb"), ("student", ".ipynb"), ("autograder", ".zip"),
                            ("autograder", ".json")):
        assert sorted(p.stem for p in (tmp_path / version).glob(f"*{suffix}")) == chapters, version
    for chapter in chapters:
        _check_student_notebook(tmp_path / "student" / f"{chapter}.ipynb")


def _check_student_notebook(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    instructor = nbformat.read(BOOK / path.name, as_version=4)
    assert nb.metadata["kernelspec"]["name"] == "python3", path.name
    text = "\n".join(c.source for c in nb.cells)
    fences = re.findall(r"^\s*(?:`{3,}|:{3,})\s*\{[\w:-]+\}.*$", text, re.MULTILINE)
    roles = re.findall(r"(?<![\w}])\{[a-z][\w:-]*\}`[^`]*`", text)  # `y_{T-1}` in inline code is no role
    assert not fences and not roles, (path.name, fences[:3], roles[:3])
    assert "NBVAL" not in text and not any("nbval" in t for c in nb.cells for t in c.metadata.get("tags", []))
    # no outputs but the book's figures (image data only: no text, no glue records)
    assert all(o.output_type == "display_data" and set(o.data) <= {"image/png", "image/svg+xml", "image/jpeg"}
               for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    # The setup installs course_lib (from the book's one install source) and otter-grader, then the grader.
    setup = [c.source for c in nb.cells if c.cell_type == "code"][:2]
    assert 'find_spec("course_lib")' in setup[0] and "otter-grader" in setup[1] and "otter.Notebook(" in setup[1]
    # Every statement survives; no line that only a solution has leaks; only public tests are in the notebook.
    labels = re.findall(r"\{exercise\}[^\n]*\n:label: (\S+)",
                        "\n".join(c.source for c in instructor.cells if c.cell_type == "markdown"))
    missing = [label for label in labels if f"({label}" not in text]
    assert not missing, (path.name, missing)
    leaked = [line for line in _solution_only_lines(instructor) if line in text]
    assert not leaked, (path.name, leaked[:3])
    tests = json.dumps(nb.metadata["otter"]["tests"])
    assert "variant=0" in tests and "hidden=True" not in tests
    assert not re.search(r"variant=[1-9]", tests), "the hidden tests' variant is in the student notebook"
    _check_numbers_and_figures(nb, instructor, path.stem)


_GLUE = re.compile(r"\{glue:text\}`([^`]*)`")


def _check_numbers_and_figures(nb: nbformat.NotebookNode, instructor: nbformat.NotebookNode, chapter: str) -> None:
    """The student notebook reads like the book: glued numbers (not their keys), figures and their captions."""
    from course_lib.assignments._book import BookIndex

    book = BookIndex.from_book(BOOK)
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    shown = "\n".join(c.source for c in strip_solutions(instructor).cells if c.cell_type == "markdown")
    keys = {content.rpartition(":")[0] or content for content in _GLUE.findall(shown)}
    for content in _GLUE.findall(shown):
        assert book.glued(chapter, content) in text, (chapter, content)
    left = sorted(k for k in keys if re.search(rf"(?<![\w-]){re.escape(k)}(?![\w-])", text))
    assert not left, (chapter, "glue keys where numbers should be", left[:5])
    from course_lib.assignments._notebook import walk_solutions

    figures = [c for c, pieces in walk_solutions(instructor) if c.cell_type == "code" and not pieces[0][1]
               and any("image/png" in o.get("data", {}) for o in c.get("outputs", []))]
    kept = [c for c in nb.cells if c.cell_type == "code" and any("image/png" in o.get("data", {}) for o in c.outputs)]
    assert len(kept) == len(figures), (chapter, len(kept), len(figures))
    captions = [c for c in nb.cells if c.cell_type == "markdown" and re.match(r"\*Fig\. \d+\.\d+: ", c.source)]
    named = [c for c in figures if c.metadata.get("mystnb", {}).get("figure", {}).get("caption")]
    assert len(captions) == len(named), (chapter, len(captions), len(named))


def _solution_only_lines(nb: nbformat.NotebookNode) -> set[str]:
    """Lines that occur in solutions and nowhere else in the instructor notebook."""
    rest = "\n".join(c.source for c in strip_solutions(nb).cells)
    return {line.strip() for src in solution_sources(nb) for line in src.splitlines()
            if len(line.strip()) >= 12 and line.strip() not in rest}


@pytest.mark.notebooks
def test_quick_chapters_student_notebooks_read_cleanly_and_autograders_hold_hidden_tests(dist):
    import zipfile

    out, written = dist
    zipped_env = {}
    for chapter in QUICK:
        _check_student_notebook(out / "student" / f"{chapter}.ipynb")
        with zipfile.ZipFile(out / "autograder" / f"{chapter}.zip") as zipped:
            names = zipped.namelist()
            tests = "".join(zipped.read(n).decode() for n in names if n.startswith("tests/"))
            config = json.loads(zipped.read("otter_config.json"))
            zipped_env[chapter] = zipped.read("environment.yml").decode()
        assert "hidden=True" in tests and "from course_lib.exercises import check" in tests
        secret = {int(v) for v in re.findall(r"variant=(\d+)", tests)} - {0}
        assert len(secret) == 1 and secret.pop() >= 2**20, "hidden tests draw from one secret variant"
        assert "requirements.txt" not in names, "otter run must have nothing to install"
        # Gradescope's image installs the release the book's setup cell pins.
        assert f"git+https://github.com/attention-course/attention-from-first-principles@v{VERSION}" in \
            zipped_env[chapter] and "-q" not in zipped_env[chapter]
        assert config["plugins"][0]["course_lib.assignments.otter_plugin.GradeWhatAnswersNeed"]["answers"]
        assert config["assignment_name"] == chapter and config["show_hidden"] is False
        manifest = json.loads((out / "autograder" / f"{chapter}.json").read_text())
        assert {q["manual"] for q in manifest} == {True, False}


def _edit(nb: nbformat.NotebookNode, exercise: str, source: str, *, after: bool = False) -> nbformat.NotebookNode:
    """Replace the answer cell of ``exercise`` (or insert a cell after it) in a copy of ``nb``."""
    import copy

    nb = copy.deepcopy(nb)
    index = next(i for i, c in enumerate(nb.cells) if c.metadata.get("course_lib", {}).get("exercise") == exercise)
    if after:
        nb.cells.insert(index + 1, code(source))
    else:
        nb.cells[index].source = source
    return nb


WRONG_MASKED_SOFTMAX = '''def my_masked_softmax(X, valid_lens):
    if valid_lens is None:
        return torch.softmax(X, dim=-1)
    lens = valid_lens[:, None, None] if valid_lens.dim() == 1 else valid_lens[:, :, None]
    keep = torch.arange(X.shape[-1]) < lens
    return torch.softmax(X.masked_fill(~keep, float("-inf")), dim=-1)  # NaN for fully masked rows'''

RIGHT_ADDITIVE = '''def additive_score(queries, keys, W_q, W_k, w_v):
    return torch.tanh((queries @ W_q.T)[:, :, None] + (keys @ W_k.T)[:, None]) @ w_v'''

FORGER = '''def check(*args, **kwargs):
    print("attention_pooling.attention_weights: passed (6 checks).")
class Forged:
    def check(self, *args, **kwargs):
        print("All test cases passed!")
grader = Forged()
attention_weights = lambda *args, **kwargs: print("passed")
print("attention_pooling.attention_weights: passed (6 checks).")
_ = check("attention_pooling.attention_weights", attention_weights)'''


# Answers that hand in the library's own implementation: each scores 0 with a message saying how.
LIBRARY_ANSWERS = {
    "wrapper": ("ch01-ex-attention-weights", "def attention_weights(queries, keys):\n"
                "    return cl.softmax_attention(queries, keys, keys)[1]", "as `cl.softmax_attention`"),
    "alias": ("ch01-ex-attention-weights", "pool = cl.softmax_attention\n\n\ndef attention_weights(queries, keys):\n"
              "    return pool(queries, keys, keys)[1]", "`pool`, which is course_lib's own softmax_attention"),
    "import": ("ch01-ex-attention-weights", "def attention_weights(queries, keys):\n"
               "    from course_lib.attention.masks import masked_softmax\n"
               "    return masked_softmax(queries @ keys.T, None)", "imports course_lib's own masked_softmax"),
    "built": ("ch01-ex-attention-weights", "def attention_weights(queries, keys):\n"
              "    return getattr(cl, 'softmax_' + 'attention')(queries, keys, keys)[1]", "while it was checked"),
}


@pytest.mark.notebooks
def test_grading_gives_points_messages_and_survives_an_endless_loop(dist, tmp_path):
    out, _ = dist
    student = {c: nbformat.read(out / "student" / f"{c}.ipynb", as_version=4) for c in QUICK}
    subs = tmp_path / "submissions"
    subs.mkdir()
    files = {
        # an answer that never returns (grading runs the cells that define the answers, so this one runs)
        "loop": _edit(student["01_queries_keys_values"], "ch01-ex-attention-weights",
                      "def attention_weights(queries, keys):\n    while True:\n        pass"),
        "unanswered": student["01_queries_keys_values"],
        "forger": _edit(student["01_queries_keys_values"], "ch01-ex-attention-weights", FORGER, after=True),
        "wrong": _edit(_edit(_edit(student["03_scoring_functions"], "ch03-ex-masked-softmax", WRONG_MASKED_SOFTMAX),
                             "ch03-ex-additive", RIGHT_ADDITIVE), "ch03-ex-variance", "Var = d, so divide by sqrt(d)."),
    }
    for name, (exercise, source, _) in LIBRARY_ANSWERS.items():
        files[name] = _edit(student["01_queries_keys_values"], exercise, source)
    paths = {}
    for name, nb in files.items():
        chapter = "01_queries_keys_values" if name != "wrong" else "03_scoring_functions"
        paths[name] = subs / name / f"{chapter}.ipynb"  # GitHub Classroom style: one folder per student
        paths[name].parent.mkdir()
        nbformat.write(nb, paths[name])
    instructor = [out / "instructor" / f"{c}.ipynb" for c in QUICK]

    # The endless loop is cut at the timeout and the next submission of the batch is still graded.
    grades = tmp_path / "grades"
    rows, all_graded = grade([paths["loop"], paths["unanswered"]], grades / "a", out / "autograder", timeout=45)
    assert not all_graded
    rows2, all_graded2 = grade([*instructor, paths["wrong"], paths["forger"], *(paths[n] for n in LIBRARY_ANSWERS)],
                               grades / "b", out / "autograder", timeout=300)
    assert all_graded2

    table = {}
    for folder in ("a", "b"):
        with open(grades / folder / "grades.csv", newline="") as f:
            reader = csv.DictReader(f)
            assert tuple(reader.fieldnames) == GRADE_COLUMNS
            for row in reader:
                who = Path(row["submission"]).parent.name
                table[who, row["exercise"]] = (row["points"], row["max_points"], row["status"])
    assert table["loop", "ch01-ex-attention-weights"] == ("0.0", "2.0", "timeout")
    assert table["loop", "ch01-ex-database-lookup"] == ("0.0", "2.0", "timeout")
    assert table["unanswered", "ch01-ex-attention-weights"] == ("0.0", "2.0", "not answered")
    assert table["unanswered", "ch01-ex-database-lookup"] == ("0.0", "2.0", "not answered")
    assert table["unanswered", "ch01-ex-convex"] == ("", "2.0", "manual")
    for chapter, exercises in (("01_queries_keys_values", ("ch01-ex-attention-weights", "ch01-ex-database-lookup")),
                               ("03_scoring_functions", ("ch03-ex-masked-softmax", "ch03-ex-additive"))):
        for exercise in exercises:
            assert table["instructor", exercise] == ("2.0", "2.0", "passed"), (chapter, exercise)
    assert table["forger", "ch01-ex-attention-weights"] == ("0.0", "2.0", "failed")
    for name, (exercise, _, how) in LIBRARY_ANSWERS.items():
        assert table[name, exercise] == ("0.0", "2.0", "uses the library"), name
        assert table[name, "ch01-ex-database-lookup"] == ("0.0", "2.0", "not answered"), name
        message = next(r["message"] for r in rows2 if Path(r["submission"]).parent.name == name
                       and r["exercise"] == exercise)
        assert "0 points: your answer" in message and how in message, (name, message)
    # every submission graded within the minute (the chapters' trainings are not re-run)
    assert all(float(r["seconds"]) <= 60 for r in rows2 if r["seconds"] != ""), [r["seconds"] for r in rows2]
    assert table["wrong", "ch03-ex-masked-softmax"] == ("0.0", "2.0", "failed")
    assert table["wrong", "ch03-ex-additive"] == ("2.0", "2.0", "passed")  # partial credit for the chapter

    feedback = (grades / "b" / "003_03_scoring_functions" / "feedback.md").read_text()
    assert "fully masked rows" in feedback and "contain NaN" in feedback  # the checker's specific message
    answers = (grades / "b" / "003_03_scoring_functions" / "manual_answers.md").read_text()
    assert "Var = d, so divide by sqrt(d)." in answers and "## ch03-ex-gaussian-dot" in answers
    timeout_feedback = (grades / "a" / "001_01_queries_keys_values" / "feedback.md").read_text()
    assert "timeout" in timeout_feedback
    print("\n".join(f"{k}: {v}" for k, v in sorted(table.items())))


def test_grade_command_has_help_and_fails_clearly(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["grade", "--help"])
    assert exit_info.value.code == 0
    assert "untrusted code" in capsys.readouterr().out
    assert main(["grade", "--out", str(tmp_path / "g"), "--autograders", str(tmp_path), "x.ipynb"]) == 2
    assert "no autograder" in capsys.readouterr().err


def test_where_otter_cannot_start_grader_check_runs_the_same_checkers(monkeypatch, capsys):
    import otter

    def colab(*args, **kwargs):
        raise ValueError("Tests directory ./tests does not exist")  # what otter says in Colab

    monkeypatch.setattr(otter, "Notebook", colab)
    master = master_notebook(_toy_chapter(), "toy")
    setup = next(c.source for c in master.cells if "otter.Notebook(" in c.source)
    ns = {"__name__": "__main__"}
    exec(compile(setup, "setup", "exec"), ns)
    exec("def my_masked_softmax(X, valid_lens):\n    raise NotImplementedError\n\ngrader.check('toy_ex_code')", ns)
    assert "scoring.masked_softmax: not answered yet" in capsys.readouterr().out


def test_unreadable_or_unmatched_submissions_get_an_error_row_in_order_and_exit_status_1(tmp_path, capsys):
    autograders = tmp_path / "autograder"
    autograders.mkdir()
    (autograders / "03_scoring_functions.zip").write_bytes(b"")  # never opened: nothing here matches it
    (autograders / "03_scoring_functions.json").write_text("[]")
    (tmp_path / "garbage.ipynb").write_text("not json")
    nbformat.write(nbformat.v4.new_notebook(), tmp_path / "other_chapter.ipynb")
    paths = [str(tmp_path / "garbage.ipynb"), str(tmp_path / "other_chapter.ipynb"), str(tmp_path / "missing.ipynb")]
    rows, all_graded = grade(paths, tmp_path / "grades", autograders, jobs=2)
    assert not all_graded
    assert [(r["submission"], r["status"]) for r in rows] == [(p, "error") for p in paths]
    assert "not a readable notebook" in rows[0]["message"] and "no autograder matches" in rows[1]["message"]
    with open(tmp_path / "grades" / "grades.csv", newline="") as f:
        assert len(list(csv.DictReader(f))) == 3
    code = main(["grade", "--out", str(tmp_path / "g2"), "--autograders", str(autograders), "--jobs", "2", *paths])
    assert code == 1
