"""``python -m course_lib``: the command line of :mod:`course_lib.cli`."""

from .cli import main

raise SystemExit(main())
