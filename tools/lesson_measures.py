"""What a reader of the book meets, measured: the main path's words and the check lines left in view.

The *main path* of a chapter is the prose a reader who opens no collapsed block reads: the markdown
outside exercises, solutions, dropdowns (``{dropdown}``, admonitions with ``:class: dropdown``),
toggles, code listings and figures, without display and inline maths and without roles such as
``{cite}`...```. A *visible check line* is a line of a code cell's output, in a cell not folded away
(tags ``hide-output``, ``hide-cell``, ``remove-output``, ``remove-cell``), that ends in ``True`` or
``False`` after a colon, ``==`` or ``?`` (``loop == library: True``), or is just ``True``/``False``.

A chapter's *reading time* follows one rule (:func:`reading_minutes`), stated in the introduction:
prose at 150 words a minute, a paragraph with mathematics at 75, code at 10 lines a minute, half a minute
a figure, and the time the reader's computer takes to run the cells (the stored run's). The main path
counts what is in view; the collapsed blocks and the exercises (10, 20 or 40 minutes to work one of one,
two or three stars) are counted apart.

``python tools/lesson_measures.py`` prints all three per chapter (the closing notes quote it).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

BOOK = Path(__file__).resolve().parents[1] / "book"
FOLDED_TAGS = {"remove-output", "remove-cell", "hide-output", "hide-cell"}
_OPEN = re.compile(r"^(?P<fence>:{3,}|`{3,})\s*(\{(?P<name>[\w:-]+)\})?(?P<arg>[^\n]*)$")
_HIDDEN = {"exercise", "solution", "dropdown", "toggle", "literalinclude", "figure", "code", "code-cell",
           "glue:figure"}
_CHECK = re.compile(r"(:|==|\?)\s*(True|False)\s*$|^\s*(True|False)\s*$")


def main_path_text(markdown: str) -> str:
    """The main-path prose of a chapter's markdown (see the module docstring)."""
    out: list[str] = []
    stack: list[tuple[str, str]] = []
    gated = in_math = False
    for line in markdown.split("\n"):
        s = line.strip()
        if stack and s == stack[-1][0]:
            stack.pop()
            continue
        match = _OPEN.match(s)
        if match:
            name = match["name"] or "code"
            if name in ("solution-start", "exercise-start"):
                gated = True
            elif name in ("solution-end", "exercise-end"):
                gated = False
            else:
                stack.append((match["fence"], name))
            continue
        if "$$" in s:
            in_math ^= s.count("$$") % 2 == 1
            continue
        if in_math:
            continue
        if stack and re.match(r":[\w-]+:", s):  # a directive's option
            if s.startswith(":class:") and "dropdown" in s:
                stack[-1] = (stack[-1][0], "dropdown")
            continue
        if gated or any(name in _HIDDEN for _, name in stack):
            continue
        out.append(line)
    text = re.sub(r"\$[^$]+\$", "", "\n".join(out))
    return re.sub(r"\{[a-z:-]+\}`[^`]*`", "", text)


PROSE_WPM, MATH_WPM, CODE_LINES_PER_MINUTE, FIGURE_MINUTES = 150, 75, 10, 0.5
EXERCISE_MINUTES = {1: 10, 2: 20, 3: 40}  # working an exercise of one, two or three stars
_EXERCISE = re.compile(r"^\s*[`:]{3,}\s*\{exercise(?:-start)?\}[^\n]*?\((★+)\)", re.M)


def main_path_lines(markdown: str) -> tuple[list[str], list[str]]:
    """The markdown's lines split in two: on the main path (maths kept), and in collapsed blocks."""
    main: list[str] = []
    folded: list[str] = []
    stack: list[tuple[str, str]] = []
    gated = False
    for line in markdown.split("\n"):
        s = line.strip()
        if stack and s == stack[-1][0]:
            stack.pop()
            continue
        match = _OPEN.match(s)
        if match:
            name = match["name"] or "code"
            if name in ("solution-start", "exercise-start"):
                gated = True
            elif name in ("solution-end", "exercise-end"):
                gated = False
            else:
                stack.append((match["fence"], name))
            continue
        if stack and re.match(r":[\w-]+:", s):
            if s.startswith(":class:") and "dropdown" in s:
                stack[-1] = (stack[-1][0], "dropdown")
            continue
        hidden = gated or any(name in _HIDDEN - {"figure", "glue:figure", "code", "code-cell", "literalinclude"}
                              for _, name in stack)
        (folded if hidden else main).append(line)
    return main, folded


def _prose_minutes(lines: list[str]) -> float:
    """Minutes for markdown lines: paragraph by paragraph, at the maths pace where a paragraph has maths."""
    minutes = 0.0
    for paragraph in "\n".join(lines).split("\n\n"):
        words = count_words(re.sub(r"\{[a-z:-]+\}`[^`]*`", "", re.sub(r"\$[^$]+\$", "", paragraph)))
        maths = "$" in paragraph
        minutes += words / (MATH_WPM if maths else PROSE_WPM) + 0.5 * paragraph.count("$$") // 2
    return minutes


def _cell_seconds(cell: dict) -> float:
    from datetime import datetime

    timing = cell.get("metadata", {}).get("execution", {})
    start, end = timing.get("iopub.execute_input"), timing.get("shell.execute_reply")
    if not start or not end:
        return 0.0
    parse = lambda t: datetime.fromisoformat(t.replace("Z", "+00:00"))  # noqa: E731
    return max(0.0, (parse(end) - parse(start)).total_seconds())


def reading_minutes(path: Path) -> tuple[int, int]:
    """The reading time of a chapter by the book's rule: ``(main path, collapsed blocks and exercises)``, minutes.

    Main path: its prose (150 words a minute, 75 in a paragraph with maths, half a minute a display
    equation), its code cells in view (10 lines a minute, plus the stored run's execution time) and its
    figures (half a minute each). The rest: the prose of exercises, solutions and dropdowns by the same
    pace, the code of folded cells, and working the exercises (10, 20 or 40 minutes for one, two or three
    stars). Each rounded up to 5 minutes.
    """
    cells = _cells(path)
    markdown = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    main, folded = main_path_lines(markdown)
    main_minutes, rest_minutes = _prose_minutes(main), _prose_minutes(folded)
    rest_minutes += sum(EXERCISE_MINUTES[min(len(stars), 3)] for stars in _EXERCISE.findall(markdown))
    for cell in cells:
        if cell["cell_type"] != "code":
            continue
        tags = set(cell.get("metadata", {}).get("tags", []))
        lines = sum(1 for line in "".join(cell["source"]).splitlines() if line.strip())
        figures = sum(1 for o in cell.get("outputs", []) if "image/png" in o.get("data", {}))
        seconds = _cell_seconds(cell)
        if tags & {"remove-cell", "remove-input"}:
            main_minutes += seconds / 60 + FIGURE_MINUTES * figures * ("remove-cell" not in tags)
        elif tags & {"hide-cell", "hide-input"}:
            main_minutes += seconds / 60 + FIGURE_MINUTES * figures
            rest_minutes += lines / CODE_LINES_PER_MINUTE
        else:
            main_minutes += lines / CODE_LINES_PER_MINUTE + seconds / 60 + FIGURE_MINUTES * figures
    return tuple(int(5 * -(-m // 5)) for m in (main_minutes, rest_minutes))


def count_words(text: str) -> int:
    return len(re.findall(r"[A-Za-z][A-Za-z'’-]*", text))


def _cells(path: Path) -> list[dict]:
    return json.loads(path.read_text())["cells"]


def main_path_words(path: Path) -> int:
    """Words on the main path of one notebook."""
    markdown = "\n".join("".join(c["source"]) for c in _cells(path) if c["cell_type"] == "markdown")
    return count_words(main_path_text(markdown))


def visible_check_lines(path: Path) -> list[str]:
    """The check lines a reader sees in one notebook's stored outputs."""
    lines = []
    for cell in _cells(path):
        if cell["cell_type"] != "code" or FOLDED_TAGS & set(cell.get("metadata", {}).get("tags", [])):
            continue
        for output in cell.get("outputs", []):
            text = "".join(output.get("text", "")) + "".join(output.get("data", {}).get("text/plain", ""))
            lines += [line for line in text.splitlines() if _CHECK.search(line)]
    return lines


def chapters() -> list[Path]:
    """The numbered chapters and sections (book/NN*.ipynb)."""
    return sorted(p for p in BOOK.glob("*.ipynb") if p.stem[:2].isdigit())


def main() -> None:
    total = total_1_11 = 0
    print(f"{'chapter':<40} {'main-path words':>16} {'visible checks':>15} {'reading (main + rest)':>22}")
    for path in chapters():
        words = main_path_words(path)
        total += words if path.stem[:2] <= "07" else 0
        total_1_11 += words if path.stem[:2] <= "11" else 0
        main, rest = reading_minutes(path)
        print(f"{path.name:<40} {words:>16} {len(visible_check_lines(path)):>15} {f'{main} + {rest} min':>22}")
    print(f"{'chapters 1-7, main path':<40} {total:>16}")
    print(f"{'chapters 1-11, main path':<40} {total_1_11:>16}")


if __name__ == "__main__":
    sys.exit(main())
