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

And what GitHub's hosted runners accept today, from tables that say where each fact comes from and when: no
job on a retired runner label (macos-14 since 2026-11-02, ...), no action on a major that runs on Node 20
(removed from the runners on 2026-09-16), torch's CPU wheel for every Linux job but the GPU one (a `make`
target that pip-installs the project, seen in `make -n -B`, needs PIP_EXTRA_INDEX_URL), no `container:` image
over CONTAINER_IMAGE_LIMIT_GB (it is pulled before any step can free disk), Colab's image run with
`docker run` after freeing disk, and the self-hosted GPU runner's Python set up by setup-python.
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
    assert "push" in data["on"] and data["on"]["push"]["branches"] == ["main"] and "workflow_dispatch" in data["on"]
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


# ---------------------------------------------------------------------------------------------------
# What runs on GitHub's runners today: runner labels, action majors, torch's CPU wheel, container images.
# The tables say where each fact comes from and when; a change of GitHub's runners is a change here.

# Hosted runner labels GitHub has retired: a job on one of them never gets a runner (CI shows failing).
# label: (retired on, source)
RETIRED_RUNNER_LABELS = {
    **{label: ("2026-11-02", "actions/runner-images#13518: macOS 14 images deprecated from 2026-07-06, "
                             "fully unsupported from 2026-11-02")
       for label in ("macos-14", "macos-14-large", "macos-14-xlarge", "macos-14-arm64")},
    **{label: ("2025-12-04", "actions/runner-images#13046: the macOS 13 images are retired")
       for label in ("macos-13", "macos-13-large", "macos-13-xlarge")},
    **{label: ("2024-12-03", "actions/runner-images#10721: macOS 12 unsupported from 2024-12-03")
       for label in ("macos-12", "macos-12-large", "macos-12-xlarge")},
    "ubuntu-20.04": ("2025-04-15", "actions/runner-images#11101: Ubuntu 20.04 removed on 2025-04-15"),
}

# GitHub forced JavaScript actions built for Node 20 onto Node 24 on 2026-06-02 and removed Node 20 from its
# runners on 2026-09-16 (github.blog/changelog/2025-09-19-deprecation-of-node-20-on-github-actions-runners;
# the runners' own deprecation notice quotes both dates).
NODE20_REMOVED = "2026-09-16"
# action: (first major whose action.yml runs on Node 24, its release, source). Each from the action's own release
# notes or README ("runs on the Node.js 24 runtime"; runner >= 2.327.1). A composite action runs no Node itself:
# its entry says which actions it calls.
NODE24_MAJORS = {
    "actions/checkout": (5, "v5.0.0, 2025-08-11", "actions/checkout#2238 'Prepare v5.0.0 release' (node24; "
                                                  "README: 'Updated to the node24 runtime')"),
    "actions/setup-python": (6, "v6.0.0, 2025-09-04", "release notes v6.0.0: 'Breaking Changes: Upgrade to node 24' "
                                                      "(actions/setup-python#1164)"),
    "actions/cache": (5, "v5.0.0, 2025-12-11", "actions/cache#1684; release notes: 'actions/cache@v5 runs on the "
                                               "Node.js 24 runtime' (also actions/cache/restore, actions/cache/save)"),
    "actions/upload-artifact": (6, "v6.0.0, 2025-12-12", "actions/upload-artifact#745: 'runs.using: node24'; v5 had "
                                                         "preliminary support but still ran on Node 20"),
    "actions/download-artifact": (7, "v7.0.0, 2025-12-12", "actions/download-artifact#452: 'runs.using: node24'; "
                                                           "v5 and v6 still ran on Node 20"),
    "actions/configure-pages": (6, "v6.0.0, 2026-03-27", "release notes v6.0.0: 'upgrade to node 24' "
                                                         "(actions/configure-pages#186)"),
    "actions/deploy-pages": (5, "v5.0.0, 2026-03-25", "release notes v5.0.0: 'Update Node.js version to 24.x' "
                                                      "(actions/deploy-pages#404)"),
    "actions/upload-pages-artifact": (5, "v5.0.0, 2026-04-10", "composite; v5.0.0 'Update upload-artifact action to "
                                                               "version 7' (actions/upload-pages-artifact#139); v4 "
                                                               "called upload-artifact@v4.6.2, Node 20"),
    "jlumbroso/free-disk-space": (1, "v1.3.1", "composite (shell steps only): no Node"),
}

# A job's `container:` image is pulled before its first step, onto the runner's free disk (about 14 GB on
# ubuntu-24.04, GitHub's documentation of standard runners), so nothing can make room first. Images larger
# than this are run with `docker run` in a step, after freeing disk.
CONTAINER_IMAGE_LIMIT_GB = 4
# image (without tag): (size in GB on disk once pulled, source)
CONTAINER_IMAGE_SIZES_GB = {
    "us-docker.pkg.dev/colab-images/public/runtime": (
        14, "at least: QuantEcon/lecture-python-intro#421 (2024-04-16) gave up running it as `container:` since "
            "'github runners only have access to 14GB HDD'; its CUDA toolkits, TensorFlow, PyTorch and JAX "
            "(googlecolab/backend-info)"),
}

CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def _labels(job: dict) -> list[str]:
    """Every runner label a job can ask for (matrix expanded)."""
    labels = []
    for combo in _matrix_combinations(job):
        runs_on = job.get("runs-on", [])
        for label in runs_on if isinstance(runs_on, list) else [runs_on]:
            if isinstance(label, str):
                labels.append(_expand(label, combo))
    return labels


def _is_gpu_job(job: dict) -> bool:
    return {"self-hosted", "gpu"} <= set(_labels(job))


def runner_problems(workflow: dict, where: str) -> list[str]:
    problems = []
    for name, job in workflow["jobs"].items():
        for label in _labels(job):
            if label in RETIRED_RUNNER_LABELS:
                date, source = RETIRED_RUNNER_LABELS[label]
                problems.append(f"{where}: job {name} runs on {label}, retired on {date} ({source})")
    return problems


def action_problems(workflow: dict, where: str) -> list[str]:
    problems = []
    for name, job in workflow["jobs"].items():
        for step in job.get("steps", []):
            uses = step.get("uses")
            if not uses or uses.startswith(("./", "docker://")):
                continue
            action, _, ref = uses.partition("@")
            key = "/".join(action.split("/")[:2])
            if key not in NODE24_MAJORS:
                problems.append(f"{where}: job {name} uses {uses}: not in NODE24_MAJORS (add the first major that "
                                f"runs on Node 24, with its source)")
                continue
            major, release, source = NODE24_MAJORS[key]
            found = re.fullmatch(r"v(\d+)(?:\.\d+){0,2}", ref)
            if found is None:
                problems.append(f"{where}: job {name} uses {uses}: pin a release tag (v{major} or later)")
            elif int(found.group(1)) < major:
                problems.append(f"{where}: job {name} uses {uses}: v{found.group(1)} runs on Node 20, removed from the "
                                f"runners on {NODE20_REMOVED}; v{major} ({release}) runs on Node 24 ({source})")
    return problems


def _installs_torch(make_args: list[str]) -> bool:
    """Whether `make ARGS` would pip-install the project (so torch) or torch itself: its recipes with every target
    out of date (`make -n -B`, a dry run)."""
    args = [f"PYTHON={sys.executable}" if a.startswith("PYTHON=") and not shutil.which(a[7:]) else a
            for a in make_args]
    done = subprocess.run(["make", "-n", "-B", "--no-print-directory", *args], cwd=ROOT, env=_make_env(),
                          capture_output=True, text=True, timeout=60)
    for line in re.sub(r"\\\n", " ", done.stdout).splitlines():
        for command in commands(line):
            if "pip" in command and "install" in command:
                wanted = command[command.index("install") + 1:]
                if any(w == "-e" or w.startswith((".", "torch")) or "[" in w for w in wanted):
                    return True
    return False


def cpu_wheel_problems(workflow: dict, where: str) -> list[str]:
    """Outside the GPU job, a job that installs torch takes the CPU wheel (PyPI's Linux torch is CUDA's, several GB
    of nvidia-* wheels, cached beside the execution cache)."""
    problems = []
    for name, job in workflow["jobs"].items():
        if _is_gpu_job(job) or any(label.startswith(("macos", "windows")) for label in _labels(job)):
            continue  # the GPU job wants CUDA; PyPI's macOS and Windows wheels have no CUDA libraries
        for combo in _matrix_combinations(job):
            for step in job.get("steps", []):
                if "run" not in step:
                    continue
                env = {**(workflow.get("env") or {}), **(job.get("env") or {}), **(step.get("env") or {})}
                index = f"{env.get('PIP_INDEX_URL', '')} {env.get('PIP_EXTRA_INDEX_URL', '')}"
                for command in commands(_expand(step["run"], combo)):
                    if Path(command[0]).name == "make" and _installs_torch(command[1:]) and CPU_INDEX not in index:
                        problems.append(f"{where}: job {name}: `{shlex.join(command)}` installs torch without "
                                        f"PIP_EXTRA_INDEX_URL={CPU_INDEX} (PyPI's Linux torch is the CUDA build)")
    return problems


def container_problems(workflow: dict, where: str) -> list[str]:
    problems = []
    for name, job in workflow["jobs"].items():
        containers = [("container", job["container"])] if job.get("container") else []
        containers += [(f"service {s}", spec) for s, spec in (job.get("services") or {}).items()]
        for what, spec in containers:
            image = spec["image"] if isinstance(spec, dict) else spec
            base = re.sub(r"(@sha256:.*|:[^/:]+)$", "", image)
            if base not in CONTAINER_IMAGE_SIZES_GB:
                problems.append(f"{where}: job {name}'s {what} {image}: its size is not in CONTAINER_IMAGE_SIZES_GB")
                continue
            size, source = CONTAINER_IMAGE_SIZES_GB[base]
            if size > CONTAINER_IMAGE_LIMIT_GB:
                problems.append(f"{where}: job {name}'s {what} {image} is {size} GB or more ({source}), over the "
                                f"{CONTAINER_IMAGE_LIMIT_GB} GB a job's container may be: pulled before any step, "
                                f"with no chance to free disk; `docker run` it in a step after freeing disk")
    return problems


CHECKS = (runner_problems, action_problems, cpu_wheel_problems, container_problems)


@pytest.mark.parametrize("path", WORKFLOWS, ids=[p.name for p in WORKFLOWS])
@pytest.mark.parametrize("check", CHECKS, ids=[c.__name__ for c in CHECKS])
def test_the_workflows_run_on_todays_hosted_runners(check, path):
    problems = check(_load(path), path.name)
    assert not problems, "\n  ".join(["", *problems])


@pytest.mark.parametrize(("job", "expected"), [
    ({"runs-on": "macos-14", "steps": [{"run": "make unit"}]}, "runs on macos-14, retired on 2026-11-02"),
    ({"runs-on": "${{ matrix.os }}", "strategy": {"matrix": {"os": ["ubuntu-24.04", "ubuntu-20.04"]}},
      "steps": [{"run": "echo"}]}, "runs on ubuntu-20.04"),
    ({"runs-on": "ubuntu-24.04", "steps": [{"uses": "actions/checkout@v4"}]},
     "v4 runs on Node 20, removed from the runners on 2026-09-16; v5"),
    ({"runs-on": "ubuntu-24.04", "steps": [{"uses": "actions/upload-artifact@v5.0.0"}]}, "v5 runs on Node 20"),
    ({"runs-on": "ubuntu-24.04", "steps": [{"uses": "someone/unknown-action@v9"}]}, "not in NODE24_MAJORS"),
    ({"runs-on": "ubuntu-24.04", "steps": [{"uses": "actions/checkout@main"}]}, "pin a release tag"),
    ({"runs-on": "ubuntu-24.04", "steps": [{"run": "make test"}]}, "`make test` installs torch without"),
    ({"runs-on": "ubuntu-24.04", "steps": [{"run": "make assignments"}]}, "`make assignments` installs torch"),
    ({"runs-on": "ubuntu-24.04", "container": {"image": "us-docker.pkg.dev/colab-images/public/runtime:latest"},
      "steps": [{"run": "make student-notebooks"}]}, "over the 4 GB a job's container may be"),
    ({"runs-on": "ubuntu-24.04", "container": "python:3.11", "steps": [{"run": "echo"}]},
     "its size is not in CONTAINER_IMAGE_SIZES_GB"),
])
def test_what_broke_on_the_runners_is_reported(job, expected):
    """The checks can fail: each of these jobs is wrong in one way, and is reported for it."""
    problems = [p for check in CHECKS for p in check({"jobs": {"job": job}}, "test.yml")]
    assert any(expected in p for p in problems), problems


def test_the_gpu_job_is_exempt_from_the_cpu_wheel_and_a_cpu_index_passes():
    gpu = {"runs-on": ["self-hosted", "linux", "gpu"], "steps": [{"run": "make venv"}]}
    assert not cpu_wheel_problems({"jobs": {"gpu": gpu}}, "gpu.yml")
    cpu = {"runs-on": "ubuntu-24.04", "env": {"PIP_EXTRA_INDEX_URL": CPU_INDEX}, "steps": [{"run": "make test"}]}
    assert not cpu_wheel_problems({"jobs": {"cpu": cpu}}, "ci.yml")
    assert not _installs_torch(["student-notebooks"]), "nbval alone is not torch"


def test_colab_image_runs_in_a_step_after_freeing_disk():
    steps = [s for _, job, s in _steps("weekly.yml") if not job.get("container")]
    runs = [i for i, s in enumerate(steps) if re.search(r"\bmake colab-notebooks\b", s.get("run", ""))]
    frees = [i for i, s in enumerate(steps) if _uses(s, "jlumbroso/free-disk-space")]
    assert runs and frees and frees[0] < runs[0], "weekly.yml: free disk, then make colab-notebooks"
    code, out = _dry_run(["colab-notebooks"])
    assert code == 0 and "docker run" in out and "us-docker.pkg.dev/colab-images/public/runtime" in out, out
    assert "student-notebooks" in out


def test_the_gpu_runner_gets_its_python_from_setup_python():
    """gpu.yml does not assume a python3.11 on the self-hosted runner: setup-python installs the pins' Python."""
    for name, job in _load(ROOT / ".github" / "workflows" / "gpu.yml")["jobs"].items():
        setup = [s for s in job["steps"] if _uses(s, "actions/setup-python")]
        assert setup and str(setup[0]["with"]["python-version"]) == "3.11", f"gpu.yml: job {name}"
        first_make = next(i for i, s in enumerate(job["steps"]) if "make " in s.get("run", ""))
        assert job["steps"].index(setup[0]) < first_make


def test_readme_names_the_macos_runner_ci_uses():
    labels = {label for job in _load(ROOT / ".github" / "workflows" / "ci.yml")["jobs"].values()
              for label in _labels(job) if label.startswith("macos")}
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for label in labels:
        assert f"macOS {label.split('-')[1]}" in readme, f"README does not say the macOS job runs on {label}"
