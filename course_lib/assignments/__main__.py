"""``python -m course_lib.assignments generate|grade ...``: the command line of :mod:`course_lib.assignments.cli`."""

from .cli import main

raise SystemExit(main())
