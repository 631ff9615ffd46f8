"""Generation: otter-grader master notebooks from the book's chapters, then ``otter assign`` (``make assignments``).

:func:`master_notebook` turns a chapter into an otter-assign master notebook: one question per
exercise, the statement in plain Markdown, a stub or an answer cell as the prompt, the worked
solution, and for coding exercises public and hidden tests that call the book's checkers.
:func:`make_assignments` writes the instructor, student and autograder versions of every chapter.
"""

from __future__ import annotations

import copy
import json
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from ._book import BookIndex
from ._markdown import bibliography, to_plain_markdown
from ._notebook import (
    ANSWER_PROMPT,
    CODE_PROMPT,
    directive_options,
    exercise_metadata,
    questions_manifest,
    walk_solutions,
)
from ._points import DEFAULT_POINTS, points_for

ASSIGNMENT_BANNER = (
    "**Assignment version.** Run the notebook from the top. For each coding exercise, replace "
    "`raise NotImplementedError` with your code and run the `grader.check(...)` cell below it: it runs the "
    "public tests (the book's cases) and says what is still wrong; `check(\"<exercise>\", answer, variant=1)` "
    "(2, 3, ...) tries other cases, for practice. For derivations and experiments, write your answer in the "
    "cell provided. When it is graded, hidden tests run your code on cases drawn from a seed only the "
    "grader has, and an answer that calls the course library's own implementation of the exercise "
    "scores 0. Hand in this notebook."
)
PLUGIN = "course_lib.assignments.otter_plugin.GradeWhatAnswersNeed"

# ----------------------------------------------------------------------------- master notebooks for otter assign

_BLOCK = re.compile(
    r"^[ \t]*(?P<fence>`{3,}|:{3,})[ \t]*\{(?P<name>exercise|solution)\}(?P<arg>[^\n]*)\n(?P<body>.*?)"
    r"^[ \t]*(?P=fence)[ \t]*$\n?", re.MULTILINE | re.DOTALL)
_CHECK_CALL = re.compile(r"check\(\s*[\"'](?P<id>[\w.]+)[\"']\s*,\s*(?P<answer>\w+)\s*\)")


@dataclass
class _Exercise:
    label: str
    title: str
    statement: str
    points: float
    stubs: list[str] = field(default_factory=list)
    checks: list[tuple[str, str]] = field(default_factory=list)  # (checker id, answer name)
    solution_code: list[str] = field(default_factory=list)
    solution_text: list[str] = field(default_factory=list)

    @property
    def question(self) -> str:
        return re.sub(r"\W", "_", self.label)

    @property
    def manual(self) -> bool:
        return not (self.stubs and self.checks)


def _segments(text: str) -> list[tuple[str, re.Match | str]]:
    """Split markdown into ``("text", str)``, ``("exercise", match)`` and ``("solution", match)`` pieces."""
    out, pos = [], 0
    for m in _BLOCK.finditer(text):
        if text[pos:m.start()].strip():
            out.append(("text", text[pos:m.start()]))
        out.append((m.group("name"), m))
        pos = m.end()
    if text[pos:].strip():
        out.append(("text", text[pos:]))
    return out


def _test_source(index: int, exercise_id: str, answer: str, variant: int) -> str:
    """An otter test: variant 0 is public (the book's cases), any other the hidden test's secret variant."""
    cases = "the book's cases" if variant == 0 else "hidden cases drawn from the grader's secret seed"
    return (
        ("# HIDDEN\n" if variant else "")
        + f"def test_{index}({answer}):\n"
        + f'    """{exercise_id} on {cases}."""\n'
        + "    from course_lib.exercises import check\n"
        + f'    result = check("{exercise_id}", {answer}, quiet=True, variant={variant})\n'
        + "    assert result.passed, result.message\n"
    )


def _install_requirements(nb: nbformat.NotebookNode) -> list[str]:
    """What the book's setup cell installs (its one definition, tools/setup_cell.py): the release of
    course_lib it pins (``git+<repository>@v<version>``) and the chapter's extra requirements.

    Raises:
        ValueError: the notebook has no setup cell naming a release.
    """
    for cell in nb.cells:
        if cell.cell_type == "code" and 'find_spec("course_lib")' in cell.source:
            url = re.search(r'^url = "([^"]+)"', cell.source, re.MULTILINE)
            tag = re.search(r'release = f"git\+\{url\}@([^"]+)"', cell.source)
            if url is None or tag is None:
                break
            extras = re.findall(r'check_call\(\[\*pip, "([^"]+)"\]\)', cell.source)
            return [f"git+{url.group(1)}@{tag.group(1)}", *extras]
    raise ValueError("the notebook has no setup cell that names the course_lib release (run tools/setup_cell.py)")


def _grading_setup_cell(chapter: str, public: dict[str, list[tuple[str, str]]]) -> nbformat.NotebookNode:
    """Install otter when missing and create ``grader``; where otter cannot start (Colab wants a tests/
    folder beside the notebook), a stand-in whose ``check`` runs the same public tests (the checkers)."""
    table = ",\n".join(f"            {q!r}: {checks!r}" for q, checks in public.items())
    return nbformat.v4.new_code_cell(
        "# Grading setup: otter-grader runs this notebook's public tests (grader.check); installed when missing.\n"
        "import importlib.util, subprocess, sys\n"
        'if importlib.util.find_spec("otter") is None:\n'
        '    subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", "otter-grader==7.0.0"])\n'
        "import otter\n"
        "try:\n"
        f'    grader = otter.Notebook("{chapter}.ipynb")\n'
        "except ValueError:  # Colab: otter needs a tests/ folder; the public tests are these checker calls\n"
        "    from course_lib.exercises import check as _check\n\n"
        "    class _PublicTests:\n"
        "        tests = {\n" + table + ",\n        }\n\n"
        "        def check(self, question):\n"
        "            for exercise, answer in self.tests[question]:\n"
        "                _check(exercise, globals().get(answer))\n\n"
        "    grader = _PublicTests()"
    )


def _config_cell(chapter: str, answers: list[str]) -> nbformat.NotebookNode:
    config = {
        "name": chapter,
        "init_cell": False,  # the grading setup cell below installs otter first, then creates the grader
        "check_all_cell": False,
        "export_cell": False,
        "run_tests": False,  # solutions are tested by the course's tests (and by grading the instructor notebook)
        "requirements": "requirements.txt",
        "overwrite_requirements": False,
        "python_version": "3.11",
        "tests": {"files": False, "ok_format": False},
        "generate": {"pdf": False, "show_stdout": True, "show_hidden": False, "filtering": False},
        # grading runs the cells these answers need, not the chapter's training (otter_plugin)
        "plugins": [{PLUGIN: {"answers": sorted(set(answers))}}],
    }
    return nbformat.v4.new_raw_cell("# ASSIGNMENT CONFIG\n" + json.dumps(config, indent=1))


def _raw(text: str) -> nbformat.NotebookNode:
    return nbformat.v4.new_raw_cell(text)


def _question_cells(ex: _Exercise, plain, hidden_variant: int) -> list[nbformat.NotebookNode]:
    md, code = nbformat.v4.new_markdown_cell, nbformat.v4.new_code_cell
    config = {"name": ex.question, "points": ex.points, "manual": ex.manual}
    kind = "manual grading" if ex.manual else "autograded"
    points = f"{ex.points:g} point{'s' if ex.points != 1 else ''}"
    cells = [_raw("# BEGIN QUESTION\n" + json.dumps(config)),
             md(plain(f"#### Exercise: {ex.title} ({ex.label}; {points}, {kind})\n\n{ex.statement}"))]
    meta = exercise_metadata(ex.label)
    cells.append(_raw("# BEGIN PROMPT"))
    if ex.manual:
        if ex.solution_code:
            cells.append(code(CODE_PROMPT, metadata=meta))
        cells.append(md(ANSWER_PROMPT, metadata=meta))
    else:
        cells.extend(code(stub, metadata=meta) for stub in ex.stubs)
    cells.append(_raw("# END PROMPT"))
    cells.append(_raw("# BEGIN SOLUTION"))
    cells.extend(md(plain(t)) for t in ex.solution_text)
    # Whole-cell solutions: otter blanks the marked lines (and _polish_student drops the empty cells).
    cells.extend(code(f"# BEGIN SOLUTION NO PROMPT\n{c}\n# END SOLUTION") for c in ex.solution_code)
    if not (ex.solution_text or ex.solution_code):
        cells.append(md("(See the instructor notebook.)"))
    cells.append(_raw("# END SOLUTION"))
    if not ex.manual:
        cells.append(_raw("# BEGIN TESTS"))
        index = 0
        for variant in (0, hidden_variant):
            for exercise_id, answer in ex.checks:
                cells.append(code(_test_source(index, exercise_id, answer, variant)))
                index += 1
        cells.append(_raw("# END TESTS"))
    cells.append(_raw("# END QUESTION"))
    return cells


_IMAGE_TYPES = ("image/png", "image/svg+xml", "image/jpeg")


def _figure_outputs(cell: nbformat.NotebookNode) -> list[nbformat.NotebookNode]:
    """A book cell's image outputs (its figures), without their text (``<Figure size ...>``)."""
    out = []
    for output in cell.get("outputs", []):
        data = output.get("data", {})
        images = {k: v for k, v in data.items() if k in _IMAGE_TYPES}
        if images and output.get("output_type") in ("display_data", "execute_result"):
            out.append(nbformat.v4.new_output("display_data", data=images,
                                              metadata={k: v for k, v in output.get("metadata", {}).items()
                                                        if k in _IMAGE_TYPES}))
    return out


def _caption(cell: nbformat.NotebookNode, plain, book: BookIndex | None) -> nbformat.NotebookNode | None:
    """The figure caption the HTML shows under a figure cell ("Fig. 8.3: ..."), as a Markdown cell."""
    figure = cell.metadata.get("mystnb", {}).get("figure", {})
    if not figure.get("caption"):
        return None
    number = ""
    if book is not None and figure.get("name") in book.labels:
        number = book.labels[figure["name"]]
    text = _escape_tags(plain(figure["caption"]))
    return nbformat.v4.new_markdown_cell(f"*{number + ': ' if number else ''}{text}*")


def _escape_tags(text: str) -> str:
    """``<bos>`` outside inline code as text, not as an HTML tag that Jupyter would hide."""
    parts = re.split(r"(`[^`]*`)", text)
    return "".join(p if p.startswith("`") else re.sub(r"<(/?[A-Za-z][\w-]*)>", r"&lt;\1&gt;", p) for p in parts)


def master_notebook(nb: nbformat.NotebookNode, chapter: str, cites: dict[str, str] | None = None, *,
                    book: BookIndex | None = None, points: dict[str, float] | None = None,
                    hidden_variant: int = 1) -> nbformat.NotebookNode:
    """The otter-assign master notebook of a book chapter (see the module docstring).

    Coding exercises (a stub raising ``NotImplementedError`` and a ``check(...)`` call) become
    autograded questions whose tests call the same checkers: the public test on the book's cases, the
    hidden test on the cases of ``hidden_variant`` (the autograder's secret); the others become manual
    questions with an answer cell. Markdown is converted to plain Markdown; with ``book``, glued values
    and cross-references read as the HTML shows them, and figures keep the book's image and caption.
    Points: ``points[label]``, else :data:`~course_lib.assignments._points.DEFAULT_POINTS`; otter splits
    them equally among the test cases (public and hidden, per checker), which gives partial credit.
    """
    cites = cites or {}
    points = points or {}

    def plain(text: str) -> str:
        return to_plain_markdown(text, cites, book, chapter)

    md = nbformat.v4.new_markdown_cell
    cells: list[nbformat.NotebookNode] = []
    current: list[_Exercise | None] = [None]
    public: dict[str, list[tuple[str, str]]] = {}
    answers: list[str] = []

    def flush() -> None:
        if current[0] is not None:
            cells.extend(_question_cells(current[0], plain, hidden_variant))
            if not current[0].manual:
                public[current[0].question] = current[0].checks
                answers.extend(answer for _, answer in current[0].checks)
            current[0] = None

    setup_done = False
    for cell, pieces in walk_solutions(nb):
        for text, is_solution in pieces:
            if is_solution:
                ex = current[0]
                if ex is None:
                    continue
                if cell.cell_type == "code":
                    if not _CHECK_CALL.search(text):
                        ex.solution_code.append(text)
                elif cell.cell_type == "markdown":
                    ex.solution_text.append(text)
                continue
            if cell.cell_type == "markdown":
                for kind, seg in _segments(text):
                    if kind == "text":
                        flush()
                        cells.append(md(plain(seg)))
                    elif kind == "exercise":
                        flush()
                        options, body = directive_options(seg.group("body"))
                        label = options.get("label", f"exercise-{len(cells)}")
                        current[0] = _Exercise(label=label, title=seg.group("arg").strip(), statement=body.strip(),
                                               points=points.get(label, DEFAULT_POINTS))
                    elif current[0] is not None:  # a {solution} directive: the worked text answer
                        current[0].solution_text.append(directive_options(seg.group("body"))[1])
            elif cell.cell_type == "code":
                ex = current[0]
                if ex is not None and "NotImplementedError" in text:
                    ex.stubs.append(text)
                elif ex is not None and _CHECK_CALL.search(text):
                    ex.checks.extend((m.group("id"), m.group("answer")) for m in _CHECK_CALL.finditer(text))
                else:
                    flush()
                    new = nbformat.v4.new_code_cell(text)
                    new.metadata = {k: v for k, v in cell.metadata.items() if k == "tags"}
                    figures = _figure_outputs(cell) if book is not None else []
                    if figures:  # the book's figure, until the student runs the cell
                        new.outputs = figures
                        new.metadata["course_lib"] = {"figure": True}
                    cells.append(new)
                    caption = _caption(cell, plain, book) if figures else None
                    if caption is not None:
                        cells.append(caption)
                    if not setup_done and 'find_spec("course_lib")' in text:
                        cells.append(nbformat.v4.new_code_cell(""))  # the grading setup, written below
                        setup_done = True
    flush()
    cells.insert(0, _config_cell(chapter, answers))
    title = next((i for i, c in enumerate(cells) if c.cell_type == "markdown"), None)
    if title is not None:
        cells.insert(title + 1, md(ASSIGNMENT_BANNER))
    setup = _grading_setup_cell(chapter, public)
    if setup_done:
        index = next(i for i, c in enumerate(cells) if c.cell_type == "code" and 'find_spec("course_lib")' in c.source)
        cells[index + 1] = setup
    else:
        cells.insert(1, setup)
    master = nbformat.v4.new_notebook(cells=cells)
    master.metadata = {
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
    }
    return master


def _otter(*args: str, cwd: Path | None = None, timeout: float | None = None) -> subprocess.CompletedProcess:
    """Run the otter command line of this interpreter's environment."""
    return subprocess.run([sys.executable, "-m", "otter", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


def _chapters(book_dir: Path) -> list[Path]:
    return [p for p in sorted(book_dir.glob("*.ipynb"))
            if any(c.cell_type == "markdown" and "{exercise}" in c.source
                   for c in nbformat.read(p, as_version=4).cells)]


def _polish_student(path: Path, master: nbformat.NotebookNode) -> None:
    """Final touches on otter's student notebook: kernelspec, no tags meant for the book's tests, no outputs
    but the book's figures (``master``'s figure cells: otter drops every output)."""
    figures = {c.source: c.outputs for c in master.cells
               if c.cell_type == "code" and c.metadata.get("course_lib", {}).get("figure")}
    nb = nbformat.read(path, as_version=4)
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    nb.cells = [c for c in nb.cells if c.cell_type != "code" or c.source.strip()]
    for cell in nb.cells:
        tags = [t for t in cell.metadata.get("tags", []) if not t.startswith("nbval")]
        if tags:
            cell.metadata["tags"] = tags
        else:
            cell.metadata.pop("tags", None)
    for number, cell in enumerate((c for c in nb.cells if c.cell_type == "code"), start=1):
        cell.outputs = copy.deepcopy(figures.get(cell.source, []))
        # a cell that shows an output is a cell that ran (Jupyter's prompt, nbval's "unrun cell" check)
        cell.execution_count = number if cell.outputs else None
    nbformat.write(nb, path)


def hidden_variant(seed: int | None = None) -> int:
    """The secret variant of an autograder's hidden tests: ``seed`` when given, else drawn from the OS's
    randomness (``secrets``), between 2**20 and 2**40 (never a small number a student would try)."""
    if seed is not None:
        return seed
    return 2**20 + secrets.randbelow(2**40 - 2**20)


def make_assignments(book_dir: str | Path, out_dir: str | Path, chapters: list[str] | None = None, *,
                     points_file: str | Path | None = None, seed: int | None = None,
                     executed: str | Path | None = None) -> dict[str, list[Path]]:
    """Write ``out_dir/{instructor,student,autograder}`` for the chapters of ``book_dir`` with exercises.

    Args:
        book_dir: the book's (executed) notebooks; ``_toc.yml`` beside it numbers them.
        out_dir: the output folder (its three subfolders are replaced).
        chapters: notebook stems to generate (default: every chapter with exercises).
        points_file: points per exercise (default ``course_lib/assignments/points.toml``).
        seed: the hidden tests' variant (default: a fresh secret per chapter, written only into
            ``autograder/<chapter>.zip``).
        executed: the HTML build's executed notebooks (``_build/jupyter_execute``): the glued numbers come
            from their glue stores, as the HTML shows them (default: the notebooks' stored outputs).

    Returns:
        The written paths per version (``instructor``, ``student``, ``autograder``).

    Raises:
        FileNotFoundError: no ``book_dir``; RuntimeError: ``otter assign`` failed (its output attached);
        ValueError: the points file lists an exercise the chapter does not have, or a glued value or a
        cross-reference of the chapter is missing from the executed book.
    """
    book_dir, out_dir = Path(book_dir), Path(out_dir)
    if not book_dir.is_dir():
        raise FileNotFoundError(f"book directory {book_dir} does not exist")
    written: dict[str, list[Path]] = {"instructor": [], "student": [], "autograder": []}
    cites = bibliography(book_dir / "references.bib")
    book = BookIndex.from_book(book_dir, executed=executed)
    paths = _chapters(book_dir)
    if chapters is not None:
        unknown = set(chapters) - {p.stem for p in paths}
        if unknown:
            raise ValueError(f"no chapter with exercises named {sorted(unknown)}")
        paths = [p for p in paths if p.stem in chapters]
    for version in written:
        target = out_dir / version
        if target.exists():
            shutil.rmtree(target)
        target.mkdir(parents=True)
    for path in paths:
        chapter = path.stem
        nb = nbformat.read(path, as_version=4)
        instructor = out_dir / "instructor" / path.name
        graded = copy.deepcopy(nb)
        graded.metadata["otter"] = {"assignment_name": chapter}  # so that `grade` knows its chapter
        nbformat.write(graded, instructor)
        written["instructor"].append(instructor)
        points = points_for(chapter, exercise_labels(nb), points_file)
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            master = master_notebook(nb, chapter, cites, book=book, points=points, hidden_variant=hidden_variant(seed))
            nbformat.write(master, work / path.name)
            # Gradescope installs these in its image; `otter run` installs nothing. The release the
            # book's setup cell pins (its one definition), with the chapter's extras.
            (work / "requirements.txt").write_text("\n".join(_install_requirements(nb)) + "\n")
            result = _otter("assign", "--no-pdfs", "--no-run-tests", path.name, "out", cwd=work)
            if result.returncode != 0:
                raise RuntimeError(f"otter assign failed for {path.name}:\n{result.stdout}\n{result.stderr}")
            student = out_dir / "student" / path.name
            shutil.copyfile(work / "out" / "student" / path.name, student)
            _polish_student(student, master)
            (zipped,) = (work / "out" / "autograder").glob("*.zip")
            autograder = out_dir / "autograder" / f"{chapter}.zip"
            shutil.copyfile(zipped, autograder)
            (out_dir / "autograder" / f"{chapter}.json").write_text(json.dumps(questions_manifest(master), indent=1))
        written["student"].append(student)
        written["autograder"].append(autograder)
    return written


def exercise_labels(nb: nbformat.NotebookNode) -> list[str]:
    """The labels of a chapter's exercises, in order."""
    return [directive_options(m.group("body"))[0].get("label", "")
            for cell in nb.cells if cell.cell_type == "markdown"
            for m in _BLOCK.finditer(cell.source) if m.group("name") == "exercise"]


def exercise_table(book_dir: str | Path) -> dict[str, list[tuple[str, str, bool]]]:
    """``{chapter: [(label, title, manual)]}`` of every chapter of ``book_dir`` with exercises."""
    table = {}
    for path in _chapters(Path(book_dir)):
        master = master_notebook(nbformat.read(path, as_version=4), path.stem)
        table[path.stem] = [(q["exercise"], q["title"], q["manual"]) for q in questions_manifest(master)]
    return table
