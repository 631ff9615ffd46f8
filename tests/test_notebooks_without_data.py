"""A newcomer's clone has no data file: the notebooks that read data must still run top to bottom.

nbval runs the notebooks with the data (CI has ../shared/data beside its clone); this runs each notebook
that reads a data file (tools/book_build.py finds them by their calls into course_lib.data) once more
with COURSE_DATA_DIR pointing at an empty folder, as on a machine without ../shared. Its training cells
skip there, so the run is short (about 5 s for section 8.1). What it prints must fit the book's column
as the stored outputs do (tests/test_book.py); the browser test checks the pages of the book built
this way (`make book-without-data`).
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from test_book import MAX_OUTPUT_LINE, output_lines_over_the_column

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
sys.path.insert(0, str(ROOT / "tools"))
import book_build  # noqa: E402

sys.path.pop(0)
NEEDS_DATA = book_build.data_notebooks()


def test_the_notebooks_that_read_data_are_found():
    assert BOOK / "08b_translation.ipynb" in NEEDS_DATA, NEEDS_DATA


def test_missing_data_says_which_file_and_how_to_point_at_it(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_DATA_DIR", str(tmp_path))
    reason = book_build.missing_data()
    assert "fra-eng/fra.txt" in reason and "COURSE_DATA_DIR" in reason
    (tmp_path / "fra-eng").mkdir()
    (tmp_path / "fra-eng" / "fra.txt").write_text("Go.\tVa !\n", encoding="utf-8")
    assert book_build.missing_data() is None


class _Cell:
    """What the conftest hook reads of one of nbval's items: the notebook's path, and its markers."""

    def __init__(self, path: Path) -> None:
        self.path, self.markers = path, []

    def add_marker(self, marker) -> None:
        self.markers.append(marker)


@pytest.mark.parametrize("has_data", [False, True])
def test_nbval_skips_the_data_notebooks_cells_only_where_the_file_is_absent(has_data, tmp_path, monkeypatch):
    import conftest

    if has_data:
        (tmp_path / "fra-eng").mkdir()
        (tmp_path / "fra-eng" / "fra.txt").write_text("Go.\tVa !\n", encoding="utf-8")
    monkeypatch.setenv("COURSE_DATA_DIR", str(tmp_path))
    cells = [_Cell(path) for path in sorted(BOOK.glob("*.ipynb"))]
    conftest._skip_data_notebooks_without_data(cells)
    skipped = {cell.path for cell in cells if cell.markers}
    assert skipped == (set() if has_data else set(NEEDS_DATA))
    if not has_data:
        (reason,) = {cell.markers[0].kwargs["reason"] for cell in cells if cell.markers}
        assert "English-French file" in reason and "COURSE_DATA_DIR" in reason


@pytest.mark.notebooks
@pytest.mark.parametrize("path", NEEDS_DATA, ids=lambda p: p.name)
def test_notebook_runs_without_the_data_file_and_fits_the_column(path, tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_DATA_DIR", str(tmp_path))  # an empty folder: no fra-eng/fra.txt
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(path, as_version=4)
    # The kernel inherits this process's environment; a failing cell raises CellExecutionError with
    # the cell and its traceback.
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(BOOK)}}).execute()
    printed = "\n".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "fra.txt" in printed or "COURSE_DATA_DIR" in printed, (
        "the notebook should say which data file it did not find and how to get it")
    too_long = output_lines_over_the_column(nb)
    assert not too_long, (f"{path.name} run without its data prints lines over {MAX_OUTPUT_LINE} characters "
                          "(wrap them with textwrap.fill):\n" + "\n".join(too_long))
