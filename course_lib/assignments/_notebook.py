"""Book notebooks as the assignments read them (shared by generation and grading).

Where the worked solutions are (the gated ``{solution-start}``/``{solution-end}`` form and
``{solution}`` directives), the student version without them, the options of a MyST directive, and
what a generated notebook and the grader agree on: the answer prompts and the exercise label that
answer cells carry in their metadata.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator

import nbformat

ANSWER_PROMPT = "_Type your answer here, replacing this text._"
_CODE_PROMPT_START = "# Code for this exercise (optional)"
CODE_PROMPT = _CODE_PROMPT_START + ": write it here and describe the results below."

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
    while True:
        start, end = _START_LINE.search(source, pos), _END_DIRECTIVE.search(source, pos)
        # Outside a solution the next marker must be a start, inside one an end.
        marker, wrong = (end, start) if inside else (start, end)
        if wrong is not None and (marker is None or wrong.start() < marker.start()):
            raise ValueError(f"cell {index}: solution-start inside another solution block" if inside
                             else f"cell {index}: solution-end without a solution-start")
        if marker is None:
            pieces.append((source[pos:], inside))
            break
        pieces.append((source[pos:marker.start()], inside))
        pos = marker.end()
        if not inside:
            # Option lines (":class: dropdown") and the closing fence of the start directive.
            fence = re.match(r"(?:\n[ \t]*:[^\n]*)*(?:\n[ \t]*" + re.escape(marker.group(1)) + r"[ \t]*(?=\n|$))?",
                             source[pos:])
            pos += fence.end() if fence else 0
        inside = not inside
    return [(text, sol) for text, sol in pieces if text.strip()], inside


def walk_solutions(nb: nbformat.NotebookNode) -> Iterator[tuple[nbformat.NotebookNode, list[tuple[str, bool]]]]:
    """Yield ``(cell, pieces)`` for every cell: ``pieces`` are ``(text, is_solution)``, the markdown
    cells split around the gated markers, a code cell one piece (a solution when it sits between them).

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
    for cell, pieces in walk_solutions(nb):
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
    for cell, pieces in walk_solutions(out):
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


def directive_options(body: str) -> tuple[dict[str, str], str]:
    """Split a directive body into its ``:key: value`` option lines and the rest."""
    options, lines = {}, body.split("\n")
    while lines and re.match(r"^[ \t]*:[\w-]+:", lines[0]):
        key, _, value = lines.pop(0).strip()[1:].partition(":")
        options[key] = value.strip()
    return options, "\n".join(lines).strip("\n")


def exercise_metadata(label: str) -> dict:
    """The metadata of a generated answer cell: the label of the exercise it answers."""
    return {"course_lib": {"exercise": label}}


def exercise_label(cell: nbformat.NotebookNode) -> str | None:
    """The exercise a cell answers (:func:`exercise_metadata`), ``None`` for other cells."""
    return cell.metadata.get("course_lib", {}).get("exercise")


def is_prompt(answer: str) -> bool:
    """Whether a manual answer (code fenced as a ``python`` block) is still the generated prompt."""
    return ANSWER_PROMPT in answer or answer.startswith(f"```python\n{_CODE_PROMPT_START}")


def questions_manifest(master: nbformat.NotebookNode) -> list[dict]:
    """``[{"name", "exercise", "title", "points", "manual"}]`` of a master notebook's questions, in order.

    Generation writes it beside each autograder (``<chapter>.json``); grading reads it.
    """
    out, headings = [], []
    for cell in master.cells:
        if cell.cell_type == "raw" and cell.source.startswith("# BEGIN QUESTION"):
            config = json.loads(cell.source.split("\n", 1)[1])
            out.append({"name": config["name"], "points": config["points"], "manual": config["manual"]})
            headings.append("")
        if cell.cell_type == "markdown" and out and not headings[-1] and cell.source.startswith("#### Exercise: "):
            headings[-1] = cell.source.split("\n", 1)[0].removeprefix("#### Exercise: ")
        if cell.cell_type in ("code", "markdown") and out and "exercise" not in out[-1]:
            label = exercise_label(cell)
            if label:
                out[-1]["exercise"] = label
    for question, heading in zip(out, headings, strict=True):
        label = question.get("exercise", "")
        question["title"] = heading.rsplit(f" ({label};", 1)[0] if label and f" ({label};" in heading else heading
    return out
