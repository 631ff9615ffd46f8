"""Keep the built book honest: its outputs always come from the current code.

`make book` executes the notebooks through Jupyter Book's jupyter-cache (``_build/.jupyter_cache``).
That cache is keyed on each notebook's code cells only: a change to ``course_lib`` (or to the pinned
versions) would leave stale outputs in the HTML. So the Makefile calls, around the build,

    python tools/book_build.py prepare   # before: clear the cache when the library changed
    python tools/book_build.py stamp     # after a successful build: record what it was built from

``prepare`` keeps a digest of ``course_lib/**/*.py``, ``pyproject.toml`` and ``constraints.txt`` in the
cache directory; when the digest differs it deletes the cache and Sphinx's saved state (doctrees and
executed copies), so every notebook is executed again. ``stamp`` writes the digest of every input of
the HTML (the library's digest plus the book's sources and configuration) to
``_build/html/.inputs-digest``; the browser test rebuilds whenever the digest of the working tree
differs from it, so it never tests a stale build.
"""

from __future__ import annotations

import hashlib
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "_build"
CACHE = BUILD / ".jupyter_cache"
LIBRARY_DIGEST = CACHE / "course_lib.digest"
HTML_DIGEST = BUILD / "html" / ".inputs-digest"


def _digest(paths: list[Path]) -> str:
    h = hashlib.sha256()
    for path in sorted(paths):
        h.update(path.relative_to(ROOT).as_posix().encode())
        h.update(b"\0")
        h.update(path.read_bytes())
        h.update(b"\0")
    return h.hexdigest()


def library_digest() -> str:
    """Digest of what the notebooks' outputs depend on besides the notebooks themselves."""
    files = list((ROOT / "course_lib").rglob("*.py"))
    files += [ROOT / "pyproject.toml", ROOT / "constraints.txt"]
    return _digest(files)


def inputs_digest() -> str:
    """Digest of every input of the HTML book: library, notebooks, bibliography, configuration, extension."""
    files = [p for p in (ROOT / "book").rglob("*") if p.is_file() and "_build" not in p.parts
             and ".ipynb_checkpoints" not in p.parts]
    files += [ROOT / "_config.yml", ROOT / "_toc.yml", ROOT / "Makefile"]
    files += list((ROOT / "tools").glob("*.py"))
    return library_digest() + _digest(files)


def prepare() -> None:
    """Clear the execution cache (and Sphinx's state) when the library or the pins changed."""
    digest = library_digest()
    if LIBRARY_DIGEST.exists() and LIBRARY_DIGEST.read_text().strip() == digest:
        return
    for stale in (CACHE, BUILD / ".doctrees", BUILD / "jupyter_execute"):
        if stale.exists():
            print(f"book_build: course_lib changed, removing {stale.relative_to(ROOT)}", flush=True)
            shutil.rmtree(stale)
    CACHE.mkdir(parents=True, exist_ok=True)
    LIBRARY_DIGEST.write_text(digest + "\n")


def stamp() -> None:
    HTML_DIGEST.write_text(inputs_digest() + "\n")


def is_up_to_date() -> bool:
    return HTML_DIGEST.exists() and HTML_DIGEST.read_text().strip() == inputs_digest()


if __name__ == "__main__":
    commands = {"prepare": prepare, "stamp": stamp}
    if len(sys.argv) != 2 or sys.argv[1] not in commands:
        sys.exit(f"usage: python {Path(__file__).name} {{{','.join(commands)}}}")
    commands[sys.argv[1]]()
