"""Releases: one version everywhere it is pinned, the changelog's newest release, the student notebooks' branch
that the book's Colab buttons open, and what section 8.1 reads when a student downloads the data."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import yaml

import course_lib
from course_lib.assignments.generation import _install_requirements

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import setup_cell  # noqa: E402
import student_branch  # noqa: E402

sys.path.pop(0)

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

with open(ROOT / "pyproject.toml", "rb") as _f:
    VERSION = tomllib.load(_f)["project"]["version"]
URL = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"]


def test_the_changelogs_newest_release_is_the_packages_version():
    releases = re.findall(r"^## \[(\d+\.\d+\.\d+)\] - (\d{4}-\d{2}-\d{2})$", (ROOT / "CHANGELOG.md").read_text(),
                          re.MULTILINE)
    assert releases and releases[0][0] == VERSION == course_lib.__version__, releases[:2]
    assert [r[1] for r in releases] == sorted((r[1] for r in releases), reverse=True), "newest first"


@pytest.mark.parametrize("path", setup_cell.chapter_notebooks(), ids=lambda p: p.name)
def test_every_chapter_and_its_autograder_pin_this_release(path):
    nb = nbformat.read(path, as_version=4)
    requirements = _install_requirements(nb)
    assert requirements[0] == f"git+{URL}@v{VERSION}", requirements
    assert requirements[1:] == setup_cell.needs(path)


def test_the_student_notebooks_branch_holds_the_notebooks_alone(tmp_path):
    folder = tmp_path / "student"
    folder.mkdir()
    for name in ("01_a.ipynb", "02_b.ipynb"):
        nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(name)]), folder / name)
    (folder / "notes.txt").write_text("not a notebook")
    remote = tmp_path / "remote.git"
    subprocess.run(["git", "init", "--bare", "-q", str(remote)], check=True)
    assert student_branch.main([str(folder), "--remote", str(remote), "--push"]) == 0
    branch = student_branch.branch()
    assert branch == "student-notebooks"
    files = subprocess.run(["git", "ls-tree", "--name-only", branch], cwd=remote, capture_output=True, text=True,
                           check=True).stdout.split()
    assert files == ["01_a.ipynb", "02_b.ipynb", "README.md"]
    log = subprocess.run(["git", "log", "--format=%s%n%P", branch], cwd=remote, capture_output=True, text=True,
                         check=True).stdout.split("\n")
    assert log[0] == f"Student notebooks of v{VERSION}" and log[1] == "", "one commit, without parents"
    with pytest.raises(FileNotFoundError, match="make assignments"):
        student_branch.commit(tmp_path / "empty", "x")


class _Config:
    course_student_branch = "student-notebooks"


class _App:
    config = _Config()


def _launch_context(page: str) -> dict:
    url = f"https://colab.research.google.com/github/attention-course/attention-from-first-principles/blob/main/book/{page}.ipynb"
    return {"header_buttons": [{"label": "launch-buttons", "buttons": [{"text": "Colab", "url": url}]}]}


def test_a_chapters_colab_button_opens_its_student_version():
    pytest.importorskip("sphinx", reason="Sphinx comes with the book extra (pip install -e '.[book]')")
    sys.path.insert(0, str(ROOT / "tools"))
    import sphinx_course

    sys.path.pop(0)
    from docutils import nodes
    from docutils.utils import new_document

    class exercise_enumerable_node(nodes.Element):  # noqa: N801 - sphinx-exercise's node's name
        pass

    with_exercises, without = new_document("a"), new_document("b")
    with_exercises += exercise_enumerable_node()
    context = _launch_context("03_scoring_functions")
    sphinx_course.colab_opens_the_student_version(_App(), "03_scoring_functions", "page", context, with_exercises)
    button = context["header_buttons"][0]["buttons"][0]
    assert button["url"] == ("https://colab.research.google.com/github/attention-course/attention-from-first-principles"
                             "/blob/student-notebooks/03_scoring_functions.ipynb")
    assert button["text"] == "Colab (student version)"
    context = _launch_context("notation")
    sphinx_course.colab_opens_the_student_version(_App(), "notation", "page", context, without)
    assert context["header_buttons"][0]["buttons"][0]["url"].endswith("/blob/main/book/notation.ipynb")
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert config["sphinx"]["config"]["course_student_branch"] == student_branch.branch()


# --- section 8.1 in Colab: the opt-in download gives the book's pairs -------------------------------


def test_the_8_1_download_reads_the_courses_pairs_from_the_whole_export(tmp_path, monkeypatch):
    from course_lib.data import FRA_ENG_COURSE_PAIRS, load_fra_eng, read_sentence_pairs
    from course_lib.data import download as download_module

    # The course's copy: the export's first lines, the last one cut. The export goes on after it.
    pairs = [(f"Go {i}.", f"Va {i} !") for i in range(FRA_ENG_COURSE_PAIRS)]
    course = "".join(f"{en}\t{fr}\tCC-BY 2.0 (France)\n" for en, fr in pairs) + "Run now.\tCours mainte"
    export = course + "nant !\tCC-BY 2.0 (France)\n" + "".join(f"Longer sentence {i}.\tPhrase {i}.\n"
                                                              for i in range(3000))
    (tmp_path / "course").mkdir()
    (tmp_path / "course" / "fra.txt").write_text(course, encoding="utf-8")
    assert len(read_sentence_pairs(tmp_path / "course" / "fra.txt")[0]) == FRA_ENG_COURSE_PAIRS
    archive = tmp_path / "fra-eng.zip"
    import hashlib
    import zipfile

    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("fra-eng/fra.txt", export)
    monkeypatch.setattr(download_module, "FRA_ENG_URL", archive.as_uri())
    monkeypatch.setattr(download_module, "FRA_ENG_SHA1", hashlib.sha1(archive.read_bytes()).hexdigest())
    (tmp_path / "data").mkdir()
    monkeypatch.setenv("COURSE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("COURSE_CACHE_DIR", str(tmp_path / "cache"))
    downloaded = load_fra_eng(download=True, max_examples=FRA_ENG_COURSE_PAIRS)
    book = load_fra_eng(path=tmp_path / "course" / "fra.txt")
    assert downloaded.train == book.train and downloaded.test == book.test
    assert len(downloaded.src_vocab) == len(book.src_vocab)
    assert len(load_fra_eng(download=True).train) > len(book.train), "without max_examples: the whole export"


def test_the_courses_copy_has_that_many_pairs_and_8_1_asks_for_them():
    from course_lib.data import FRA_ENG_COURSE_PAIRS, DataNotFoundError, fra_eng_file, read_sentence_pairs

    cell = next(c.source for c in nbformat.read(ROOT / "book" / "08b_translation.ipynb", as_version=4).cells
                if c.cell_type == "code" and "load_fra_eng(" in c.source)
    assert re.search(r"load_fra_eng\(\s*download=DOWNLOAD, max_examples=cl\.data\.FRA_ENG_COURSE_PAIRS\s*\)", cell)
    try:
        path = fra_eng_file()
    except DataNotFoundError:
        pytest.skip("the course's copy of fra-eng/fra.txt is not here (../shared/data or COURSE_DATA_DIR)")
    assert len(read_sentence_pairs(path)[0]) == FRA_ENG_COURSE_PAIRS
