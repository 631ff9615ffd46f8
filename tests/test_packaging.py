"""The packaging promises: lower bounds only, conda and pip agree, CI pins torch."""

from __future__ import annotations

import re
from pathlib import Path

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
    assert {"MIT", "CC-BY-4.0"} <= set(citation["license"]), citation["license"]
