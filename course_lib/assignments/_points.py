"""Points per exercise: one file an instructor edits (``course_lib/assignments/points.toml``), not the book.

The file has a ``default`` and one table per chapter, each exercise's label with its points::

    default = 2

    [03_scoring_functions]
    ch03-ex-masked-softmax = 2  # autograded: Masked softmax
    ch03-ex-variance = 3        # hand-graded: Why divide by sqrt(d)

``make assignments`` reads it (``--points FILE`` for another); an exercise it does not list gets the
default; a label that no chapter has is an error (a typo would otherwise go unnoticed).
``python -m course_lib.assignments points`` rewrites the file with every exercise of the book, keeping
the points already set and giving new exercises the default.
"""

from __future__ import annotations

import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

POINTS_FILE = Path(__file__).with_name("points.toml")
DEFAULT_POINTS = 2.0


def read_points(path: str | Path | None = None) -> tuple[float, dict[str, dict[str, float]]]:
    """``(default, {chapter: {label: points}})`` from a points file (default: :data:`POINTS_FILE`)."""
    path = Path(path) if path is not None else POINTS_FILE
    if not path.is_file():
        raise FileNotFoundError(f"points file {path} does not exist")
    with open(path, "rb") as f:
        table = tomllib.load(f)
    default = float(table.pop("default", DEFAULT_POINTS))
    chapters = {}
    for chapter, exercises in table.items():
        if not isinstance(exercises, dict):
            raise ValueError(f"{path}: [{chapter}] must be a table of exercise = points")
        for label, points in exercises.items():
            if not isinstance(points, (int, float)) or isinstance(points, bool) or points < 0:
                raise ValueError(f"{path}: {chapter}.{label} = {points!r}: points must be a number >= 0")
        chapters[chapter] = {label: float(points) for label, points in exercises.items()}
    return default, chapters


def points_for(chapter: str, labels: list[str], path: str | Path | None = None) -> dict[str, float]:
    """The points of each exercise ``labels`` of ``chapter``.

    Raises:
        ValueError: the file lists a label of ``chapter`` that is not one of ``labels``.
    """
    default, chapters = read_points(path)
    listed = chapters.get(chapter, {})
    unknown = sorted(set(listed) - set(labels))
    if unknown:
        raise ValueError(f"points file {path or POINTS_FILE}: [{chapter}] lists {unknown}, which the chapter does "
                         f"not have (its exercises: {', '.join(labels)})")
    return {label: listed.get(label, default) for label in labels}


def write_points(exercises: dict[str, list[tuple[str, str, bool]]], path: str | Path | None = None) -> list[str]:
    """Rewrite the points file for ``exercises`` (``{chapter: [(label, title, manual)]}``), keeping set points.

    Returns the labels that were added with the default.
    """
    path = Path(path) if path is not None else POINTS_FILE
    default, chapters = read_points(path) if path.is_file() else (DEFAULT_POINTS, {})
    lines = [
        "# Points per exercise, read by `make assignments` (the autograders and the gradebook).",
        "# Edit a number, then run `make assignments` again. An exercise not listed here gets `default`;",
        "# `python -m course_lib.assignments points` adds the book's new exercises with the default.",
        "# Autograded exercises share their points equally between their public and hidden tests.",
        "",
        f"default = {default:g}",
    ]
    added = []
    for chapter, entries in exercises.items():
        lines += ["", f"[{chapter}]"]
        width = max(len(label) for label, _, _ in entries)
        for label, title, manual in entries:
            points = chapters.get(chapter, {}).get(label)
            if points is None:
                points = default
                added.append(label)
            kind = "hand-graded" if manual else "autograded"
            lines.append(f"{label:<{width}} = {points:g}  # {kind}: {title}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return added
