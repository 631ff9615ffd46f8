"""Static checks of the book: what a reader relies on and a build warning would only hint at."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
NOTEBOOKS = sorted(BOOK.glob("*.ipynb"))


def _toc_files() -> list[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]]

    def walk(entries):
        for entry in entries:
            files.append(entry["file"])
            walk(entry.get("sections", []))

    for part in toc["parts"]:
        walk(part["chapters"])
    return files


def _markdown(nb: nbformat.NotebookNode) -> str:
    return "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")


def test_every_notebook_is_in_the_toc_and_every_toc_entry_exists():
    listed = _toc_files()
    assert sorted(listed) == sorted(p.stem for p in NOTEBOOKS)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_figure_has_a_caption_and_a_name(path):
    nb = nbformat.read(path, as_version=4)
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        images = sum("image/png" in o.get("data", {}) for o in cell.get("outputs", []))
        if not images:
            continue
        figure = cell.metadata.get("mystnb", {}).get("figure", {})
        assert figure.get("caption") and figure.get("name"), f"{path.name} cell {index}: a figure without a caption"
        # myst-nb wraps every rich output of the cell in the named figure: a second one duplicates the name.
        rich = [o for o in cell.outputs if o.get("output_type") in ("display_data", "execute_result")]
        assert len(rich) == 1, f"{path.name} cell {index}: a captioned cell must display exactly one output"


def test_figure_names_are_unique_across_the_book():
    names = [c.metadata["mystnb"]["figure"]["name"] for p in NOTEBOOKS for c in nbformat.read(p, as_version=4).cells
             if c.cell_type == "code" and "figure" in c.metadata.get("mystnb", {})]
    assert len(names) == len(set(names)), sorted({n for n in names if names.count(n) > 1})


def test_every_cited_work_is_in_the_bibliography():
    keys = set(re.findall(r"@\w+\{([^,\s]+),", (BOOK / "references.bib").read_text()))
    cited = {key.strip() for p in NOTEBOOKS for group in re.findall(r"\{cite[tp]?\}`([^`]+)`",
                                                                    _markdown(nbformat.read(p, as_version=4)))
             for key in group.split(",")}
    assert cited, "no citations found"
    assert not cited - keys, f"cited but not in references.bib: {sorted(cited - keys)}"


def test_every_doc_link_points_to_a_chapter():
    stems = {p.stem for p in NOTEBOOKS}
    for path in NOTEBOOKS:
        targets = re.findall(r"\{doc\}`(?:[^`<]*<)?([^`>]+)>?`", _markdown(nbformat.read(path, as_version=4)))
        missing = sorted({t for t in targets if t not in stems})
        assert not missing, f"{path.name} links to missing pages {missing}"


@pytest.mark.parametrize("path", [p for p in NOTEBOOKS if p.stem[:2].isdigit()], ids=lambda p: p.name)
def test_chapters_have_four_exercises_a_setup_cell_and_checked_outputs(path):
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert "course_lib" in code[0].source and "try_gpu" in code[0].source, "the first code cell is the setup cell"
    assert _markdown(nb).count("{exercise}") >= 4
    checked = [c for c in code if "nbval-check-output" in c.metadata.get("tags", [])]
    assert len(checked) >= 5
    assert not [c for c in code if "NBVAL_" in c.source], "nbval markers are cell tags, not comments readers see"
    assert all(c.get("outputs") for c in checked), "a checked cell without a stored output checks nothing"
    errors = [o for c in code for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_figure_has_a_caption_and_alt_text(path):
    nb = nbformat.read(path, as_version=4)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code" or not any("image/png" in o.get("data", {}) for o in cell.get("outputs", [])):
            continue
        options = cell.metadata.get("mystnb", {})
        assert options.get("figure", {}).get("caption"), f"{path.name} cell {i}: a figure without a caption"
        assert options.get("image", {}).get("alt"), f"{path.name} cell {i}: a figure without alt text"


LITERALINCLUDE = re.compile(
    r"```\{literalinclude\}\s+(?P<path>\S+)\n(?P<options>(?::[^\n]*\n)*)")
MAX_CODE_LINE = 79  # book/ruff.toml; a code line this long fits the column at 1280 px


def _pyobjects() -> list[tuple[str, str, str, bool]]:
    """(notebook, file, object, dedent) for every `{literalinclude}` with `:pyobject:`."""
    found = []
    for path in NOTEBOOKS:
        for match in LITERALINCLUDE.finditer(_markdown(nbformat.read(path, as_version=4))):
            options = dict(re.findall(r":(\w+):[ \t]*([^\n]*)", match["options"]))
            if "pyobject" in options:
                found.append((path.name, match["path"], options["pyobject"].strip(),
                              "dedent" in options))
    return found


def test_pyobject_includes_are_found():
    assert len(_pyobjects()) >= 4


@pytest.mark.parametrize("notebook,file,name,dedent", _pyobjects(),
                         ids=lambda v: v if isinstance(v, str) else None)
def test_included_library_code_fits_the_column(notebook, file, name, dedent):
    """Library code shown in the book with `:pyobject:` has no line over 79 characters.

    Sphinx shows the object's lines as they are in the file (a method keeps its class's indentation
    unless the directive says `:dedent:`), so the lines are measured the way the page shows them.
    """
    import ast
    import textwrap

    source = (BOOK / file).resolve()
    assert source.is_file(), f"{notebook}: {file} does not exist"
    text = source.read_text()
    node: ast.AST = ast.parse(text)
    for part in name.split("."):
        node = next((n for n in ast.iter_child_nodes(node)
                     if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                     and n.name == part), None)
        assert node is not None, f"{notebook}: {name} is not in {file}"
    lines = text.splitlines()[node.lineno - 1:node.end_lineno]
    shown = textwrap.dedent("\n".join(lines)).splitlines() if dedent else lines
    too_long = [f"  {len(line)}: {line.strip()[:60]}" for line in shown if len(line) > MAX_CODE_LINE]
    assert not too_long, (f"{notebook} shows {name} from {file} with lines over {MAX_CODE_LINE} "
                          "characters (rewrap them, or add :dedent: for a method):\n"
                          + "\n".join(too_long))


MAX_OUTPUT_LINE = 78  # an output line this long fits the column at 1280 px (book/_static)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_stored_outputs_fit_the_column(path):
    """No printed line of a stored output is longer than 78 characters.

    The browser test measures the built pages; this catches the same overflow in the notebooks as
    they are stored, without a build: split a long report over lines, wrap a message with
    `textwrap.fill(text, 78)`.
    """
    too_long = output_lines_over_the_column(nbformat.read(path, as_version=4))
    assert not too_long, (f"{path.name}: output lines over {MAX_OUTPUT_LINE} characters:\n"
                          + "\n".join(too_long))


def output_lines_over_the_column(nb) -> list[str]:
    """The printed lines of a notebook's outputs longer than MAX_OUTPUT_LINE, one description each.

    Also used on notebooks executed without their data (tests/test_notebooks_without_data.py).
    """
    too_long = []
    for index, cell in enumerate(nb.cells):
        for output in cell.get("outputs", []):
            if output.output_type == "stream":
                text = output.text
            elif output.output_type in ("execute_result", "display_data"):
                if {"text/html", "image/png", "image/svg+xml"} & set(output.data):
                    continue  # shown as HTML or an image, not as text
                text = output.data.get("text/plain", "")
            else:
                continue
            too_long += [f"  cell {index}: {len(line)} chars: {line[:60]}"
                         for line in text.splitlines() if len(line) > MAX_OUTPUT_LINE]
    return too_long


# The browser test estimates figure text from pixels, which resolves whole pixels of glyph height
# (about one point): it catches small text, not 8 pt against 9. So the sizes are also checked where
# they are set: the book's style (course_lib.teaching.plotting.BOOK_STYLE) and every explicit size in a cell.
_FONT_SIZE = re.compile(r"\b(?:fontsize|labelsize|size)\s*=\s*(\d+(?:\.\d+)?)\b|set_fontsize\(\s*(\d+(?:\.\d+)?)")
_FONT_CONTEXT = re.compile(r"fontsize|labelsize|set_fontsize|legend|text\(|annotate|tick_params|title|label")
MIN_FIGURE_PT = 9


def test_the_book_style_sets_no_text_under_9_pt():
    from course_lib.teaching.plotting import BOOK_STYLE

    sizes = {k: v for k, v in BOOK_STYLE.items() if k.endswith("size") and k != "figure.figsize"}
    assert sizes and min(sizes.values()) >= MIN_FIGURE_PT, sizes


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_cell_sets_figure_text_under_9_pt(path):
    small = []
    for i, cell in enumerate(nbformat.read(path, as_version=4).cells):
        if cell.cell_type != "code":
            continue
        for line in cell.source.splitlines():
            if not _FONT_CONTEXT.search(line):
                continue
            for match in _FONT_SIZE.finditer(line):
                value = float(match.group(1) or match.group(2))
                if value < MIN_FIGURE_PT:
                    small.append(f"cell {i}: {line.strip()}")
    assert not small, f"{path.name}: figure text under {MIN_FIGURE_PT} pt:\n  " + "\n  ".join(small)
