"""A newcomer's clone has no data file: the notebooks that read data must still run top to bottom.

nbval runs the notebooks with the data (CI has ../shared/data beside its clone); this runs the one
notebook that reads a data file once more with COURSE_DATA_DIR pointing at an empty folder, as on a
machine without ../shared. Its training cells skip there, so the run is short.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

BOOK = Path(__file__).resolve().parents[1] / "book"
NEEDS_DATA = ["08b_translation.ipynb"]


@pytest.mark.notebooks
@pytest.mark.parametrize("name", NEEDS_DATA)
def test_notebook_runs_without_the_data_file(name, tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_DATA_DIR", str(tmp_path))  # an empty folder: no fra-eng/fra.txt
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(BOOK / name, as_version=4)
    # The kernel inherits this process's environment; a failing cell raises CellExecutionError with
    # the cell and its traceback.
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(BOOK)}}).execute()
    printed = "\n".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "fra.txt" in printed or "COURSE_DATA_DIR" in printed, (
        "the notebook should say which data file it did not find and how to get it")
