"""The parts of make assignments that run no notebook (fast, in `make unit`): which cells grading runs, the
book's glue store and cross-references as the HTML shows them, the points file, the otter plugin."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from course_lib.assignments import _points
from course_lib.assignments._book import BookIndex, format_glue, glue_store
from course_lib.assignments._markdown import to_plain_markdown
from course_lib.assignments._needed import cells_to_run, mark_cells_to_skip
from course_lib.assignments.generation import exercise_labels, exercise_table, master_notebook

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
_GLUE = re.compile(r"\{glue:text\}`([^`]*)`")


# --- which cells grading runs ---------------------------------------------------------------------


SETUP = "import torch\nimport course_lib as cl\nif True:\n    source = 'x'\nprint(source)"


def test_grading_skips_the_training_and_keeps_what_the_answers_use():
    cells = [
        SETUP,                                                              # 0: the answers use torch
        "%matplotlib inline\nimport math\nfrom torch import nn",            # 1: and math, nn
        None,                                                               # 2: markdown
        "model = cl.Transformer(cl.TransformerConfig(10, 10))",             # 3: the chapter's model
        "%%time\nhistory = cl.train_seq2seq(model, data, epochs=5)",        # 4: its training
        "def helper(x):\n    return math.sqrt(x)",                          # 5: a helper the answer calls
        "def answer(x, model=None):\n    y = [t for t in x]\n    return helper(torch.tensor(y)) + nn.ReLU()(x)",
        "grader.check('q1')",                                               # 7: the public test
        "grader = otter.Notebook('toy.ipynb')\nimport otter",               # 8: binds grader
        "fig = cl.plot_history(history)",                                   # 9: uses the training
        "x = 1\nanswer = 2 if x else 3",                                    # 10: redefines the answer
        "def broken(:\n    pass",                                           # 11: does not parse
    ]
    run = cells_to_run(cells, {"answer"})
    assert run == {0, 1, 5, 6, 7, 8, 10}, run
    # the answer's own parameters and comprehension variables are not names of the notebook
    assert 3 not in cells_to_run([*cells[:6], "def answer(model, t):\n    return [t for t in model]"], {"answer"})


def test_skipped_cells_carry_otters_ignore_mark():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in
                                         ("import torch", "slow = train()", "def f(x):\n    return torch.exp(x)")])
    skipped = mark_cells_to_skip(nb, {"f"})
    assert skipped == [1]
    assert nb.cells[1].metadata["otter"] == {"ignore": True} and "otter" not in nb.cells[0].metadata

    from course_lib.assignments.otter_plugin import GradeWhatAnswersNeed

    nb2 = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in ("import torch", "slow = train()")])
    plugin = GradeWhatAnswersNeed("x.ipynb", {}, {"answers": ["torch"]})
    assert plugin.before_execution(nb2) is nb2 and nb2.cells[1].metadata["otter"]["ignore"]
    assert plugin.before_execution("print(1)") == "print(1)"


@pytest.mark.parametrize("path", sorted(p for p in BOOK.glob("[0-9]*.ipynb")), ids=lambda p: p.stem)
def test_grading_a_chapter_runs_none_of_its_long_cells(path):
    """Every cell that took over 5 s in the stored run (trainings, sweeps) is skipped when grading."""
    import datetime
    import json

    nb = nbformat.read(path, as_version=4)
    if not exercise_labels(nb):
        pytest.skip("no exercises")
    config = json.loads(master_notebook(nb, path.stem).cells[0].source.split("\n", 1)[1])
    answers = set(next(iter(config["plugins"][0].values()))["answers"])
    run = cells_to_run([c.source if c.cell_type == "code" else None for c in nb.cells], answers)

    def seconds(cell) -> float:
        times = cell.metadata.get("execution", {})
        if "iopub.execute_input" not in times:
            return 0.0
        start, end = (datetime.datetime.fromisoformat(times[k].replace("Z", "+00:00"))
                      for k in ("iopub.execute_input", "shell.execute_reply"))
        return (end - start).total_seconds()

    slow = {i: round(seconds(c)) for i, c in enumerate(nb.cells) if c.cell_type == "code" and seconds(c) > 5}
    assert not set(slow) & run, {i: s for i, s in slow.items() if i in run}
    assert any(any(a in nb.cells[i].source for a in answers) for i in run)


# --- glue and cross-references as the HTML shows them ---------------------------------------------


@pytest.fixture(scope="module")
def book() -> BookIndex:
    return BookIndex.from_book(BOOK)


def test_glued_values_are_formatted_as_myst_nb_formats_them(book):
    myst_nb = pytest.importorskip("myst_nb.core.variables", reason="myst-nb comes with the book extra")
    checked = 0
    for path in sorted(BOOK.glob("[0-9]*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        store = glue_store(nb)
        for cell in nb.cells:
            for content in _GLUE.findall(cell.source) if cell.cell_type == "markdown" else []:
                key, _, fmt = content.rpartition(":") if ":" in content else (content, "", "s")
                expected = myst_nb.format_plain_text(store[key]["text/plain"], fmt)
                assert book.glued(path.stem, content) == expected == format_glue(store[key]["text/plain"], fmt)
                checked += 1
    assert checked > 300


def test_references_read_as_the_html_numbers_them(book):
    # as the built HTML shows them (checked against _build/html by tests/test_student_notebooks_html.py)
    assert book.numbers["08b_translation"] == "8.1" and book.numbers["11_modern_decoder"] == "11"
    assert book.ref("fig-ch08-beam-tree") == "Fig. 8.5"
    assert book.ref("fig-ch08b-bpe") == "Fig. 8.17"  # section 8.1's figures go on counting chapter 8's
    assert book.ref("ch08b-ex-bpe") == "Exercise 8.11"
    assert book.ref("ch03-prop-variance") == "Proposition 3.1"
    assert book.ref("ch03-check-gaussian-dot") == "From the Gaussian kernel to the dot product"
    assert book.doc("07_transformer_architecture") == "The Transformer architecture"
    text = to_plain_markdown("Chapter {doc}`07_transformer_architecture`, {numref}`fig-ch08-beam-tree`, "
                             "{ref}`ch08-ex-warmup`, {numref}`Figure {number} <fig-ch03-pipeline>` and "
                             "{glue:text}`ch08-params:,` parameters, as {cite:t}`vaswani2017` "
                             "{cite}`vaswani2017,wu2016` say", {"vaswani2017": ("Vaswani et al.", "2017"),
                                                                 "wu2016": ("Wu et al.", "2016")},
                             book, "08_training_and_inference")
    params = format_glue(book.glue["08_training_and_inference"]["ch08-params"]["text/plain"], ",")
    assert text == (f"Chapter The Transformer architecture, Fig. 8.5, Exercise 8.7, Figure 3.4 and {params} "
                    "parameters, as Vaswani et al. [2017] [Vaswani et al., 2017, Wu et al., 2016] say")
    with pytest.raises(ValueError, match="no-such-label"):
        to_plain_markdown("{ref}`no-such-label`", {}, book, "01_queries_keys_values")
    with pytest.raises(ValueError, match="execute it first"):
        to_plain_markdown("{glue:text}`no-such-key`", {}, book, "01_queries_keys_values")
    # `y_{T-1}` in inline code is not a role
    assert to_plain_markdown("(`<bos> y_1 … y_{T-1}`) and trains it `x`", {}, book, "x") == \
        "(`<bos> y_1 … y_{T-1}`) and trains it `x`"


# --- points ---------------------------------------------------------------------------------------


def test_the_points_file_lists_every_exercise_of_the_book():
    default, chapters = _points.read_points()
    table = exercise_table(BOOK)
    assert {c: set(labels) for c, labels in chapters.items()} == {
        c: {label for label, _, _ in entries} for c, entries in table.items()}, (
        "run `python -m course_lib.assignments points` to list the book's exercises in the points file")
    assert default == 2


def test_points_come_from_the_file_and_a_typo_is_an_error(tmp_path):
    path = tmp_path / "points.toml"
    added = _points.write_points({"03_x": [("ex-a", "A", False), ("ex-b", "B", True)]}, path)
    assert added == ["ex-a", "ex-b"] and "ex-a = 2  # autograded: A" in path.read_text()
    path.write_text(path.read_text().replace("ex-b = 2", "ex-b = 5"))
    assert _points.points_for("03_x", ["ex-a", "ex-b", "ex-c"], path) == {"ex-a": 2.0, "ex-b": 5.0, "ex-c": 2.0}
    assert _points.write_points({"03_x": [("ex-a", "A", False), ("ex-b", "B", True)]}, path) == []
    assert "ex-b = 5" in path.read_text()
    (tmp_path / "typo.toml").write_text("[03_x]\nex-typo = 1\n")
    with pytest.raises(ValueError, match="ex-typo"):
        _points.points_for("03_x", ["ex-a"], tmp_path / "typo.toml")
    (tmp_path / "bad.toml").write_text("[03_x]\nex-a = -1\n")
    with pytest.raises(ValueError, match="number >= 0"):
        _points.read_points(tmp_path / "bad.toml")
