"""Assignments from the book: student notebooks, otter-grader autograders, and grading (``make assignments``).

The book's notebooks are the single source. For every chapter with exercises, ``make assignments``
writes:

- ``dist/instructor/<chapter>.ipynb``: the book's notebook (worked solutions, executed outputs);
- ``dist/student/<chapter>.ipynb``: an otter-grader student notebook: plain Markdown (no MyST
  directives or roles), the statements, a stub or an answer cell per exercise, ``grader.check(...)``
  cells that run the public tests (the course's checkers, with their specific feedback), no
  solutions and no outputs;
- ``dist/autograder/<chapter>.zip``: the otter autograder (public and hidden tests, points), for
  ``otter run``, ``otter grade`` (Docker) or Gradescope.

Both are produced by ``otter assign`` from a master notebook that :func:`master_notebook` writes from
the chapter. Each coding exercise's tests call the checker the book calls (``course_lib.exercises``,
one definition): the public test on the book's cases, the hidden test on other random cases
(``check(..., variant=1)``). Derivations and experiments are manual questions with an answer cell.

Grading (:func:`grade`) runs ``otter run`` on each submission in its own process, with a time limit::

    python -m course_lib.assignments generate [--book book] [--out dist]
    python -m course_lib.assignments grade --out grades [--timeout 600] submissions/*.ipynb

and writes ``grades.csv`` (one row per submission and exercise), per-submission feedback and the
manual answers. Scores come from otter's results, never from what a notebook prints.
"""

from __future__ import annotations

import argparse
import copy
import csv
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

__all__ = ["strip_solutions", "solution_sources", "to_plain_markdown", "master_notebook", "make_assignments",
           "grade", "GRADE_COLUMNS"]

DEFAULT_POINTS = 2  # per exercise, when the statement does not say ``% points: N``
GRADE_COLUMNS = ("submission", "exercise", "points", "max_points", "status")
ANSWER_PROMPT = "_Type your answer here, replacing this text._"
ASSIGNMENT_BANNER = (
    "**Assignment version.** Run the notebook from the top. For each coding exercise, replace "
    "`raise NotImplementedError` with your code and run the `grader.check(...)` cell below it: it runs the "
    "public tests and says what is still wrong. For derivations and experiments, write your answer in the "
    "cell provided. When it is graded, hidden tests run your code on other cases. Hand in this notebook."
)

# A fenced {solution} directive: the opening fence (3+ backticks or colons) up to the same fence.
_SOLUTION_BLOCK = re.compile(
    r"^(?P<fence>`{3,}|:{3,})[ \t]*\{solution\}.*?^(?P=fence)[ \t]*$\n?", re.MULTILINE | re.DOTALL
)

STUDENT_BANNER = (
    "**Student version.** The worked solutions of the exercises are removed. Write your answer in "
    "each exercise's code cell and run the checker cell below it: it says what is still wrong, "
    "or *not answered yet* while the stub is unchanged."
)


# The gated form: a markdown cell holding ```{solution-start} label (with option lines), then the
# solution's cells, then a markdown cell holding ```{solution-end} and its closing fence. Authors
# often put other text in the same markdown cells (the exercise statement before the start, the
# next exercise after the end), so the markers are located inside the text, not per cell.
_START_LINE = re.compile(r"^[ \t]*(`{3,}|:{3,})[ \t]*\{solution-start\}[^\n]*$", re.MULTILINE)
_END_DIRECTIVE = re.compile(
    r"^[ \t]*(?P<fence>`{3,}|:{3,})[ \t]*\{solution-end\}[^\n]*\n(?:[^\n]*\n)*?[ \t]*(?P=fence)[ \t]*$\n?",
    re.MULTILINE,
)


def _split_markdown(source: str, inside: bool, index: int) -> tuple[list[tuple[str, bool]], bool]:
    """Split a markdown cell into ``(text, is_solution)`` pieces around the gated markers.

    ``inside`` says whether the cell starts inside a gated solution; the second return value says
    whether it ends inside one. The marker directives themselves belong to no piece.
    """
    pieces, pos = [], 0
    while pos <= len(source):
        if not inside:
            m = _START_LINE.search(source, pos)
            end = _END_DIRECTIVE.search(source, pos)
            if end is not None and (m is None or end.start() < m.start()):
                raise ValueError(f"cell {index}: solution-end without a solution-start")
            if m is None:
                pieces.append((source[pos:], False))
                break
            pieces.append((source[pos:m.start()], False))
            inside, pos = True, m.end()
            # Option lines (":class: dropdown") and the closing fence of the start directive.
            fence = re.match(r"(?:\n[ \t]*:[^\n]*)*(?:\n[ \t]*" + re.escape(m.group(1)) + r"[ \t]*(?=\n|$))?",
                             source[pos:])
            pos += fence.end() if fence else 0
        else:
            end = _END_DIRECTIVE.search(source, pos)
            start = _START_LINE.search(source, pos)
            if start is not None and (end is None or start.start() < end.start()):
                raise ValueError(f"cell {index}: solution-start inside another solution block")
            if end is None:
                pieces.append((source[pos:], True))
                break
            pieces.append((source[pos:end.start()], True))
            inside, pos = False, end.end()
    return [(text, sol) for text, sol in pieces if text.strip()], inside


def _walk(nb: nbformat.NotebookNode):
    """Yield ``(cell, pieces)``: for markdown cells the split pieces, for code cells one piece.

    Raises:
        ValueError: unbalanced gated markers.
    """
    inside = False
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown":
            pieces, inside = _split_markdown(cell.source, inside, index)
            yield cell, pieces
        else:
            yield cell, [(cell.source, inside)]
    if inside:
        raise ValueError("a solution-start has no matching solution-end")


def solution_sources(nb: nbformat.NotebookNode) -> list[str]:
    """The source of every solution: the cells of each gated block and each ``{solution}`` block."""
    sources = []
    for cell, pieces in _walk(nb):
        for text, is_solution in pieces:
            if is_solution:
                sources.append(text)
            elif cell.cell_type == "markdown":
                sources.extend(m.group(0) for m in _SOLUTION_BLOCK.finditer(text))
    return sources


def strip_solutions(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Return a copy of ``nb`` without solutions and without outputs (the student version).

    Text that shares a markdown cell with a solution marker (an exercise statement before
    ``{solution-start}``, the next exercise after ``{solution-end}``) is kept.

    Raises:
        ValueError: a ``{solution-start}`` without its ``{solution-end}`` (or the reverse), which
            would otherwise silently drop the rest of the notebook.
    """
    out = copy.deepcopy(nb)
    cells = []
    for cell, pieces in _walk(out):
        kept = [text for text, is_solution in pieces if not is_solution]
        if not kept:
            continue
        if cell.cell_type == "markdown":
            source = "\n\n".join(text.strip("\n") for text in kept)
            cell.source = _SOLUTION_BLOCK.sub("", source).strip()
            if not cell.source:
                continue
        else:
            cell.outputs = []
            cell.execution_count = None
        cells.append(cell)
    if cells and cells[0].cell_type == "markdown":
        # Keep the title first: the banner goes right after it.
        cells.insert(1, nbformat.v4.new_markdown_cell(STUDENT_BANNER))
    out.cells = cells
    return out


# ----------------------------------------------------------------------------- plain Markdown for students

_DIRECTIVE = re.compile(
    r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|:{3,})[ \t]*\{(?P<name>[\w:-]+)\}(?P<arg>[^\n]*)\n(?P<body>.*?)"
    r"^[ \t]*(?P=fence)[ \t]*$\n?",
    re.MULTILINE | re.DOTALL,
)
_ROLE = re.compile(r"\{(?P<name>[\w:-]+)\}`(?P<content>[^`]*)`")
_TARGET = re.compile(r"^\([\w:.-]+\)=[ \t]*\n", re.MULTILINE)
_COMMENT = re.compile(r"^%[^\n]*\n?", re.MULTILINE)
_TITLES = {"prf:proposition": "Proposition", "prf:proof": "Proof", "prf:theorem": "Theorem", "prf:lemma": "Lemma",
           "prf:definition": "Definition", "note": "Note", "tip": "Tip", "warning": "Warning", "important": "Important"}


def _options(body: str) -> tuple[dict[str, str], str]:
    """Split a directive body into its ``:key: value`` option lines and the rest."""
    options, lines = {}, body.split("\n")
    while lines and re.match(r"^[ \t]*:[\w-]+:", lines[0]):
        key, _, value = lines.pop(0).strip()[1:].partition(":")
        options[key] = value.strip()
    return options, "\n".join(lines).strip("\n")


def _bibliography(path: Path) -> dict[str, str]:
    """``key -> "Author et al. (year)"`` from a BibTeX file (first author's last name and year)."""
    if not path.is_file():
        return {}
    cites = {}
    for entry in re.split(r"\n(?=@)", path.read_text(encoding="utf-8")):
        key = re.match(r"@\w+\{([^,]+),", entry.strip())
        if not key:
            continue
        author = re.search(r"author\s*=\s*[{\"](.+?)[}\"]\s*,?\s*\n", entry)
        year = re.search(r"year\s*=\s*[{\"]?(\d{4})", entry)
        names = [a.strip() for a in author.group(1).split(" and ")] if author else []
        first = names[0].split(",")[0].strip("{} ") if names else key.group(1)
        if names and "," not in names[0]:
            first = names[0].split()[-1].strip("{}")
        who = first + (" et al." if len(names) > 2 else f" and {names[1].split(',')[0].split()[-1]}"
                       if len(names) == 2 else "")
        cites[key.group(1).strip()] = f"{who} ({year.group(1) if year else 'n.d.'})"
    return cites


def to_plain_markdown(text: str, cites: dict[str, str] | None = None) -> str:
    """MyST Markdown -> Markdown that plain Jupyter and Colab render: no directive fences, no roles.

    ``{exercise}`` becomes a bold heading with its title and label, ``{prf:...}`` and admonitions a
    bold title, ``{literalinclude}`` a pointer to the file, ``{cite}`` "Author et al. (year)",
    ``{doc}``/``{ref}``/``{numref}``/``{prf:ref}`` their text or target; ``(label)=`` targets and ``%``
    comments are dropped.
    """
    cites = cites or {}

    def directive(m: re.Match) -> str:
        name, arg = m.group("name"), m.group("arg").strip()
        options, body = _options(m.group("body"))
        body = to_plain_markdown(body, cites)
        if name == "exercise":
            label = options.get("label", "")
            return f"**Exercise{': ' + arg if arg else ''}** ({label})\n\n{body}\n"
        if name == "literalinclude":
            return f"(See `{arg.lstrip('./').replace('../', '')}` in the course library.)\n"
        if name == "math":
            return f"$$\n{body}\n$$\n"
        title = _TITLES.get(name, name.split(":")[-1].capitalize())
        return f"**{title}{' (' + arg + ')' if arg else ''}.** {body}\n"

    def role(m: re.Match) -> str:
        name, content = m.group("name"), m.group("content")
        explicit = re.match(r"^(?P<text>.*?)\s*<(?P<target>[^>]+)>$", content, re.DOTALL)
        if name == "cite":
            return "; ".join(cites.get(k.strip(), f"[{k.strip()}]") for k in content.split(","))
        if explicit:
            return explicit.group("text")
        if name == "doc":
            return f"`{content}`"
        if name in ("math",):
            return f"${content}$"
        return content

    text = _COMMENT.sub("", _TARGET.sub("", text))
    text = _DIRECTIVE.sub(directive, text)
    return _ROLE.sub(role, text)


# ----------------------------------------------------------------------------- master notebooks for otter assign

_BLOCK = re.compile(
    r"^[ \t]*(?P<fence>`{3,}|:{3,})[ \t]*\{(?P<name>exercise|solution)\}(?P<arg>[^\n]*)\n(?P<body>.*?)"
    r"^[ \t]*(?P=fence)[ \t]*$\n?", re.MULTILINE | re.DOTALL)
_CHECK_CALL = re.compile(r"check\(\s*[\"'](?P<id>[\w.]+)[\"']\s*,\s*(?P<answer>\w+)\s*\)")
_POINTS = re.compile(r"^%\s*points:\s*(?P<points>\d+(?:\.\d+)?)\s*$", re.MULTILINE)


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
    cases = "the book's cases" if variant == 0 else "hidden cases, not shown in the notebook"
    return (
        ("# HIDDEN\n" if variant else "")
        + f"def test_{index}({answer}):\n"
        + f'    """{exercise_id} on {cases}."""\n'
        + "    from course_lib.exercises import check\n"
        + f'    result = check("{exercise_id}", {answer}, quiet=True, variant={variant})\n'
        + "    assert result.passed, result.message\n"
    )


def _install_source(nb: nbformat.NotebookNode) -> str | None:
    """What the book's setup cell pip-installs course_lib from (its one definition), if it says."""
    for cell in nb.cells:
        if cell.cell_type == "code" and 'find_spec("course_lib")' in cell.source:
            m = re.search(r"[\"'](?:git\+)?(https?://[^\"'\s]+)[\"']", cell.source)
            if m is None:
                return None
            return ("git+" if "git+" in cell.source else "") + m.group(1)
    return None


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


def _config_cell(chapter: str) -> nbformat.NotebookNode:
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
    }
    return nbformat.v4.new_raw_cell("# ASSIGNMENT CONFIG\n" + json.dumps(config, indent=1))


def _raw(text: str) -> nbformat.NotebookNode:
    return nbformat.v4.new_raw_cell(text)


def _question_cells(ex: _Exercise, cites: dict[str, str]) -> list[nbformat.NotebookNode]:
    md, code = nbformat.v4.new_markdown_cell, nbformat.v4.new_code_cell
    config = {"name": ex.question, "points": ex.points, "manual": ex.manual}
    kind = "manual grading" if ex.manual else "autograded"
    points = f"{ex.points:g} point{'s' if ex.points != 1 else ''}"
    cells = [_raw("# BEGIN QUESTION\n" + json.dumps(config)),
             md(to_plain_markdown(f"#### Exercise: {ex.title} ({ex.label}; {points}, {kind})\n\n{ex.statement}",
                                  cites))]
    meta = {"course_lib": {"exercise": ex.label}}
    cells.append(_raw("# BEGIN PROMPT"))
    if ex.manual:
        if ex.solution_code:
            cells.append(code("# Code for this exercise (optional): write it here and describe the results below.",
                              metadata=meta))
        cells.append(md(ANSWER_PROMPT, metadata=meta))
    else:
        cells.extend(code(stub, metadata=meta) for stub in ex.stubs)
    cells.append(_raw("# END PROMPT"))
    cells.append(_raw("# BEGIN SOLUTION"))
    cells.extend(md(to_plain_markdown(t, cites)) for t in ex.solution_text)
    # Whole-cell solutions: otter blanks the marked lines (and _polish_student drops the empty cells).
    cells.extend(code(f"# BEGIN SOLUTION NO PROMPT\n{c}\n# END SOLUTION") for c in ex.solution_code)
    if not (ex.solution_text or ex.solution_code):
        cells.append(md("(See the instructor notebook.)"))
    cells.append(_raw("# END SOLUTION"))
    if not ex.manual:
        cells.append(_raw("# BEGIN TESTS"))
        index = 0
        for variant in (0, 1):
            for exercise_id, answer in ex.checks:
                cells.append(code(_test_source(index, exercise_id, answer, variant)))
                index += 1
        cells.append(_raw("# END TESTS"))
    cells.append(_raw("# END QUESTION"))
    return cells


def master_notebook(nb: nbformat.NotebookNode, chapter: str,
                    cites: dict[str, str] | None = None) -> nbformat.NotebookNode:
    """The otter-assign master notebook of a book chapter (see the module docstring).

    Coding exercises (a stub raising ``NotImplementedError`` and a ``check(...)`` call) become
    autograded questions whose tests call the same checkers; the others become manual questions with
    an answer cell. Markdown is converted to plain Markdown. Points: ``% points: N`` inside the
    exercise's statement, else :data:`DEFAULT_POINTS`; otter splits them equally among the test cases
    (public and hidden, per checker), which gives partial credit.
    """
    cites = cites or {}
    md = nbformat.v4.new_markdown_cell
    cells: list[nbformat.NotebookNode] = [_config_cell(chapter)]
    current: list[_Exercise | None] = [None]

    public: dict[str, list[tuple[str, str]]] = {}

    def flush() -> None:
        if current[0] is not None:
            cells.extend(_question_cells(current[0], cites))
            if not current[0].manual:
                public[current[0].question] = current[0].checks
            current[0] = None

    setup_done = False
    for cell, pieces in _walk(nb):
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
                        cells.append(md(to_plain_markdown(seg, cites)))
                    elif kind == "exercise":
                        flush()
                        options, body = _options(seg.group("body"))
                        points = _POINTS.search(body)
                        current[0] = _Exercise(
                            label=options.get("label", f"exercise-{len(cells)}"), title=seg.group("arg").strip(),
                            statement=_POINTS.sub("", body).strip(),
                            points=float(points.group("points")) if points else DEFAULT_POINTS)
                    elif current[0] is not None:  # a {solution} directive: the worked text answer
                        current[0].solution_text.append(_options(seg.group("body"))[1])
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
                    cells.append(new)
                    if not setup_done and 'find_spec("course_lib")' in text:
                        cells.append(nbformat.v4.new_code_cell(""))  # the grading setup, written below
                        setup_done = True
    flush()
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


# ----------------------------------------------------------------------------- make_assignments


def _otter(*args: str, cwd: Path | None = None, timeout: float | None = None) -> subprocess.CompletedProcess:
    """Run the otter command line of this interpreter's environment."""
    return subprocess.run([sys.executable, "-m", "otter", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


def _chapters(book_dir: Path) -> list[Path]:
    return [p for p in sorted(book_dir.glob("*.ipynb"))
            if any(c.cell_type == "markdown" and "{exercise}" in c.source
                   for c in nbformat.read(p, as_version=4).cells)]


def _polish_student(path: Path) -> None:
    """Final touches on otter's student notebook: kernelspec, no tags meant for the book's tests."""
    nb = nbformat.read(path, as_version=4)
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    nb.cells = [c for c in nb.cells if c.cell_type != "code" or c.source.strip()]
    for cell in nb.cells:
        tags = [t for t in cell.metadata.get("tags", []) if not t.startswith("nbval")]
        if tags:
            cell.metadata["tags"] = tags
        else:
            cell.metadata.pop("tags", None)
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    nbformat.write(nb, path)


def make_assignments(book_dir: str | Path, out_dir: str | Path,
                     chapters: list[str] | None = None) -> dict[str, list[Path]]:
    """Write ``out_dir/{instructor,student,autograder}`` for the chapters of ``book_dir`` with exercises.

    Args:
        book_dir: the book's notebooks.
        out_dir: the output folder (its three subfolders are replaced).
        chapters: notebook stems to generate (default: every chapter with exercises).

    Returns:
        The written paths per version (``instructor``, ``student``, ``autograder``).

    Raises:
        FileNotFoundError: no ``book_dir``; RuntimeError: ``otter assign`` failed (its output attached).
    """
    book_dir, out_dir = Path(book_dir), Path(out_dir)
    if not book_dir.is_dir():
        raise FileNotFoundError(f"book directory {book_dir} does not exist")
    written: dict[str, list[Path]] = {"instructor": [], "student": [], "autograder": []}
    for version in written:
        target = out_dir / version
        if target.exists():
            shutil.rmtree(target)
        target.mkdir(parents=True)
    cites = _bibliography(book_dir / "references.bib")
    paths = _chapters(book_dir)
    if chapters is not None:
        unknown = set(chapters) - {p.stem for p in paths}
        if unknown:
            raise ValueError(f"no chapter with exercises named {sorted(unknown)}")
        paths = [p for p in paths if p.stem in chapters]
    for path in paths:
        chapter = path.stem
        nb = nbformat.read(path, as_version=4)
        instructor = out_dir / "instructor" / path.name
        graded = copy.deepcopy(nb)
        graded.metadata["otter"] = {"assignment_name": chapter}  # so that `grade` knows its chapter
        nbformat.write(graded, instructor)
        written["instructor"].append(instructor)
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            master = master_notebook(nb, chapter, cites)
            nbformat.write(master, work / path.name)
            # Gradescope installs these in its image; `otter run` installs nothing.
            source = _install_source(nb)
            (work / "requirements.txt").write_text((source or "course_lib") + "\n")
            result = _otter("assign", "--no-pdfs", "--no-run-tests", path.name, "out", cwd=work)
            if result.returncode != 0:
                raise RuntimeError(f"otter assign failed for {path.name}:\n{result.stdout}\n{result.stderr}")
            student = out_dir / "student" / path.name
            shutil.copyfile(work / "out" / "student" / path.name, student)
            _polish_student(student)
            (zipped,) = (work / "out" / "autograder").glob("*.zip")
            autograder = out_dir / "autograder" / f"{chapter}.zip"
            shutil.copyfile(zipped, autograder)
            (out_dir / "autograder" / f"{chapter}.json").write_text(json.dumps(_questions_manifest(master), indent=1))
        written["student"].append(student)
        written["autograder"].append(autograder)
    return written


# ----------------------------------------------------------------------------- grading


def _questions_manifest(master: nbformat.NotebookNode) -> list[dict]:
    """``[{"name", "exercise", "points", "manual"}]`` of a master notebook's questions, in order."""
    out = []
    for cell in master.cells:
        if cell.cell_type == "raw" and cell.source.startswith("# BEGIN QUESTION"):
            config = json.loads(cell.source.split("\n", 1)[1])
            out.append({"name": config["name"], "points": config["points"], "manual": config["manual"]})
        if cell.cell_type in ("code", "markdown") and out and "exercise" not in out[-1]:
            label = cell.metadata.get("course_lib", {}).get("exercise")
            if label:
                out[-1]["exercise"] = label
    return out


@dataclass
class _Submission:
    path: Path
    chapter: str | None
    rows: list[dict] = field(default_factory=list)
    graded: bool = False
    seconds: float = 0.0
    problem: str = ""


def _chapter_of(nb: nbformat.NotebookNode | None, path: Path, chapters: list[str]) -> str | None:
    name = (nb.metadata.get("otter", {}) or {}).get("assignment_name") if nb is not None else None
    if name in chapters:
        return name
    matches = [c for c in chapters if c in path.name]
    return max(matches, key=len) if matches else None


def _run_otter(nb: nbformat.NotebookNode, chapter: str, autograder: Path, timeout: float) -> tuple[dict | None, str]:
    """Grade one notebook with ``otter run`` in its own process group; ``(results.json or None, problem)``."""
    with tempfile.TemporaryDirectory(prefix="course-grade-") as tmp:
        work = Path(tmp)
        nb = copy.deepcopy(nb)
        nb.metadata.setdefault("otter", {})["assignment_name"] = chapter  # otter checks the name
        nbformat.write(nb, work / f"{chapter}.ipynb")
        command = [sys.executable, "-m", "otter", "run", "-a", str(autograder.resolve()), "-o", str(work),
                   "--no-logo", f"{chapter}.ipynb"]
        process = subprocess.Popen(command, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                   start_new_session=True)  # its own group: a timeout kills the kernel too
        try:
            log, _ = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            return None, f"timeout: still running after {timeout:g} s (an endless loop?); remaining points lost"
        finally:
            try:
                os.killpg(process.pid, signal.SIGKILL)  # the kernel, if otter left it behind
            except ProcessLookupError:
                pass
        results = work / "results.json"
        if process.returncode != 0 or not results.is_file():
            last = [line for line in log.strip().splitlines() if line.strip()][-1:] or ["no output"]
            return None, f"error: otter could not grade it ({last[0][:300]})"
        return json.loads(results.read_text()), ""


def _rows(submission: str, manifest: list[dict], results: dict | None, problem: str) -> list[dict]:
    tests = {t["name"]: t for t in (results or {}).get("tests", []) if "score" in t}
    rows = []
    for q in manifest:
        row = {"submission": submission, "exercise": q.get("exercise", q["name"]), "points": 0.0,
               "max_points": float(q["points"]), "status": "", "message": ""}
        if q["manual"]:
            row.update(points="", status="manual", message="graded by hand: see manual_answers.md")
        elif results is None:
            row.update(status=problem.split(":")[0], message=problem)
        else:
            test = tests.get(q["name"])
            output = test.get("output", "") if test else "no result for this question"
            score = float(test["score"]) if test else 0.0
            row["points"] = round(score, 4)
            if "the checker itself failed" in output:
                status = "checker error"
            elif test and score >= row["max_points"]:
                status = "passed"
            elif "not answered yet" in output:
                status = "not answered"
            else:
                status = "partial" if score > 0 else "failed"
            row.update(status=status, message=output.strip())
        rows.append(row)
    return rows


def _manual_answers(nb: nbformat.NotebookNode | None, manifest: list[dict]) -> str:
    labels = {q.get("exercise") for q in manifest if q["manual"]}
    answers: dict[str, list[str]] = {}
    for cell in (nb.cells if nb is not None else []):
        label = cell.metadata.get("course_lib", {}).get("exercise")
        if label in labels:
            text = cell.source.strip()
            if cell.cell_type == "code":
                text = f"```python\n{text}\n```"
            answers.setdefault(label, []).append(text)
    parts = []
    for label in [q.get("exercise") for q in manifest if q["manual"]]:
        given = [a for a in answers.get(label, []) if a and ANSWER_PROMPT not in a
                 and not a.startswith("```python\n# Code for this exercise (optional)")]
        parts.append(f"## {label}\n\n" + ("\n\n".join(given) if given else "*(no answer)*") + "\n")
    return "\n".join(parts)


def _feedback(sub: _Submission, submission: str) -> str:
    lines = [f"# Feedback: {submission}", ""]
    if sub.problem:
        lines += [f"**{sub.problem}**", ""]
    for row in sub.rows:
        pts = "manual" if row["status"] == "manual" else f"{row['points']:g} / {row['max_points']:g}"
        lines += [f"## {row['exercise']}: {row['status']} ({pts})", "", row["message"] or "", ""]
    return "\n".join(lines)


def _grade_one(index: int, path: Path, out_dir: Path, autograder_dir: Path, chapters: list[str],
               timeout: float) -> tuple[list[dict], bool]:
    """Grade one submission into ``out_dir/<NNN>_<name>/``; ``(its rows, whether otter graded it)``."""
    submission = str(path)
    folder = out_dir / f"{index + 1:03d}_{re.sub(r'[^A-Za-z0-9_.-]+', '_', path.stem)}"
    folder.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    try:
        nb, problem = nbformat.read(path, as_version=4), ""
    except Exception as error:  # missing, unreadable or not a notebook
        nb, problem = None, f"error: not a readable notebook ({type(error).__name__}: {error})"
    chapter = _chapter_of(nb, path, chapters) if nb is not None else None
    sub = _Submission(path, chapter)
    if chapter is None:
        sub.problem = problem or f"error: no autograder matches {path.name} (chapters: {', '.join(chapters)})"
        (folder / "feedback.md").write_text(_feedback(sub, submission), encoding="utf-8")
        print(f"{submission}: {sub.problem}", flush=True)
        return [{"submission": submission, "exercise": "", "points": 0.0, "max_points": 0.0, "status": "error",
                 "message": sub.problem}], False
    manifest = json.loads((autograder_dir / f"{chapter}.json").read_text())
    results, sub.problem = _run_otter(nb, chapter, autograder_dir / f"{chapter}.zip", timeout)
    sub.seconds = time.perf_counter() - start
    sub.rows = _rows(submission, manifest, results, sub.problem)
    if results is not None:
        (folder / "results.json").write_text(json.dumps(results, indent=1), encoding="utf-8")
    (folder / "feedback.md").write_text(_feedback(sub, submission), encoding="utf-8")
    (folder / "manual_answers.md").write_text(f"# Manual answers: {submission} ({chapter})\n\n"
                                              + _manual_answers(nb, manifest), encoding="utf-8")
    print(f"{submission}: {chapter}, {sum(r['points'] or 0 for r in sub.rows):g} / "
          f"{sum(r['max_points'] for r in sub.rows if r['status'] != 'manual'):g} autograded points"
          f"{' (' + sub.problem + ')' if sub.problem else ''} [{sub.seconds:.1f} s]", flush=True)
    return sub.rows, results is not None


def grade(notebooks: list[str | Path], out_dir: str | Path, autograder_dir: str | Path = "dist/autograder",
          timeout: float = 600, jobs: int = 1) -> tuple[list[dict], bool]:
    """Grade submissions with otter and write ``out_dir/grades.csv``, feedback and manual answers.

    Each submission runs in its own ``otter run`` process (its own kernel) with at most ``timeout``
    seconds; past it, or if otter fails, the submission's autograded exercises get 0 and the batch
    goes on. The chapter comes from the notebook's otter metadata, else from its file name.

    Args:
        notebooks: submitted ``.ipynb`` files.
        out_dir: where ``grades.csv`` (columns :data:`GRADE_COLUMNS`) and one folder per submission
            (``feedback.md``, ``manual_answers.md``, ``results.json``) go.
        autograder_dir: the ``<chapter>.zip`` and ``<chapter>.json`` files of ``make assignments``.
        timeout: seconds per submission.
        jobs: submissions graded at the same time (each in its own process).

    Returns:
        ``(rows, all_graded)``: the CSV's rows in the order of ``notebooks`` (plus a ``message``
        column) and whether otter graded every submission (no timeout, no error, no unknown chapter).
    """
    from concurrent.futures import ThreadPoolExecutor

    out_dir, autograder_dir = Path(out_dir), Path(autograder_dir)
    chapters = sorted(p.stem for p in autograder_dir.glob("*.zip") if (autograder_dir / f"{p.stem}.json").is_file())
    if not chapters:
        raise FileNotFoundError(f"no autograder (<chapter>.zip and .json) in {autograder_dir}: run make assignments")
    if jobs < 1:
        raise ValueError(f"jobs must be at least 1, got {jobs}")
    out_dir.mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(max_workers=jobs) as pool:  # threads only wait: each grading is its own process
        done = list(pool.map(lambda item: _grade_one(item[0], Path(item[1]), out_dir, autograder_dir, chapters,
                                                     timeout), enumerate(notebooks)))
    all_rows = [row for rows, _ in done for row in rows]
    with open(out_dir / "grades.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=GRADE_COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(all_rows)
    return all_rows, all(graded for _, graded in done)


# ----------------------------------------------------------------------------- command line


def main(argv: list[str] | None = None) -> int:
    """``generate`` the assignments or ``grade`` submissions; see ``--help``. Exit status 0: all done."""
    parser = argparse.ArgumentParser(prog="python -m course_lib.assignments",
                                     description="Assignments from the book, graded with otter-grader.")
    commands = parser.add_subparsers(dest="command", required=True)
    gen = commands.add_parser("generate", help="write dist/instructor, dist/student and dist/autograder from book/")
    gen.add_argument("--book", default="book", help="the book's notebooks (default: book)")
    gen.add_argument("--out", default="dist", help="output folder (default: dist)")
    gen.add_argument("--chapter", action="append", help="only this chapter (notebook stem); repeatable")
    gra = commands.add_parser(
        "grade", help="grade submitted notebooks with otter; writes OUT/grades.csv and feedback",
        description="Grade submissions: each runs in its own otter process with a time limit. Submissions are "
                    "untrusted code and run with your permissions: grade in a container or VM (or with "
                    "`otter grade` in Docker). Exit status 0 when every submission was graded, 1 when one "
                    "timed out or could not be graded (it gets 0 points), 2 on a usage error.")
    gra.add_argument("notebooks", nargs="+", metavar="NOTEBOOK", help="submitted .ipynb files")
    gra.add_argument("--out", required=True, help="folder for grades.csv and per-submission feedback")
    gra.add_argument("--autograders", default="dist/autograder",
                     help="folder of the <chapter>.zip and .json files (default: dist/autograder)")
    gra.add_argument("--timeout", type=float, default=600, help="seconds per submission (default: 600)")
    gra.add_argument("--jobs", type=int, default=1, help="submissions graded at once (default: 1)")
    args = parser.parse_args(argv)
    try:
        if args.command == "generate":
            written = make_assignments(args.book, args.out, args.chapter)
            for version, paths in written.items():
                print(f"{version}: {len(paths)} files in {Path(args.out) / version}")
            return 0
        rows, all_graded = grade(args.notebooks, args.out, args.autograders, args.timeout, args.jobs)
    except (OSError, ValueError, RuntimeError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"wrote {Path(args.out) / 'grades.csv'} ({len(rows)} rows)")
    return 0 if all_graded else 1


if __name__ == "__main__":
    raise SystemExit(main())
