"""The packaging promises: lower bounds only, conda and pip agree, CI pins torch."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the backport (the test extra installs it there)
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
# The one upper cap the project is built around: Jupyter Book 2 cannot build offline.
ALLOWED_CAPS = {"jupyter-book": "<2"}


def _name(req: str) -> str:
    return re.split(r"[<>=!~;\[ ]", req, maxsplit=1)[0].strip().lower().replace("_", "-")


def _all_requirements() -> list[str]:
    reqs = list(PYPROJECT["project"]["dependencies"])
    for extra in PYPROJECT["project"]["optional-dependencies"].values():
        reqs.extend(extra)
    return reqs


def test_library_dependencies_have_lower_bounds_only():
    for req in PYPROJECT["project"]["dependencies"]:
        assert ">=" in req, f"{req!r} has no lower bound"
        assert "==" not in req and "<" not in req and "~=" not in req, f"{req!r} pins or caps a version"


def test_extras_have_no_pins_and_only_the_documented_cap():
    for req in _all_requirements():
        spec = req.split(";")[0]  # the version, not an environment marker such as python_version < '3.11'
        assert "==" not in spec, f"{req!r} is pinned: exact versions belong in constraints.txt"
        if "<" in spec:
            name = _name(req)
            assert name in ALLOWED_CAPS and ALLOWED_CAPS[name] in req, f"{req!r} has an upper cap"


def test_environment_yml_lists_the_same_requirements_as_pyproject():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip_section = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    conda_reqs = {r.replace(" ", "") for r in pip_section if not r.startswith("-e")}
    pyproject_reqs = {r.replace(" ", "") for r in _all_requirements()}
    assert conda_reqs == pyproject_reqs, (
        f"only in environment.yml: {sorted(conda_reqs - pyproject_reqs)}; "
        f"only in pyproject.toml: {sorted(pyproject_reqs - conda_reqs)}"
    )
    python = next(d for d in env["dependencies"] if isinstance(d, str) and d.startswith("python"))
    assert python.split("=")[-1] in {"3.10", "3.11", "3.12", "3.13"}


def test_constraints_pin_torch_to_the_local_cpu_wheel_and_cover_every_requirement():
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[name.lower().replace("_", "-")] = version
    assert pins.get("torch") == "2.13.0"
    missing = {_name(r) for r in _all_requirements()} - set(pins)
    assert not missing, f"not pinned in constraints.txt: {sorted(missing)}"


def test_python_versions_supported():
    assert PYPROJECT["project"]["requires-python"] == ">=3.10"


def test_one_version_number_for_the_package_the_library_and_the_citation():
    import course_lib

    version = PYPROJECT["project"]["version"]
    citation = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert course_lib.__version__ == version, f"course_lib.__version__ {course_lib.__version__} != pyproject {version}"
    assert str(citation["version"]) == version, f"CITATION.cff says {citation['version']}, pyproject {version}"
    assert citation["cff-version"] == "1.2.0"


def test_citation_says_which_licence_covers_what():
    """The software (the code) is MIT, the book's text and figures CC BY 4.0: one licence each, not a list (a
    list under `license:` means either licence for the whole, at the user's choice)."""
    citation = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert citation["type"] == "software" and citation["license"] == "MIT", citation["license"]
    books = [r for r in citation.get("references", []) if r.get("type") == "book"]
    assert len(books) == 1 and books[0]["license"] == "CC-BY-4.0", books
    assert "MIT" in (ROOT / "LICENSE").read_text() and "CC BY 4.0" in (ROOT / "LICENSE-CC-BY-4.0").read_text()


def test_pep_639_licence_metadata():
    """`license = "MIT"` and `license-files` (PEP 639) with setuptools >= 77: the table form
    `license = { file = ... }` is deprecated by setuptools and stops building in 2027."""
    project = PYPROJECT["project"]
    assert project["license"] == "MIT", project["license"]
    assert project["license-files"] == ["LICENSE"] and (ROOT / "LICENSE").is_file()
    requires = PYPROJECT["build-system"]["requires"]
    setuptools = [r for r in requires if _name(r) == "setuptools"]
    assert setuptools and re.search(r">=\s*(\d+)", setuptools[0]) and int(
        re.search(r">=\s*(\d+)", setuptools[0]).group(1)) >= 77, requires
    assert {"Homepage", "Repository", "Issues", "Changelog"} <= set(project["urls"]), project.get("urls")


def test_the_built_metadata_has_the_licence_expression_and_no_deprecation(tmp_path):
    """The wheel's metadata as setuptools writes it (PEP 517's prepare_metadata_for_build_wheel, in a fresh
    process): License-Expression: MIT, the licence file, the project URLs, and no licence deprecation warning."""
    import subprocess
    import sys

    setuptools = pytest.importorskip("setuptools")
    if int(setuptools.__version__.split(".")[0]) < 77:
        pytest.skip(f"setuptools {setuptools.__version__} here; the build requires >= 77 (pip installs it to build)")
    code = ("import sys; from setuptools import build_meta; "
            "print(build_meta.prepare_metadata_for_build_wheel(sys.argv[1]))")
    done = subprocess.run([sys.executable, "-W", "always", "-c", code, str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "licen" not in done.stderr.lower() or "deprecat" not in done.stderr.lower(), done.stderr[-2000:]
    metadata = (tmp_path / done.stdout.strip().splitlines()[-1] / "METADATA").read_text()
    assert "License-Expression: MIT" in metadata and "License-File: LICENSE" in metadata
    assert "\nLicense: " not in metadata, "the deprecated License field"
    assert "Project-URL: Repository, " in metadata
