"""Student and instructor versions of the book's notebooks (``make assignments``).

The book's notebooks are the instructor versions: every exercise has its worked solution. A student
version removes exactly the solutions and keeps everything else:

- the cells from a markdown cell holding ```` ```{solution-start} label ```` to the one holding
  ```` ```{solution-end} ```` (inclusive): the gated form, used when a solution contains code;
- ```` ```{solution} label ```` blocks in markdown cells (text solutions); a cell left empty is dropped;
- all outputs, which could reveal answers (a checker's "passed", a solution's plot).

The stub cells (``raise NotImplementedError``) and the checker calls stay, so a student notebook runs
top to bottom and each unanswered exercise reports "not answered yet".

Usage::

    python -m course_lib.assignments book dist            # writes dist/student/ and dist/instructor/
    python -m course_lib.assignments grade alice.ipynb    # runs a submission, one line per exercise

Grading executes the submitted notebook top to bottom (errors in a cell do not stop the run) and
reads the message that each checker call printed, so it reports exactly what the student saw.
"""

from __future__ import annotations

import argparse
import copy
import re
import shutil
import sys
from pathlib import Path

import nbformat

__all__ = ["strip_solutions", "solution_sources", "make_assignments", "checker_results", "grade_notebook"]

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


def make_assignments(book_dir: str | Path, out_dir: str | Path) -> dict[str, list[Path]]:
    """Write ``out_dir/student`` and ``out_dir/instructor`` from the notebooks in ``book_dir``.

    Only notebooks with at least one exercise are written. Returns the written paths per version.
    """
    book_dir, out_dir = Path(book_dir), Path(out_dir)
    if not book_dir.is_dir():
        raise FileNotFoundError(f"book directory {book_dir} does not exist")
    written: dict[str, list[Path]] = {"student": [], "instructor": []}
    for version in written:
        target = out_dir / version
        if target.exists():
            shutil.rmtree(target)
        target.mkdir(parents=True)
    for path in sorted(book_dir.glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        if not any("{exercise" in c.source for c in nb.cells if c.cell_type == "markdown"):
            continue
        instructor = out_dir / "instructor" / path.name
        shutil.copyfile(path, instructor)
        student = out_dir / "student" / path.name
        nbformat.write(strip_solutions(nb), student)
        written["instructor"].append(instructor)
        written["student"].append(student)
    return written


# What `course_lib.exercises.check` prints: "<exercise id>: <status>...". The id is module.name.
_CHECK_LINE = re.compile(r"^(?P<id>[A-Za-z_]\w*\.[A-Za-z_]\w*): (?P<rest>.*)$")
_STATUSES = (("passed", "passed"), ("not answered yet", "not answered"), ("not yet right", "not yet right"),
             ("your code raised", "crashed"))


def checker_results(nb: nbformat.NotebookNode) -> list[tuple[str, str, str]]:
    """``(exercise id, status, message)`` for every checker call in an executed notebook.

    The status is ``"passed"``, ``"not yet right"``, ``"not answered"``, ``"crashed"`` (the
    student's code raised inside the checker) or ``"not run"`` (the checker cell printed no verdict,
    e.g. because an earlier line of the cell raised).
    """
    rows = []
    for cell in nb.cells:
        if cell.cell_type != "code" or "check(" not in cell.source:
            continue
        ids = re.findall(r"check\(\s*[\"']([^\"']+)[\"']", cell.source)
        text = "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("output_type") == "stream")
        found = {}
        for line in text.splitlines():
            m = _CHECK_LINE.match(line)
            if m and m.group("id") in ids:
                status = next((s for prefix, s in _STATUSES if m.group("rest").startswith(prefix)), None)
                if status is not None:
                    found[m.group("id")] = (status, line)
        for exercise in ids:
            status, message = found.get(exercise, ("not run", f"{exercise}: the checker printed no verdict"))
            rows.append((exercise, status, message))
    return rows


def grade_notebook(path: str | Path, timeout: int = 900) -> list[tuple[str, str, str]]:
    """Execute a submitted notebook and return :func:`checker_results` of the executed copy.

    The notebook runs in its own directory with the ``python3`` kernel; a cell that raises does
    not stop the run (the later checkers still report). The file itself is not modified.
    """
    from nbclient import NotebookClient

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no notebook at {path}")
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=timeout, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(path.parent.resolve())}}).execute()
    return checker_results(nb)


def _grade_main(paths: list[str]) -> int:
    if not paths:
        print("error: grade needs at least one notebook", file=sys.stderr)
        return 2
    for name in paths:
        try:
            rows = grade_notebook(name)
        except (OSError, ValueError) as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
        print(f"== {name}")
        for exercise, status, message in rows:
            print(f"  {status:<14} {exercise}" + ("" if status == "passed" else f"\n                 {message}"))
        counts = {s: sum(r[1] == s for r in rows) for _, s in _STATUSES + (("", "not run"),)}
        print("  " + ", ".join(f"{n} {s}" for s, n in counts.items() if n) + f" (of {len(rows)} exercises)")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "grade":
        return _grade_main(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m course_lib.assignments",
                                     description="Write student and instructor notebooks "
                                                 "(or: grade NOTEBOOK... to run submissions).")
    parser.add_argument("book_dir", nargs="?", default="book")
    parser.add_argument("out_dir", nargs="?", default="dist")
    args = parser.parse_args(argv)
    try:
        written = make_assignments(args.book_dir, args.out_dir)
    except (OSError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    for version, paths in written.items():
        print(f"{version}: {len(paths)} notebooks in {Path(args.out_dir) / version}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
