"""Grading: each submission through ``otter run`` in its own process, into a gradebook (``make grade``).

:func:`grade` finds each submission's chapter, runs the chapter's autograder on it with a time limit,
and writes ``grades.csv`` (one row per submission and exercise), per-submission feedback and the
manual answers. Scores come from otter's results, never from what a notebook prints.
"""

from __future__ import annotations

import copy
import csv
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from ._notebook import exercise_label, is_prompt

GRADE_COLUMNS = ("submission", "exercise", "points", "max_points", "status", "seconds")


@dataclass
class _Submission:
    path: Path
    chapter: str | None
    rows: list[dict] = field(default_factory=list)
    graded: bool = False
    seconds: float = 0.0
    problem: str = ""


def _chapter_of(nb: nbformat.NotebookNode | None, path: Path, chapters: list[str]) -> str | None:
    name = (nb.metadata.get("otter", {}) or {}).get("assignment_name") if nb is not None else None
    if name in chapters:
        return name
    matches = [c for c in chapters if c in path.name]
    return max(matches, key=len) if matches else None


def _run_otter(nb: nbformat.NotebookNode, chapter: str, autograder: Path, timeout: float) -> tuple[dict | None, str]:
    """Grade one notebook with ``otter run`` in its own process group; ``(results.json or None, problem)``."""
    with tempfile.TemporaryDirectory(prefix="course-grade-") as tmp:
        work = Path(tmp)
        nb = copy.deepcopy(nb)
        nb.metadata.setdefault("otter", {})["assignment_name"] = chapter  # otter checks the name
        nbformat.write(nb, work / f"{chapter}.ipynb")
        command = [sys.executable, "-m", "otter", "run", "-a", str(autograder.resolve()), "-o", str(work),
                   "--no-logo", f"{chapter}.ipynb"]
        process = subprocess.Popen(command, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                   start_new_session=True)  # its own group: a timeout kills the kernel too
        try:
            log, _ = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            return None, f"timeout: still running after {timeout:g} s (an endless loop?); remaining points lost"
        finally:
            try:
                os.killpg(process.pid, signal.SIGKILL)  # the kernel, if otter left it behind
            except ProcessLookupError:
                pass
        results = work / "results.json"
        if process.returncode != 0 or not results.is_file():
            last = [line for line in log.strip().splitlines() if line.strip()][-1:] or ["no output"]
            return None, f"error: otter could not grade it ({last[0][:300]})"
        return json.loads(results.read_text()), ""


def _rows(submission: str, manifest: list[dict], results: dict | None, problem: str) -> list[dict]:
    tests = {t["name"]: t for t in (results or {}).get("tests", []) if "score" in t}
    rows = []
    for q in manifest:
        row = {"submission": submission, "exercise": q.get("exercise", q["name"]), "points": 0.0,
               "max_points": float(q["points"]), "status": "", "message": "", "seconds": ""}
        if q["manual"]:
            row.update(points="", status="manual", message="graded by hand: see manual_answers.md")
        elif results is None:
            row.update(status=problem.split(":")[0], message=problem)
        else:
            test = tests.get(q["name"])
            output = test.get("output", "") if test else "no result for this question"
            score = float(test["score"]) if test else 0.0
            row["points"] = round(score, 4)
            if "the checker itself failed" in output:
                status = "checker error"
            elif "0 points: your answer" in output:
                status = "uses the library"
            elif test and score >= row["max_points"]:
                status = "passed"
            elif "not answered yet" in output:
                status = "not answered"
            else:
                status = "partial" if score > 0 else "failed"
            row.update(status=status, message=output.strip())
        rows.append(row)
    return rows


def _manual_answers(nb: nbformat.NotebookNode | None, manifest: list[dict]) -> str:
    labels = {q.get("exercise") for q in manifest if q["manual"]}
    answers: dict[str, list[str]] = {}
    for cell in (nb.cells if nb is not None else []):
        label = exercise_label(cell)
        if label in labels:
            text = cell.source.strip()
            if cell.cell_type == "code":
                text = f"```python\n{text}\n```"
            answers.setdefault(label, []).append(text)
    parts = []
    for label in [q.get("exercise") for q in manifest if q["manual"]]:
        given = [a for a in answers.get(label, []) if a and not is_prompt(a)]
        parts.append(f"## {label}\n\n" + ("\n\n".join(given) if given else "*(no answer)*") + "\n")
    return "\n".join(parts)


def _feedback(sub: _Submission, submission: str) -> str:
    lines = [f"# Feedback: {submission}", ""]
    if sub.problem:
        lines += [f"**{sub.problem}**", ""]
    for row in sub.rows:
        pts = "manual" if row["status"] == "manual" else f"{row['points']:g} / {row['max_points']:g}"
        lines += [f"## {row['exercise']}: {row['status']} ({pts})", "", row["message"] or "", ""]
    return "\n".join(lines)


def _grade_one(index: int, path: Path, out_dir: Path, autograder_dir: Path, chapters: list[str],
               timeout: float) -> tuple[list[dict], bool]:
    """Grade one submission into ``out_dir/<NNN>_<name>/``; ``(its rows, whether otter graded it)``."""
    submission = str(path)
    folder = out_dir / f"{index + 1:03d}_{re.sub(r'[^A-Za-z0-9_.-]+', '_', path.stem)}"
    folder.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    try:
        nb, problem = nbformat.read(path, as_version=4), ""
    except Exception as error:  # missing, unreadable or not a notebook
        nb, problem = None, f"error: not a readable notebook ({type(error).__name__}: {error})"
    chapter = _chapter_of(nb, path, chapters) if nb is not None else None
    sub = _Submission(path, chapter)
    if chapter is None:
        sub.problem = problem or f"error: no autograder matches {path.name} (chapters: {', '.join(chapters)})"
        (folder / "feedback.md").write_text(_feedback(sub, submission), encoding="utf-8")
        print(f"{submission}: {sub.problem}", flush=True)
        return [{"submission": submission, "exercise": "", "points": 0.0, "max_points": 0.0, "status": "error",
                 "message": sub.problem}], False
    manifest = json.loads((autograder_dir / f"{chapter}.json").read_text())
    results, sub.problem = _run_otter(nb, chapter, autograder_dir / f"{chapter}.zip", timeout)
    sub.seconds = time.perf_counter() - start
    sub.rows = _rows(submission, manifest, results, sub.problem)
    for row in sub.rows:
        row["seconds"] = round(sub.seconds, 1)  # the whole submission's grading time
    if results is not None:
        (folder / "results.json").write_text(json.dumps(results, indent=1), encoding="utf-8")
    (folder / "feedback.md").write_text(_feedback(sub, submission), encoding="utf-8")
    (folder / "manual_answers.md").write_text(f"# Manual answers: {submission} ({chapter})\n\n"
                                              + _manual_answers(nb, manifest), encoding="utf-8")
    print(f"{submission}: {chapter}, {sum(r['points'] or 0 for r in sub.rows):g} / "
          f"{sum(r['max_points'] for r in sub.rows if r['status'] != 'manual'):g} autograded points"
          f"{' (' + sub.problem + ')' if sub.problem else ''} [{sub.seconds:.1f} s]", flush=True)
    return sub.rows, results is not None


def grade(notebooks: list[str | Path], out_dir: str | Path, autograder_dir: str | Path = "dist/autograder",
          timeout: float = 600, jobs: int = 1) -> tuple[list[dict], bool]:
    """Grade submissions with otter and write ``out_dir/grades.csv``, feedback and manual answers.

    Each submission runs in its own ``otter run`` process (its own kernel) with at most ``timeout``
    seconds; past it, or if otter fails, the submission's autograded exercises get 0 and the batch
    goes on. The chapter comes from the notebook's otter metadata, else from its file name.

    Args:
        notebooks: submitted ``.ipynb`` files.
        out_dir: where ``grades.csv`` (columns :data:`GRADE_COLUMNS`) and one folder per submission
            (``feedback.md``, ``manual_answers.md``, ``results.json``) go.
        autograder_dir: the ``<chapter>.zip`` and ``<chapter>.json`` files of ``make assignments``.
        timeout: seconds per submission.
        jobs: submissions graded at the same time (each in its own process).

    Returns:
        ``(rows, all_graded)``: the CSV's rows in the order of ``notebooks`` (plus a ``message``
        column) and whether otter graded every submission (no timeout, no error, no unknown chapter).
    """
    from concurrent.futures import ThreadPoolExecutor

    out_dir, autograder_dir = Path(out_dir), Path(autograder_dir)
    chapters = sorted(p.stem for p in autograder_dir.glob("*.zip") if (autograder_dir / f"{p.stem}.json").is_file())
    if not chapters:
        raise FileNotFoundError(f"no autograder (<chapter>.zip and .json) in {autograder_dir}: run make assignments")
    if jobs < 1:
        raise ValueError(f"jobs must be at least 1, got {jobs}")
    out_dir.mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(max_workers=jobs) as pool:  # threads only wait: each grading is its own process
        done = list(pool.map(lambda item: _grade_one(item[0], Path(item[1]), out_dir, autograder_dir, chapters,
                                                     timeout), enumerate(notebooks)))
    all_rows = [row for rows, _ in done for row in rows]
    with open(out_dir / "grades.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=GRADE_COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(all_rows)
    return all_rows, all(graded for _, graded in done)
