"""The notebooks' setup cell: one definition (tools/setup_cell.py), and its Colab install path works.

The install test is what Colab does on first run, offline: a fresh virtual environment in which
`course_lib` is not importable, where a student notebook's setup cell installs it with pip from the
source named by COURSE_LIB_SOURCE (here a copy of this repository; in Colab the git URL).
To stay fast and offline, the fresh environment sees the project's installed packages (torch, numpy,
...) through a .pth file pointing at a folder of links to them, every course_lib entry left out.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import nbformat
import pytest
import yaml

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

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
    assert _first_code_cell(path) == setup_cell.cell_for(path), (
        f"{path.name}: the setup cell differs from tools/setup_cell.py; run `python tools/setup_cell.py`")


def test_setup_cell_pins_the_release_of_the_books_repository():
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    with open(ROOT / "pyproject.toml", "rb") as f:
        version = tomllib.load(f)["project"]["version"]
    assert setup_cell.repository() == config["repository"]["url"]
    assert setup_cell.release_source() == f"git+{config['repository']['url']}@v{version}"
    cell = setup_cell.setup_cell()
    assert f'url = "{config["repository"]["url"]}"' in cell and f'release = f"git+{{url}}@v{version}"' in cell
    assert 'os.environ.get("COURSE_LIB_SOURCE", release)' in cell


def test_chapters_that_import_an_optional_package_install_its_extra():
    with open(ROOT / "pyproject.toml", "rb") as f:
        hf = tomllib.load(f)["project"]["optional-dependencies"]["hf"]
    for path in setup_cell.chapter_notebooks():
        imports = re.search(r'"(?:from|import) transformers\b', path.read_text())
        assert setup_cell.needs(path) == (hf if imports else []), path.name
    assert setup_cell.needs(ROOT / "book" / "11_modern_decoder.ipynb") == ["transformers>=5.0"]


def _fresh_venv_without_course_lib(where: Path, leave_out: tuple[str, ...] = ()) -> Path:
    """A venv that sees the project's packages but not course_lib (nor ``leave_out``); returns its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where / "venv")], check=True)
    python = where / "venv" / "bin" / "python"
    new_site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                   check=True, capture_output=True, text=True).stdout.strip())
    links = where / "project-packages"
    links.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        name = entry.name.lower().replace("-", "_")
        if "course_lib" in name or name.endswith(".pth") or entry.name.split("-")[0].split(".")[0] in leave_out:
            continue  # course_lib's files, its editable finder and the .pth that installs the finder
        (links / entry.name).symlink_to(entry)
    (new_site / "project-packages.pth").write_text(f"{links}\n")
    return python


def _fake_wheel(folder: Path, name: str, version: str) -> None:
    """A wheel of an empty package ``name`` at ``version`` (what pip installs offline for a requirement)."""
    info = f"{name}-{version}.dist-info"
    files = {f"{name}/__init__.py": f"__version__ = {version!r}\n",
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    files[f"{info}/RECORD"] = "".join(f"{path},,\n" for path in [*files, f"{info}/RECORD"])
    with zipfile.ZipFile(folder / f"{name}-{version}-py3-none-any.whl", "w") as z:
        for path, text in files.items():
            z.writestr(path, text)


@pytest.mark.notebooks
def test_setup_cell_installs_course_lib_and_the_chapters_extra_in_a_fresh_environment(tmp_path):
    # chapter 11's cell: course_lib, and transformers (left out of the environment) from its extra
    python = _fresh_venv_without_course_lib(tmp_path, leave_out=("transformers",))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "PIP_"))}
    env.update(MPLBACKEND="Agg", OMP_NUM_THREADS="1", PYTHONNOUSERSITE="1")
    probe = "import importlib.util as u; print(u.find_spec('course_lib'), u.find_spec('transformers'))"
    before = subprocess.run([str(python), "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert before.stdout.strip() == "None None", f"visible before the setup cell ran: {before}"

    # The source the setup cell installs from: a copy of the repository's package (as a git clone is).
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "course_lib", source / "course_lib", ignore=shutil.ignore_patterns("__pycache__"))
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _fake_wheel(wheels, "transformers", "5.0.0")
    # Offline: no index, and the build uses the setuptools the environment already has.
    env.update(COURSE_LIB_SOURCE=str(source), PIP_NO_INDEX="1", PIP_NO_BUILD_ISOLATION="0",
               PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_FIND_LINKS=str(wheels))

    student = strip_solutions(nbformat.read(ROOT / "book" / "11_modern_decoder.ipynb", as_version=4))
    cell = next(c.source for c in student.cells if c.cell_type == "code")
    run = subprocess.run([str(python), "-c", cell], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, f"the setup cell failed:\n{run.stdout}\n{run.stderr}"
    assert "device: cpu" in run.stdout or "device: cuda" in run.stdout, run.stdout

    where = subprocess.run([str(python), "-c", "import course_lib, transformers; print(course_lib.__file__); "
                            "print(transformers.__file__, transformers.__version__)"], cwd=tmp_path,
                           env=env, capture_output=True, text=True, check=True).stdout.split("\n")
    assert Path(where[0]).is_relative_to(tmp_path / "venv"), f"course_lib was not installed into the new venv: {where}"
    assert Path(where[1].split()[0]).is_relative_to(tmp_path / "venv") and where[1].endswith("5.0.0"), where
    # run again: everything is there now, nothing is installed
    again = subprocess.run([str(python), "-c", cell], cwd=tmp_path, env={**env, "PIP_FIND_LINKS": "/nonexistent"},
                           capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
