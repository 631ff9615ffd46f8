"""The README is true, line by line where a test can see it.

- its chapter table is _toc.yml's chapters, numbered as the book numbers them, with each notebook's own title
  and library modules that exist;
- the command line's subcommands and every ``--task`` choice are in its text;
- every figure it quotes from the translation benchmark equals the stored run
  (benchmarks/results/translation_quality.json), date included;
- the notebooks it says read a data file are those that do (tools/book_build.py's list);
- its layout names every top-level entry of the repository; its quick start pins this version's release tag;
- what it tells a reader to run works: the artifact-preview commands, the PDF link after ``make book``.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
sys.path.insert(0, str(ROOT / "tools"))

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib


def _section(heading: str) -> str:
    """The text of the README's section whose heading starts with ``heading`` (up to the next heading of its level)."""
    found = re.search(rf"^(#+) {re.escape(heading)}.*?$", README, re.MULTILINE)
    assert found, f"README has no section {heading!r}"
    level = len(found.group(1))
    rest = README[found.end():]
    end = re.search(rf"^#{{1,{level}}} ", rest, re.MULTILINE)
    return rest[: end.start()] if end else rest


def _title(notebook: Path) -> str:
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    for cell in cells:
        if cell["cell_type"] == "markdown":
            for line in "".join(cell["source"]).splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    raise AssertionError(f"{notebook.name} has no title")


def toc_chapters() -> list[tuple[str, str]]:
    """(number, file) of every numbered chapter and section of _toc.yml, numbered as the book numbers them:
    chapters 1, 2, ... across the numbered parts, a chapter's sections N.1, N.2, ..."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    found, chapter = [], 0
    for part in toc["parts"]:
        if not part.get("numbered"):
            continue
        for entry in part["chapters"]:
            chapter += 1
            found.append((str(chapter), entry["file"]))
            for k, section in enumerate(entry.get("sections", []), start=1):
                found.append((f"{chapter}.{k}", section["file"]))
    return found


TABLE_ROW = re.compile(r"^\| (?P<number>\d+(?:\.\d+)?)\.? (?P<title>[^|]+?) \| `book/(?P<file>[^`]+)\.ipynb` \| "
                       r"(?P<modules>[^|]*) \|$", re.MULTILINE)


def test_the_chapter_table_is_the_toc():
    rows = [(m["number"], m["file"]) for m in TABLE_ROW.finditer(README)]
    assert rows == toc_chapters(), f"README's table: {rows}\n_toc.yml: {toc_chapters()}"


@pytest.mark.parametrize("row", list(TABLE_ROW.finditer(README)), ids=lambda m: m["file"])
def test_each_row_has_the_notebooks_title_and_modules_that_exist(row):
    assert row["title"] == _title(ROOT / "book" / f"{row['file']}.ipynb"), row.group(0)
    modules = re.findall(r"`([\w.]+)`", row["modules"])
    assert modules, row.group(0)
    for module in modules:
        assert importlib.util.find_spec(f"course_lib.{module}"), f"no course_lib.{module} ({row['file']})"


def test_every_subcommand_and_task_of_the_command_line_is_in_the_readme():
    from course_lib.cli import build_parser

    parser = build_parser()
    commands = next(a for a in parser._actions if a.choices and a.dest == "command").choices
    text = _section("The command line")
    for name, sub in commands.items():
        assert re.search(rf"^- `{name} ", text, re.MULTILINE), f"README does not document `{name}`"
        for action in sub._actions:
            if action.dest == "task":
                assert f"--task {{{','.join(action.choices)}}}" in text, action.choices
    train = commands["train"]
    options = {o for a in train._actions for o in a.option_strings}
    assert {"--download", "--data", "--minutes", "--device"} <= options
    for option in ("--download", "--data", "--minutes", "--device", "--vocab", "--precision", "--compile"):
        assert f"`{option}" in text or f"{option} " in text, option


def test_the_translation_figures_are_the_stored_benchmark():
    stored = json.loads((ROOT / "benchmarks" / "results" / "translation_quality.json").read_text(encoding="utf-8"))
    text = _section("The command line")
    prose = " ".join(text.split())
    assert f"measured them on {stored['date']}" in prose, stored["date"]
    assert stored["minutes_per_model"] == 3 and "Three minutes of `train --task fra-eng` per model" in prose
    assert f"{stored['machine']['cpus']}-core CPU ({stored['machine']['threads']} threads)" in prose
    assert f"{stored['beam']['beam_size']} beams" in prose and f"{stored['test_sources']:,} test sentences" in prose
    rows = {name: r for r in stored["results"] for name in [r["name"]]}
    names = {"`course_lib.Transformer`": "course_lib.Transformer", "`torch.nn.Transformer`": "torch.nn.Transformer",
             "Bahdanau GRU": "Bahdanau GRU"}
    seen = 0
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        key = next((n for n in names if cells and cells[0].startswith(n)), None)
        if key is None or len(cells) != 4:
            continue
        result = rows[names[key]]
        assert cells[1:] == [str(result["steps"]), f"{result['bleu_beam']:.1f}", f"{result['bleu']:.1f}"], line
        seen += 1
    assert seen == len(stored["results"]) == 3
    params = {r["name"]: r["parameters"] for r in stored["results"]}
    assert f"{params['course_lib.Transformer'] / 1e6:.1f}M parameters" in prose
    assert params["course_lib.Transformer"] == params["torch.nn.Transformer"]
    assert f"the GRU {params['Bahdanau GRU'] / 1e6:.1f}M" in prose
    assert "about 40 BLEU" not in README and "2026-11-23" not in README


def test_the_notebooks_that_read_data_are_the_ones_it_names():
    import book_build

    named = set(re.findall(r"`book/([\w.]+\.ipynb)`", _section("Data")))
    assert named == {p.name for p in book_build.data_notebooks()}, named


def test_the_layout_names_every_top_level_entry():
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    if listed.returncode != 0:
        pytest.skip("not a git checkout")
    layout = _section("Layout")
    entries = {line.split("/")[0] for line in listed.stdout.splitlines()}
    missing = [e for e in sorted(entries) if not re.search(rf"(^|\s){re.escape(e)}(/|\s|$)", layout, re.MULTILINE)]
    assert not missing, f"README's layout does not name {missing}"


def test_the_quick_start_pins_this_versions_release():
    from repository import repository_url

    version = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
    assert f'pip install "git+{repository_url()}@v{version}"' in _section("Quick start")
    assert "https://download.pytorch.org/whl/cpu" in _section("Quick start")


def test_set_up_says_what_make_test_needs_and_what_windows_users_do():
    text = _section("Set-up: two commands")
    assert "nothing else" not in text
    assert "Chromium" in text and "make` and a POSIX shell" in text and "WSL 2" in text


def test_the_artifact_preview_commands_work():
    """`gh run download -n NAME` writes the files into the current folder: serving `-d book-html` needs `-D`."""
    for found in re.finditer(r"gh run download [^`]*", README):
        assert "-n book-html -D book-html" in found.group(0), found.group(0)
    assert "python -m http.server -d book-html 8000" in README and "unzip book-html.zip -d book-html" in README


def test_make_book_prints_the_pdf_the_intro_links_to(tmp_path, monkeypatch, capsys):
    """After `make book` alone (what the README says to run) the intro's link to the PDF works where there is a
    Chromium, and `make book` says why it does not where there is none."""
    import book_pdf

    intro = (ROOT / "book" / "intro.ipynb").read_text(encoding="utf-8")
    assert f'href=\\"{book_pdf.PDF_NAME}\\"' in intro
    done = subprocess.run(["make", "-n", "-B", "book"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    lines = done.stdout.splitlines()
    stamp = next(i for i, line in enumerate(lines) if "tools/book_build.py stamp" in line)
    assert "tools/book_pdf.py --if-browser" in lines[stamp + 1], lines[stamp:]
    monkeypatch.setattr(book_pdf, "is_up_to_date", lambda *a: False)
    monkeypatch.setattr(book_pdf, "CHROMIUM", tmp_path / "no-chromium")
    monkeypatch.setattr(book_pdf, "print_book", lambda *a, **k: pytest.fail("printed without a browser"))
    book_pdf.main(["--if-browser"])
    assert "no Chromium" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        book_pdf.main(["--every-page"])
