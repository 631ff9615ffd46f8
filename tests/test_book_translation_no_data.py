"""Section 8.1 on a machine without the English-French file: every cell runs, the notebook says plainly
what it skipped and how to get the data, every captioned figure is drawn and every number the prose
quotes is glued (so the book builds with -W and nbval passes on a clone with no ../shared)."""

import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOK = Path(__file__).resolve().parents[1] / "book" / "08b_translation.ipynb"


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    empty = tmp_path_factory.mktemp("no-data")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    env_cell = nbformat.v4.new_code_cell(
        f"import os\nos.environ['COURSE_DATA_DIR'] = {str(empty)!r}\nos.environ['MPLBACKEND'] = 'Agg'")
    nb.cells.insert(0, env_cell)
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOK.parent)}}
                   ).execute()
    return nb


def _text(cell) -> str:
    return "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("output_type") == "stream")


def test_every_cell_runs_and_the_notebook_says_what_it_skipped(executed):
    errors = [o for c in executed.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors
    said = "\n".join(_text(c) for c in executed.cells if c.cell_type == "code")
    assert "No data: fra-eng/fra.txt was not found" in said
    assert "set COURSE_DATA_DIR" in said and "DOWNLOAD = True" in said


def test_every_captioned_figure_is_drawn(executed):
    for cell in executed.cells:
        if cell.cell_type == "code" and "figure" in cell.metadata.get("mystnb", {}):
            images = [o for o in cell.outputs if "image/png" in o.get("data", {})]
            assert len(images) == 1, cell.metadata["mystnb"]["figure"]["name"]


def test_every_glued_name_in_the_prose_is_glued(executed):
    # cl.glue publishes through myst_nb (the book extra) and does nothing without it
    pytest.importorskip("myst_nb", reason="myst_nb comes with the book extra (pip install -e '.[book]')")
    quoted = {m for c in executed.cells if c.cell_type == "markdown"
              for m in re.findall(r"\{glue(?::\w+)?\}`([\w-]+)", c.source)}
    glued = {o["metadata"]["scrapbook"]["name"] for c in executed.cells if c.cell_type == "code"
             for o in c.outputs if "scrapbook" in o.get("metadata", {})}
    assert quoted and quoted <= glued, sorted(quoted - glued)


def test_checked_cells_do_not_depend_on_the_data():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    for cell in nb.cells:
        if "nbval-check-output" in cell.metadata.get("tags", []):
            assert "data" not in re.findall(r"\b\w+\b", cell.source), cell.source[:80]
