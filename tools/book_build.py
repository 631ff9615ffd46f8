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

    python tools/book_build.py without-data   # `make book-without-data`

builds what a reader without the data files sees (a fresh clone with no ../shared/data): the notebooks
that read data (:func:`data_notebooks`) executed with ``COURSE_DATA_DIR`` an empty folder, the other pages
rendered from their stored outputs (not executed again: they read no data), with the book's
configuration and toc, so numbering, references and glue resolve as in the book. Output:
``_build/no-data/_build/html``, stamped like the book; the browser test builds it when it is stale and
checks the pages of the data notebooks as it checks the book's.

    BOOK_EXECUTE=off make book                # `make test`'s browser test builds this way

renders every notebook from its stored outputs instead of executing it (``python tools/book_build.py
config`` writes the configuration with ``execute_notebooks: "off"`` and prints its path; ``prepare``
clears Sphinx's saved state whenever the mode changes, so neither build is mistaken for the other).
``make test`` runs every notebook once already, under nbval, which compares each checked output with the
stored one; executing them all a second time for the HTML doubled the run's notebook time (13 minutes on
the course's 2-core machine before chapters 12 and 13). ``make book``, and the published book, execute.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "_build"
CACHE = BUILD / ".jupyter_cache"
LIBRARY_DIGEST = CACHE / "course_lib.digest"
MODE_FILE = BUILD / ".execute-mode"     # the BOOK_EXECUTE mode of the last build (see the docstring)
MODES = ("cache", "off")
HTML = BUILD / "html"
HTML_DIGEST = HTML / ".inputs-digest"
NO_DATA = BUILD / "no-data"              # jupyter-book's --path-output for the build without data
NO_DATA_HTML = NO_DATA / "_build" / "html"
# The tools that are not inputs of the HTML (the PDF is printed from the HTML, after the build).
NOT_BUILD_INPUTS = {"book_pdf.py"}
# A notebook reads a data file when it calls one of these (course_lib.data); without the file it must
# still run top to bottom and say what it skipped.
_READS_DATA = re.compile(r"\b(?:load_fra_eng|load_english_lm|english_sentences|find_data_file|data_dir)\s*\(")


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
    # Not tool caches (book/.ruff_cache changes whenever `make lint` runs) nor Jupyter's checkpoints.
    files = [p for p in (ROOT / "book").rglob("*") if p.is_file() and "_build" not in p.parts
             and not any(part.startswith(".") for part in p.relative_to(ROOT).parts)]
    files += [ROOT / "_config.yml", ROOT / "_toc.yml", ROOT / "Makefile"]
    files += [p for p in (ROOT / "tools").glob("*.py") if p.name not in NOT_BUILD_INPUTS]
    return library_digest() + _digest(files) + execute_mode()


def execute_mode() -> str:
    """``BOOK_EXECUTE``: ``cache`` (execute through the jupyter cache, the default) or ``off`` (stored outputs)."""
    mode = os.environ.get("BOOK_EXECUTE", "cache") or "cache"
    if mode not in MODES:
        sys.exit(f"book_build: BOOK_EXECUTE must be one of {', '.join(MODES)}, not {mode!r}")
    return mode


def config() -> None:
    """Print the path of the configuration to build with: _config.yml, or its stored-outputs copy."""
    if execute_mode() == "cache":
        print(ROOT / "_config.yml")
        return
    import yaml

    settings = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    settings["execute"]["execute_notebooks"] = "off"
    # local_extensions' folders are relative to the configuration file, which is written elsewhere
    settings["sphinx"]["local_extensions"] = {name: str((ROOT / folder).resolve())
                                              for name, folder in settings["sphinx"]["local_extensions"].items()}
    BUILD.mkdir(parents=True, exist_ok=True)
    path = BUILD / "_config.stored-outputs.yml"
    path.write_text(yaml.safe_dump(settings, sort_keys=False), encoding="utf-8")
    print(path)


def prepare() -> None:
    """Clear the execution cache (and Sphinx's state) when the library or the pins changed, and Sphinx's
    state when the execution mode changed."""
    mode = execute_mode()
    if MODE_FILE.exists() and MODE_FILE.read_text().strip() != mode:
        for stale in (BUILD / ".doctrees", BUILD / "jupyter_execute"):
            if stale.exists():
                print(f"book_build: BOOK_EXECUTE is now {mode}, removing {stale.relative_to(ROOT)}", flush=True)
                shutil.rmtree(stale)
    BUILD.mkdir(parents=True, exist_ok=True)
    MODE_FILE.write_text(mode + "\n")
    digest = library_digest()
    if LIBRARY_DIGEST.exists() and LIBRARY_DIGEST.read_text().strip() == digest:
        return
    for stale in (CACHE, BUILD / ".doctrees", BUILD / "jupyter_execute"):
        if stale.exists():
            print(f"book_build: course_lib changed, removing {stale.relative_to(ROOT)}", flush=True)
            shutil.rmtree(stale)
    CACHE.mkdir(parents=True, exist_ok=True)
    LIBRARY_DIGEST.write_text(digest + "\n")


def stamp(html: Path = HTML) -> None:
    (html / ".inputs-digest").write_text(inputs_digest() + "\n")


def is_up_to_date(html: Path = HTML) -> bool:
    """Whether the HTML in ``html`` was built from the sources as they are now."""
    digest = html / ".inputs-digest"
    return digest.exists() and digest.read_text().strip() == inputs_digest()


def data_notebooks() -> list[Path]:
    """The book's notebooks whose code reads a data file (section 8.1 and chapter 11: the English-French file)."""
    import nbformat

    found = []
    for path in sorted((ROOT / "book").glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        if any(c.cell_type == "code" and _READS_DATA.search(c.source) for c in nb.cells):
            found.append(path)
    return found


def missing_data() -> str | None:
    """Why the data notebooks cannot run as their stored outputs were made, or ``None`` when they can.

    They read the English-French file (section 8.1, chapter 11); without it they train on other data, so
    nbval would compare their outputs with numbers from another corpus. tests/conftest.py then skips their
    nbval cells with this reason, and tests/test_notebooks_without_data.py runs them without the file.
    """
    from course_lib.data import FRA_ENG_FILE, DataNotFoundError, find_data_file

    try:
        find_data_file(FRA_ENG_FILE)
    except DataNotFoundError as e:
        return str(e)
    return None


def without_data() -> None:
    """Build the book as a reader without the data files sees it (see the module's docstring)."""
    import yaml

    reads = {p.name for p in data_notebooks()}
    empty = NO_DATA / "empty-data-folder"
    if empty.exists():
        shutil.rmtree(empty)
    empty.mkdir(parents=True)
    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    config["execute"].update(
        execute_notebooks="force",  # the data notebooks, every time: a run without data takes seconds
        exclude_patterns=sorted(p.name for p in (ROOT / "book").glob("*.ipynb") if p.name not in reads))
    # local_extensions' folders are relative to the configuration file, which is written elsewhere
    config["sphinx"]["local_extensions"] = {name: str((ROOT / folder).resolve())
                                            for name, folder in config["sphinx"]["local_extensions"].items()}
    NO_DATA.mkdir(parents=True, exist_ok=True)
    (NO_DATA / "_config.yml").write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    env = dict(os.environ, COURSE_DATA_DIR=str(empty), MPLBACKEND="Agg")
    env.setdefault("OMP_NUM_THREADS", "1")
    print(f"book_build: the book without data ({', '.join(sorted(reads))} executed with an empty "
          f"COURSE_DATA_DIR) -> {NO_DATA_HTML.relative_to(ROOT)}", flush=True)
    jupyter_book = Path(sys.executable).with_name("jupyter-book")
    subprocess.run([str(jupyter_book), "build", "book", "--config", str(NO_DATA / "_config.yml"),
                    "--toc", str(ROOT / "_toc.yml"), "--path-output", str(NO_DATA), "-W", "-n", "--keep-going"],
                   cwd=ROOT, env=env, check=True)
    stamp(NO_DATA_HTML)


def executed_option() -> None:
    """``--executed _build/jupyter_execute`` when the HTML book is up to date (its executed notebooks' glue
    stores are what the HTML shows), else nothing: `make assignments` passes it on to the generator."""
    if is_up_to_date() and (BUILD / "jupyter_execute").is_dir():
        print(f"--executed {(BUILD / 'jupyter_execute').relative_to(ROOT)}")


if __name__ == "__main__":
    commands = {"prepare": prepare, "config": config, "stamp": stamp, "without-data": without_data,
                "executed": executed_option}
    if len(sys.argv) != 2 or sys.argv[1] not in commands:
        sys.exit(f"usage: python {Path(__file__).name} {{{','.join(commands)}}}")
    commands[sys.argv[1]]()
