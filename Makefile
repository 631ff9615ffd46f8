# Two commands, on a fresh clone with Python 3.11 and pip:
#   make book   create .venv, install pinned deps, execute every notebook, build _build/html
#   make test   lint, unit tests, nbval over book/ and the browser test of the built book, in the same .venv
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export MPLBACKEND := Agg
export PYTHONHASHSEED := 0
# Progress bars print one line when a loop ends instead of a stored line per redraw
# (course_lib.progress); a notebook opened in Jupyter or Colab keeps its live bars.
export COURSE_PROGRESS := line

.PHONY: venv book test lint unit nbval bench assignments grade clean

venv: $(STAMP)

# constraints.txt holds the exact versions CI uses (torch 2.13.0, the local CPU wheel);
# pyproject.toml itself only gives lower bounds.
$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c constraints.txt -e ".[test,book,grading]"
	touch $(STAMP)

# Notebooks execute through the jupyter cache (_build/.jupyter_cache); tools/book_build.py clears it
# whenever course_lib or the pins change, so the HTML always shows what the current code prints, and
# stamps _build/html with what it was built from (the browser test rebuilds when that differs).
# One torch thread per kernel unless OMP_NUM_THREADS says otherwise: on a busy two-core machine,
# torch's default of one thread per core made chapter 8's training cell 10x slower.
book: $(STAMP)
	$(BIN)/python tools/book_build.py prepare
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} MKL_NUM_THREADS=$${MKL_NUM_THREADS:-1} \
	    $(BIN)/jupyter-book build book --config $(CURDIR)/_config.yml --toc $(CURDIR)/_toc.yml --path-output $(CURDIR) -W -n --keep-going
	$(BIN)/python tools/book_build.py stamp

# book/ruff.toml: the notebooks' code lines fit the book's column (79 characters at 1280 px)
# actionlint (a PyPI wheel that ships the binary) checks .github/workflows/ with .github/actionlint.yaml.
lint: $(STAMP)
	$(BIN)/ruff check course_lib tests benchmarks tools
	$(BIN)/ruff check book
	$(BIN)/actionlint

# One pytest run for unit tests and notebooks, so its closing line counts everything. JOBS workers
# (pytest-xdist); --dist loadscope keeps the cells of one notebook together, in order, in one kernel.
# One torch thread per worker: two workers with two threads each on two cores made training cells 10x slower.
# tests/test_book_browser.py (marker `browser`) builds the book as `make book` does when _build/html is
# not up to date, and opens every page in Chromium (skipped, saying how to install it, when there is none).
JOBS ?= 2
test: lint
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} $(BIN)/python -m pytest tests book -p no:cacheprovider -q -rs -n $(JOBS) --dist loadscope \
	    --nbval-lax --nbval-current-env --nbval-cell-timeout=900 \
	    --ignore=book/_build --ignore=_build --durations=10 $(PYTEST_ARGS)

# The fast loop: no notebook runs (tests marked `notebooks`, see tests/conftest.py).
unit: $(STAMP)
	$(BIN)/python -m pytest tests -q -m "not notebooks and not browser"

nbval: $(STAMP)
	$(BIN)/python -m pytest book -q --nbval-lax --nbval-current-env --nbval-cell-timeout=900 --ignore=book/_build

bench: $(STAMP)
	$(BIN)/python -m benchmarks

# dist/student (otter student notebooks), dist/autograder (<chapter>.zip for otter/Gradescope), dist/instructor
assignments: $(STAMP)
	$(BIN)/python -m course_lib.assignments generate --book book --out dist

clean:
	rm -rf _build book/_build dist

# Grade submissions with otter (untrusted code: use a container or VM): writes $(GRADES)/grades.csv and feedback
#   make grade NOTEBOOKS="submissions/*/03_scoring_functions.ipynb" [GRADES=grades] [TIMEOUT=600]
GRADES ?= grades
TIMEOUT ?= 600
grade: $(STAMP)
	$(BIN)/python -m course_lib.assignments grade --out $(GRADES) --timeout $(TIMEOUT) $(NOTEBOOKS)
