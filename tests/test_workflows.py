"""The GitHub workflows, tested here before they run there.

actionlint (`make lint`) checks their syntax, not whether the commands they run exist. Workflows call
Makefile targets and the documented command line only, so this reads every `run:` script of every
workflow (each matrix combination expanded) and checks each command in it:

- ``make TARGET... [VAR=value...]``: `make -n` (a dry run) with the same arguments succeeds, so every
  target exists; the command lines that the dry run prints for ``python -m course_lib...`` are checked too;
- ``python -m course_lib[.module] ARGS`` (any python, ``.venv/bin/python`` or ``torchrun ... -m``): the
  module's own argparse parser accepts ARGS (the command is parsed, not run);
- ``python -c CODE``: CODE compiles and what it imports from course_lib exists;
- anything else (``pip install``, ``pytest``, a script) fails the test: it belongs in a Makefile target.

Then the promises of the workflows: the book is published to Pages with the official actions, pull
requests keep the built book as an artifact, the unit tests run on every Python the README promises and
on macOS, and every job that opens the book in a browser names the browser.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import io
import itertools
import os
import re
import runpy
import shlex
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.y*ml"))
# Plain programs a step may run besides make and the course's command line.
PLUMBING = {"echo", "nvidia-smi"}
SHELL_WORDS = {"if", "then", "else", "elif", "fi", "do", "done", "while", "until", "for", "!", "{", "}"}
PYTHON = re.compile(r"(?:.*/)?python(?:3(?:\.\d+)?)?$")
EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")


def _load(path: Path) -> dict:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    if True in data:  # YAML 1.1 reads the key `on` as the boolean true
        data["on"] = data.pop(True)
    return data


def _matrix_combinations(job: dict) -> list[dict]:
    matrix = (job.get("strategy") or {}).get("matrix") or {}
    axes = {k: v for k, v in matrix.items() if k not in ("include", "exclude") and isinstance(v, list)}
    combos = [dict(zip(axes, values, strict=True)) for values in itertools.product(*axes.values())] or [{}]
    return combos + list(matrix.get("include", []))


def _expand(script: str, matrix: dict) -> str:
    """`${{ matrix.x }}` becomes the combination's value; any other expression a placeholder word."""
    def value(m: re.Match) -> str:
        name = m.group(1)
        if name.startswith("matrix.") and name[7:] in matrix:
            return str(matrix[name[7:]])
        return "GITHUB_EXPRESSION"

    return EXPRESSION.sub(value, script)


def run_scripts() -> list[tuple[str, str]]:
    """(where, script) for every `run:` of every workflow, once per matrix combination."""
    found = []
    for path in WORKFLOWS:
        for job_name, job in _load(path)["jobs"].items():
            for combo in _matrix_combinations(job):
                for i, step in enumerate(job.get("steps", [])):
                    if "run" in step:
                        label = f"{path.name}: {job_name}{combo or ''}: {step.get('name', f'step {i + 1}')}"
                        found.append((label, _expand(step["run"], combo)))
    return found


def commands(script: str) -> list[list[str]]:
    """The simple commands of a shell script: split at newlines, ;, &&, ||, |; keywords, assignments and
    redirections removed."""
    script = re.sub(r"\\\n", " ", script)
    result = []
    for line in script.splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|<>")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        current: list[str] = []
        skip_next = False
        for token in lexer:
            if skip_next:
                skip_next = False
            elif token and set(token) <= set(";&|"):
                result.append(current)
                current = []
            elif token and set(token) <= set("<>&"):
                skip_next = True  # the file of a redirection
            elif not current and (token in SHELL_WORDS or re.match(r"[A-Za-z_][A-Za-z0-9_]*=", token)):
                continue
            else:
                current.append(token)
        result.append(current)
    return [c for c in result if c]


class _Parsed(Exception):
    pass


def argparse_problem(module: str, args: list[str]) -> str | None:
    """None when `python -m module args` parses with the module's own parser, else what went wrong.

    The module runs as __main__ with ArgumentParser.parse_args replaced by one that parses and then stops,
    so nothing but the argument parsing runs.
    """
    original = argparse.ArgumentParser.parse_args

    def parse_then_stop(self, args=None, namespace=None):
        original(self, args, namespace)
        raise _Parsed

    err = io.StringIO()
    argv = sys.argv
    try:
        argparse.ArgumentParser.parse_args = parse_then_stop
        sys.argv = [module, *args]
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # runpy: the module was imported before
            runpy.run_module(module, run_name="__main__", alter_sys=True)
    except _Parsed:
        return None
    except SystemExit as e:
        if e.code in (0, None):
            return None  # --help
        return f"`python -m {module} {shlex.join(args)}`: {err.getvalue().strip() or e}"
    except ImportError as e:
        return f"`python -m {module}`: {e}"
    finally:
        argparse.ArgumentParser.parse_args = original
        sys.argv = argv
    return f"`python -m {module} {shlex.join(args)}` did not parse its arguments with argparse"


def python_c_problem(code: str) -> str | None:
    try:
        tree = ast.parse(code)
    except SyntaxError as e:
        return f"python -c {code!r}: {e}"
    import importlib

    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "course_lib":
            module = importlib.import_module(node.module)
            missing = [a.name for a in node.names if not hasattr(module, a.name)]
            if missing:
                return f"python -c: {node.module} has no {', '.join(missing)}"
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "course_lib":
                    importlib.import_module(alias.name)
    return None


def _make_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("MAKE", "MFLAGS"))}


def _dry_run(args: list[str]) -> tuple[int, str]:
    # A PYTHON=... the workflow sets for its runner (setup-python's `python`) that does not run here is
    # replaced by this interpreter: the dry run checks targets, not which Python the runner has.
    args = [f"PYTHON={sys.executable}" if a.startswith("PYTHON=") and not shutil.which(a[7:]) else a for a in args]
    done = subprocess.run(["make", "-n", "--no-print-directory", *args], cwd=ROOT, env=_make_env(),
                          capture_output=True, text=True, timeout=60)
    return done.returncode, done.stdout + done.stderr


def command_problems(command: list[str]) -> list[str]:
    """What is wrong with one command of a workflow (an empty list: nothing)."""
    program = command[0]
    name = Path(program).name
    if name == "make":
        code, out = _dry_run(command[1:])
        if code != 0:
            return [f"`{shlex.join(command)}`: {out.strip().splitlines()[-1] if out.strip() else code}"]
        problems = []
        for line in re.sub(r"\\\n", " ", out).splitlines():  # the recipes' own calls of the command line
            for sub in commands(line):
                if PYTHON.fullmatch(sub[0]) and "-m" in sub and sub[sub.index("-m") + 1].startswith("course_lib"):
                    problems += [f"`{shlex.join(command)}` runs {p}" for p in command_problems(sub)]
        return problems
    if PYTHON.fullmatch(program) or name == "torchrun":
        rest = command[1:]
        while rest and rest[0] not in ("-m", "-c"):
            if name != "torchrun" and not rest[0].startswith("-"):
                return [f"`{shlex.join(command)}` runs a script: make it a Makefile target"]
            rest = rest[1:]
        if not rest or len(rest) < 2:
            return [f"`{shlex.join(command)}`: no -m or -c"]
        if rest[0] == "-c":
            problem = python_c_problem(rest[1])
            return [problem] if problem else []
        module = rest[1]
        if module == "course_lib" or module.startswith("course_lib."):
            problem = argparse_problem(module, rest[2:])
            return [problem] if problem else []
        return [f"`{shlex.join(command)}` runs `-m {module}`: make it a Makefile target"]
    if name in PLUMBING:
        return []
    return [f"`{shlex.join(command)}`: workflows call Makefile targets or the documented command line"]


# ---------------------------------------------------------------------------------------------------


def test_there_are_workflows_and_each_parses():
    names = {p.name for p in WORKFLOWS}
    assert {"ci.yml", "publish.yml", "weekly.yml", "gpu.yml"} <= names, names
    for path in WORKFLOWS:
        data = _load(path)
        assert data.get("on") and data.get("jobs"), f"{path.name}: no triggers or no jobs"
        for job_name, job in data["jobs"].items():
            assert job.get("steps"), f"{path.name}: job {job_name} has no steps"


@pytest.mark.parametrize(("where", "script"), run_scripts(), ids=[w for w, _ in run_scripts()])
def test_every_command_of_every_workflow_exists_here(where, script):
    problems = [p for command in commands(script) for p in command_problems(command)]
    assert not problems, f"{where}:\n  " + "\n  ".join(problems)


@pytest.mark.parametrize(("line", "expected"), [
    ("python3 -m course_lib.assignments book dist", "invalid choice: 'book'"),
    ("python -m course_lib.assignments generate --book book --outt dist", "unrecognized arguments"),
    ("make browser-test", "No rule to make target"),
    ("make unit && .venv/bin/python -m course_lib train --task cats", "invalid choice: 'cats'"),
    ("torchrun --standalone -m course_lib translate", "required: --checkpoint"),
    ("python -c 'from course_lib.data import download_everything'", "has no download_everything"),
    ("pip install -e '.[test]'", "Makefile targets"),
    ("python3 -m pytest dist/student", "make it a Makefile target"),
])
def test_a_broken_command_is_reported(line, expected):
    """The checks can fail: each of these lines is wrong in one way, and is reported for it."""
    problems = [p for command in commands(line) for p in command_problems(command)]
    assert any(expected in p for p in problems), problems


def test_the_shell_splitting_sees_every_command():
    script = 'make data\nif [ -n "$X" ]; then echo "a b" >> "$GITHUB_ENV"; fi && FOO=1 make \\\n  unit JOBS=2 | tee log'
    assert commands(script) == [["make", "data"], ["[", "-n", "$X", "]"], ["echo", "a b"],
                                ["make", "unit", "JOBS=2"], ["tee", "log"]]


# ---------------------------------------------------------------------------------------------------
# What the workflows promise


def _steps(workflow: str) -> list[tuple[str, dict, dict]]:
    data = _load(ROOT / ".github" / "workflows" / workflow)
    return [(name, job, step) for name, job in data["jobs"].items() for step in job["steps"]]


def _uses(step: dict, action: str) -> bool:
    return step.get("uses", "").split("@")[0] == action


def test_publish_builds_as_make_book_and_deploys_to_pages_with_the_official_actions():
    data = _load(ROOT / ".github" / "workflows" / "publish.yml")
    steps = _steps("publish.yml")
    # a release tag publishes (the site shows the release the setup cells install), and by hand
    assert "push" in data["on"] and data["on"]["push"] == {"tags": ["v*"]} and "workflow_dispatch" in data["on"]
    assert any(re.search(r"\bmake publish-student-notebooks\b", s["run"]) for _, _, s in steps if "run" in s)
    assert data.get("concurrency", {}).get("group"), "one concurrency group for deployments"
    runs = [s["run"] for _, _, s in steps if "run" in s]
    assert any(re.search(r"\bmake (book|pdf)\b", r) for r in runs), runs
    upload = [s for _, _, s in steps if _uses(s, "actions/upload-pages-artifact")]
    assert upload and upload[0]["with"]["path"].rstrip("/") == "_build/html", upload
    deploy = [(job, s) for _, job, s in steps if _uses(s, "actions/deploy-pages")]
    assert deploy, "no actions/deploy-pages step"
    permissions = {**data.get("permissions", {}), **deploy[0][0].get("permissions", {})}
    assert permissions.get("pages") == "write" and permissions.get("id-token") == "write", permissions
    assert any(re.search(r"\bmake pdf\b", r) for r in runs), "the PDF is published beside the HTML"
    caches = [s for _, _, s in steps if _uses(s, "actions/cache/restore") or _uses(s, "actions/cache/save")]
    assert {s["uses"].split("@")[0] for s in caches} == {"actions/cache/restore", "actions/cache/save"}
    assert all(s["with"]["path"] == "_build/.jupyter_cache" for s in caches), caches


def test_pull_requests_keep_the_built_book_as_an_artifact():
    previews = [s for _, _, s in _steps("ci.yml")
                if _uses(s, "actions/upload-artifact") and s["with"]["path"].rstrip("/") == "_build/html"]
    assert previews and "pull_request" in previews[0].get("if", ""), previews
    assert "pull_request" in _load(ROOT / ".github" / "workflows" / "ci.yml")["on"]


def test_the_unit_tests_run_on_every_promised_python_and_on_macos():
    jobs = _load(ROOT / ".github" / "workflows" / "ci.yml")["jobs"]
    versions = set()
    macos = False
    for job in jobs.values():
        runs = " ".join(s.get("run", "") for s in job["steps"])
        if re.search(r"\bmake unit\b", runs):
            versions |= {str(c["python"]) for c in _matrix_combinations(job) if "python" in c}
            macos |= str(job.get("runs-on", "")).startswith("macos")
    assert versions == {"3.10", "3.11", "3.12", "3.13"}, versions
    assert macos, "no macOS job runs make unit"
    assert "Python 3.10–3.13" in (ROOT / "README.md").read_text(encoding="utf-8")


def test_every_job_that_opens_the_book_in_a_browser_names_the_browser():
    """`make test` (the browser test) and `make pdf` need Chromium: GitHub's runners have Google Chrome."""
    for path in WORKFLOWS:
        data = _load(path)
        for name, job in data["jobs"].items():
            runs = " ".join(s.get("run", "") for s in job["steps"])
            if re.search(r"\bmake (test|pdf)\b", runs) and "self-hosted" not in str(job.get("runs-on")):
                env = {**data.get("env", {}), **job.get("env", {})}
                assert env.get("CHROMIUM"), f"{path.name}: job {name} opens the book without naming CHROMIUM"
