"""Numbers in the prose come from the cells: every {glue} role names a value a cell of its notebook glued."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

BOOK = Path(__file__).resolve().parents[1] / "book"
NOTEBOOKS = sorted(BOOK.glob("*.ipynb"))
ROLE = re.compile(r"\{glue(?::\w+)?\}`([^`:]+)(?::[^`]*)?`")


def _glued_keys(nb: nbformat.NotebookNode) -> set[str]:
    """Keys of the values recorded by myst-nb's glue in the stored outputs."""
    keys = set()
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            name = output.get("metadata", {}).get("scrapbook", {}).get("name")
            if name:
                keys.add(name)
    return keys


def _referenced_keys(nb: nbformat.NotebookNode) -> set[str]:
    return {key for cell in nb.cells if cell.cell_type == "markdown" for key in ROLE.findall(cell.source)}


def _literal_keys(nb: nbformat.NotebookNode, keys: set[str]) -> set[str]:
    """Keys written as string literals in the code (a notebook whose glue cells need data to run)."""
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    return {key for key in keys if f'"{key}"' in code or f"'{key}'" in code}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_glue_role_has_a_value_in_the_stored_outputs(path):
    nb = nbformat.read(path, as_version=4)
    referenced = _referenced_keys(nb)
    missing = sorted(referenced - _glued_keys(nb) - _literal_keys(nb, referenced))
    assert not missing, f"{path.name}: the prose quotes {missing}, which no cell glues"


def test_the_role_pattern_reads_keys_and_formats():
    text = "took {glue:text}`ch04-seconds:.0f` s, {glue:text}`ch04-len-max` and {glue}`plain`"
    assert ROLE.findall(text) == ["ch04-seconds", "ch04-len-max", "plain"]
