"""The notebooks' setup cell, defined once.

Every chapter notebook starts with this cell (tests/test_setup_cell.py checks that each carries it
unchanged); after editing it here, write it into the notebooks with

    python tools/setup_cell.py

It imports course_lib and, where course_lib is missing (Colab, a student's fresh environment),
first installs it with pip from the course's repository, or from ``COURSE_LIB_SOURCE`` when that
variable is set (any source pip accepts: a local folder, a wheel, another git URL). The tests use the
variable to run this very install path from a local copy of the repository, offline.
``course_lib.assignments`` reads the repository URL from this cell for the autograder's image.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPOSITORY = "https://github.com/attention-course/attention-from-first-principles"

SETUP_CELL = f"""\
# Setup, the same here and in Colab: installs course_lib where it is missing,
# from COURSE_LIB_SOURCE if set (any pip source), else from the repository.
import importlib.util
import os
import subprocess
import sys

if importlib.util.find_spec("course_lib") is None:
    url = "{REPOSITORY}"
    source = os.environ.get("COURSE_LIB_SOURCE", f"git+{{url}}")
    pip = [sys.executable, "-m", "pip", "install", "-q"]
    subprocess.check_call([*pip, source])
import matplotlib.pyplot as plt
import torch

import course_lib as cl
from course_lib.exercises import check

device = cl.try_gpu()  # the GPU when there is one
cl.set_seed(0)
print("device:", device)"""

ROOT = Path(__file__).resolve().parents[1]


def chapter_notebooks() -> list[Path]:
    """The notebooks with code: every one starts with the setup cell."""
    return sorted(p for p in (ROOT / "book").glob("[0-9]*.ipynb"))


def write() -> list[Path]:
    """Put SETUP_CELL into the first code cell of every chapter notebook; return the changed ones."""
    import nbformat

    changed = []
    for path in chapter_notebooks():
        nb = nbformat.read(path, as_version=4)
        first = next(c for c in nb.cells if c.cell_type == "code")
        if first.source != SETUP_CELL:
            first.source = SETUP_CELL
            nbformat.write(nb, path)
            changed.append(path)
    return changed


if __name__ == "__main__":
    for path in write():
        print(f"setup cell updated: {path.relative_to(ROOT)}", file=sys.stderr)
