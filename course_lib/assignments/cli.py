"""The command line of :mod:`course_lib.assignments`: ``generate`` the assignments, ``grade`` submissions."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ._points import POINTS_FILE, write_points
from .generation import exercise_table, make_assignments
from .grading import grade


def main(argv: list[str] | None = None) -> int:
    """``generate`` the assignments or ``grade`` submissions; see ``--help``. Exit status 0: all done."""
    parser = argparse.ArgumentParser(prog="python -m course_lib.assignments",
                                     description="Assignments from the book, graded with otter-grader.")
    commands = parser.add_subparsers(dest="command", required=True)
    gen = commands.add_parser("generate", help="write dist/instructor, dist/student and dist/autograder from book/")
    gen.add_argument("--book", default="book", help="the book's notebooks (default: book)")
    gen.add_argument("--out", default="dist", help="output folder (default: dist)")
    gen.add_argument("--chapter", action="append", help="only this chapter (notebook stem); repeatable")
    gen.add_argument("--points", default=None,
                     help=f"points per exercise (default: {POINTS_FILE.relative_to(POINTS_FILE.parents[2])})")
    gen.add_argument("--executed", default=None,
                     help="the HTML build's executed notebooks (_build/jupyter_execute): glued numbers from there")
    gen.add_argument("--seed", type=int, default=None,
                     help="the hidden tests' variant (default: a fresh secret per chapter, kept only in its zip)")
    pts = commands.add_parser("points", help="write every exercise of the book into the points file, keeping the "
                                             "points already set; new exercises get the default")
    pts.add_argument("--book", default="book", help="the book's notebooks (default: book)")
    pts.add_argument("--file", default=None, help="the points file (default: the one make assignments reads)")
    syl = commands.add_parser("syllabus", help="write BOOK/syllabus.ipynb from the chapters (reading times, exercises)")
    syl.add_argument("--book", default="book", help="the book's notebooks (default: book)")
    gra = commands.add_parser(
        "grade", help="grade submitted notebooks with otter; writes OUT/grades.csv and feedback",
        description="Grade submissions: each runs in its own otter process with a time limit. Submissions are "
                    "untrusted code and run with your permissions: grade in a container or VM (or with "
                    "`otter grade` in Docker). Exit status 0 when every submission was graded, 1 when one "
                    "timed out or could not be graded (it gets 0 points), 2 on a usage error.")
    gra.add_argument("notebooks", nargs="+", metavar="NOTEBOOK", help="submitted .ipynb files")
    gra.add_argument("--out", required=True, help="folder for grades.csv and per-submission feedback")
    gra.add_argument("--autograders", default="dist/autograder",
                     help="folder of the <chapter>.zip and .json files (default: dist/autograder)")
    gra.add_argument("--timeout", type=float, default=600, help="seconds per submission (default: 600)")
    gra.add_argument("--jobs", type=int, default=1, help="submissions graded at once (default: 1)")
    args = parser.parse_args(argv)
    try:
        if args.command == "syllabus":
            from .syllabus import write_syllabus

            print(f"wrote {write_syllabus(args.book)}")
            return 0
        if args.command == "points":
            added = write_points(exercise_table(args.book), args.file)
            note = f"; added with the default: {', '.join(added)}" if added else ""
            print(f"wrote {args.file or POINTS_FILE}{note}")
            return 0
        if args.command == "generate":
            written = make_assignments(args.book, args.out, args.chapter, points_file=args.points, seed=args.seed,
                                       executed=args.executed)
            for version, paths in written.items():
                print(f"{version}: {len(paths)} files in {Path(args.out) / version}")
            return 0
        rows, all_graded = grade(args.notebooks, args.out, args.autograders, args.timeout, args.jobs)
    except (OSError, ValueError, RuntimeError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"wrote {Path(args.out) / 'grades.csv'} ({len(rows)} rows)")
    return 0 if all_graded else 1
