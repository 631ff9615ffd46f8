"""The notebooks' setup cell: one definition (tools/setup_cell.py), and its Colab install path works.

The install test is what Colab does on first run, offline: a fresh virtual environment in which
`course_lib` is not importable, where a student notebook's setup cell installs it with pip from the
source named by COURSE_LIB_SOURCE (here a copy of this repository; in Colab the git URL).
To stay fast and offline, the fresh environment sees the project's installed packages (torch, numpy,
...) through a .pth file pointing at a folder of links to them, every course_lib entry left out.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import nbformat
import pytest
import yaml

from course_lib.assignments import strip_solutions

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import setup_cell  # noqa: E402

sys.path.pop(0)


def _first_code_cell(path: Path) -> str:
    nb = nbformat.read(path, as_version=4)
    return next(c.source for c in nb.cells if c.cell_type == "code")


@pytest.mark.parametrize("path", setup_cell.chapter_notebooks(), ids=lambda p: p.name)
def test_every_chapter_notebook_starts_with_the_one_setup_cell(path):
    assert _first_code_cell(path) == setup_cell.SETUP_CELL, (
        f"{path.name}: the setup cell differs from tools/setup_cell.py; run `python tools/setup_cell.py`")


def test_setup_cell_installs_from_the_books_repository():
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert setup_cell.REPOSITORY == config["repository"]["url"]
    assert setup_cell.REPOSITORY.removeprefix("https://") in setup_cell.SETUP_CELL


def _fresh_venv_without_course_lib(where: Path) -> Path:
    """A venv that sees the project's packages but not course_lib; returns its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where / "venv")], check=True)
    python = where / "venv" / "bin" / "python"
    new_site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                   check=True, capture_output=True, text=True).stdout.strip())
    links = where / "project-packages"
    links.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        name = entry.name.lower().replace("-", "_")
        if "course_lib" in name or name.endswith(".pth"):
            continue  # course_lib's files, its editable finder and the .pth that installs the finder
        (links / entry.name).symlink_to(entry)
    (new_site / "project-packages.pth").write_text(f"{links}\n")
    return python


@pytest.mark.notebooks
def test_setup_cell_installs_course_lib_in_a_fresh_environment(tmp_path):
    python = _fresh_venv_without_course_lib(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "PIP_"))}
    env.update(MPLBACKEND="Agg", OMP_NUM_THREADS="1", PYTHONNOUSERSITE="1")
    probe = "import importlib.util; print(importlib.util.find_spec('course_lib'))"
    before = subprocess.run([str(python), "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert before.stdout.strip() == "None", f"course_lib is visible before the setup cell ran: {before}"

    # The source the setup cell installs from: a copy of the repository's package (as a git clone is).
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "course_lib", source / "course_lib", ignore=shutil.ignore_patterns("__pycache__"))
    # Offline: no index, and the build uses the setuptools the environment already has.
    env.update(COURSE_LIB_SOURCE=str(source), PIP_NO_INDEX="1", PIP_NO_BUILD_ISOLATION="0",
               PIP_DISABLE_PIP_VERSION_CHECK="1")

    student = strip_solutions(nbformat.read(ROOT / "book" / "01_queries_keys_values.ipynb", as_version=4))
    cell = next(c.source for c in student.cells if c.cell_type == "code")
    run = subprocess.run([str(python), "-c", cell], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, f"the setup cell failed:\n{run.stdout}\n{run.stderr}"
    assert "device: cpu" in run.stdout or "device: cuda" in run.stdout, run.stdout

    where = subprocess.run([str(python), "-c", "import course_lib; print(course_lib.__file__)"], cwd=tmp_path,
                           env=env, capture_output=True, text=True, check=True).stdout.strip()
    assert Path(where).is_relative_to(tmp_path / "venv"), f"course_lib was not installed into the new venv: {where}"
