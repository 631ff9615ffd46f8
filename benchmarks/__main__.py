"""Run every benchmark in this package: ``python -m benchmarks``.

Each ``bench_*.py`` module found next to this file is imported by name and its ``main()`` is
called, so adding a benchmark needs no change here. A module that fails to import or run is
reported and the others still run; the exit status is 1 if any failed.
"""

from __future__ import annotations

import importlib
import sys
import time
import traceback
from pathlib import Path


def discover() -> list[str]:
    """Module names of the ``bench_*.py`` files in this package, sorted."""
    return sorted(f"{__package__ or 'benchmarks'}.{p.stem}" for p in Path(__file__).parent.glob("bench_*.py"))


def main() -> int:
    """Run each benchmark's ``main()``; return 0 when all succeeded, else 1."""
    failed = []
    for name in discover():
        print(f"== {name}", flush=True)
        start = time.perf_counter()
        try:
            module = importlib.import_module(name)
            bench_main = getattr(module, "main", None)
            if not callable(bench_main):
                raise AttributeError(f"{name} has no main() function")
            bench_main()
        except Exception:  # one broken benchmark must not hide the others' results
            traceback.print_exc()
            failed.append(name)
        print(f"   ({time.perf_counter() - start:.1f} s)\n", flush=True)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
