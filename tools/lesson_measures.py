"""What a reader of the book meets, measured: the main path's words and the check lines left in view.

The *main path* of a chapter is the prose a reader who opens no collapsed block reads: the markdown
outside exercises, solutions, dropdowns (``{dropdown}``, admonitions with ``:class: dropdown``),
toggles, code listings and figures, without display and inline maths and without roles such as
``{cite}`...```. A *visible check line* is a line of a code cell's output, in a cell not folded away
(tags ``hide-output``, ``hide-cell``, ``remove-output``, ``remove-cell``), that ends in ``True`` or
``False`` after a colon, ``==`` or ``?`` (``loop == library: True``), or is just ``True``/``False``.

``python tools/lesson_measures.py`` prints both per chapter (the closing notes quote it).
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
    total = 0
    print(f"{'chapter':<40} {'main-path words':>16} {'visible checks':>15}")
    for path in chapters():
        words = main_path_words(path)
        total += words if path.stem[:2] <= "07" else 0
        print(f"{path.name:<40} {words:>16} {len(visible_check_lines(path)):>15}")
    print(f"{'chapters 1-7, main path':<40} {total:>16}")


if __name__ == "__main__":
    sys.exit(main())
