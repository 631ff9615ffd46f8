"""The notebooks' setup cell, defined once.

Every chapter notebook starts with this cell (tests/test_setup_cell.py checks that each carries it
unchanged); after editing it here, after a release's version changes in pyproject.toml, after the
repository URL changes in _config.yml, or after a chapter starts importing an optional package, write it
into the notebooks with

    python tools/setup_cell.py

It imports course_lib and, where course_lib is missing (Colab, a student's fresh environment), first
installs it with pip from the release the notebooks belong to: the git tag ``v<version>`` (the version of
pyproject.toml) of the repository named by _config.yml's ``repository: url:``, or from ``COURSE_LIB_SOURCE``
when that variable is set (any source pip accepts: a local folder, a wheel, another git URL). The tests use
the variable to run this very install path from a local copy of the repository, offline.

A chapter that imports a package outside course_lib's dependencies (chapter 11: Hugging Face's
``transformers``, the independent reference it compares with) gets the lines that install that package's
extra of pyproject.toml (:data:`OPTIONAL_IMPORTS`) where it is missing or older than the extra asks.

``course_lib.assignments`` reads the release and the extra requirements from this cell for the
autograder's image (its requirements.txt), so the student notebooks, their setup cells and the autograder
all pin the same release.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: An import of the notebook's code -> the extra of pyproject.toml that provides it.
OPTIONAL_IMPORTS = {"transformers": "hf"}


def _toml(path: Path) -> dict:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    with open(path, "rb") as f:
        return tomllib.load(f)


def repository() -> str:
    """The repository URL: _config.yml's ``repository: url:``, the one place it is written."""
    import yaml

    return yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))["repository"]["url"]


def version() -> str:
    """The release: pyproject.toml's ``[project] version``."""
    return _toml(ROOT / "pyproject.toml")["project"]["version"]


def release_source() -> str:
    """What pip installs course_lib from: the release's tag of the repository."""
    return f"git+{repository()}@v{version()}"


def extra_requirements(extra: str) -> list[str]:
    return _toml(ROOT / "pyproject.toml")["project"]["optional-dependencies"][extra]


def _least(requirement: str) -> tuple[str, tuple[int, ...]]:
    found = re.fullmatch(r"([A-Za-z0-9_.-]+)\s*>=\s*([0-9]+(?:\.[0-9]+)*)", requirement.strip())
    if found is None:
        raise ValueError(f"setup cell: only 'name>=version' requirements are supported, got {requirement!r}")
    return found.group(1), tuple(int(p) for p in found.group(2).split("."))


def _imports(source: str) -> set[str]:
    return set(re.findall(r"^\s*(?:from|import)\s+([A-Za-z_]\w*)", source, re.MULTILINE))


#: How a setup cell starts (any version of it): :func:`write` replaces such a cell, else inserts one.
SETUP_MARK = "# Setup, the same here and in Colab"


def setup_cell(needs: list[str] = ()) -> str:
    """The setup cell, installing ``needs`` (``name>=version`` requirements) beside course_lib."""
    lines = [
        f"{SETUP_MARK}: installs course_lib {version()} where it",
        "# is missing, from COURSE_LIB_SOURCE if set (any pip source), else from the",
        "# release's tag.",
        "import importlib.util",
        "import os",
        "import subprocess",
        "import sys",
        "",
        'pip = [sys.executable, "-m", "pip", "install", "-q"]',
        f'url = "{repository()}"',
        'if importlib.util.find_spec("course_lib") is None:',
        f'    release = f"git+{{url}}@v{version()}"',
        '    source = os.environ.get("COURSE_LIB_SOURCE", release)',
        "    subprocess.check_call([*pip, source])",
    ]
    if needs:
        lines += [
            "# This chapter also compares with "
            + ", ".join(f"{name} (>= {'.'.join(map(str, least))})" for name, least in map(_least, needs))
            + ":",
            "# installed where it is missing or older.",
            "import importlib.metadata",
            "",
        ]
        for requirement in needs:
            name, least = _least(requirement)
            lines += [
                "try:",
                f'    have = importlib.metadata.version("{name}").split(".")[:{len(least)}]',
                "    have = tuple(int(p) for p in have)",
                "except (importlib.metadata.PackageNotFoundError, ValueError):",
                "    have = ()",
                f"if have < {least!r}:",
                f'    subprocess.check_call([*pip, "{requirement}"])',
            ]
    lines += [
        "import matplotlib.pyplot as plt",
        "import torch",
        "",
        "import course_lib as cl",
        "from course_lib.exercises import check",
        "",
        "device = cl.try_gpu()  # the GPU when there is one",
        "cl.set_seed(0)",
        'print("device:", device)',
    ]
    return "\n".join(lines)


def chapter_notebooks() -> list[Path]:
    """The notebooks with code: every one starts with the setup cell."""
    return sorted(p for p in (ROOT / "book").glob("[0-9]*.ipynb"))


def needs(path: Path) -> list[str]:
    """The requirements the setup cell of ``path`` installs beside course_lib (its optional imports)."""
    import nbformat

    nb = nbformat.read(path, as_version=4)
    imported = set().union(*(_imports(c.source) for c in nb.cells if c.cell_type == "code"))
    return [r for name, extra in sorted(OPTIONAL_IMPORTS.items()) if name in imported
            for r in extra_requirements(extra)]


def cell_for(path: Path) -> str:
    """The setup cell the chapter ``path`` must start with."""
    return setup_cell(needs(path))


def write() -> list[Path]:
    """Put the setup cell into the first code cell of every chapter notebook; return the changed ones."""
    import nbformat

    changed = []
    for path in chapter_notebooks():
        nb = nbformat.read(path, as_version=4)
        cell = cell_for(path)
        first = next((c for c in nb.cells if c.cell_type == "code"), None)
        if first is not None and first.source.startswith(SETUP_MARK):
            if first.source == cell:
                continue
            first.source = cell  # only the source: outputs and metadata stay (nothing re-executed)
        else:  # a new chapter without one: the cell goes before its first code cell
            at = nb.cells.index(first) if first is not None else len(nb.cells)
            nb.cells.insert(at, nbformat.v4.new_code_cell(cell))
        nbformat.write(nb, path)
        changed.append(path)
    return changed


if __name__ == "__main__":
    for path in write():
        print(f"setup cell updated: {path.relative_to(ROOT)}", file=sys.stderr)
