"""The environment of `make lower-bounds`: course_lib's dependencies at exactly the minimums pyproject.toml declares.

    python tools/lower_bounds.py constraints   # `name==minimum` for each dependency of [project] and of the hf extra
    python tools/lower_bounds.py requirements  # what else `make unit` needs: the extras make venv installs

Every dependency of ``[project] dependencies`` and of the ``hf`` extra (what chapter 11's setup cell installs
for a student) must be written ``name>=version`` (a test checks it), and that minimum is what gets installed,
so ``make unit`` in that environment shows the declared lower bounds are true. The other requirements of the
extras (pytest, jupyter-book, otter-grader, ...) come at whatever version pip finds compatible with them.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _project() -> dict:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]


def constraints() -> list[str]:
    """``name==minimum`` for every dependency of course_lib and of its ``hf`` extra."""
    out = []
    project = _project()
    for requirement in [*project["dependencies"], *project["optional-dependencies"]["hf"]]:
        found = re.fullmatch(r"([A-Za-z0-9_.-]+)\s*>=\s*([0-9][0-9.]*)", requirement.strip())
        if found is None:
            raise ValueError(f"pyproject.toml: {requirement!r} is not 'name>=minimum'")
        out.append(f"{found.group(1)}=={found.group(2)}")
    return out


EXTRAS = ("test", "hf", "book", "grading")


def requirements() -> list[str]:
    """The requirements of :data:`EXTRAS` (those of `make venv`), each once."""
    extras = _project()["optional-dependencies"]
    return list(dict.fromkeys(r for extra in EXTRAS for r in extras[extra]))


if __name__ == "__main__":
    commands = {"constraints": constraints, "requirements": requirements}
    if len(sys.argv) != 2 or sys.argv[1] not in commands:
        sys.exit(f"usage: python {Path(__file__).name} {{{','.join(commands)}}}")
    print("\n".join(commands[sys.argv[1]]()))
