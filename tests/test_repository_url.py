"""The repository's URL lives in one place, _config.yml's ``repository: url:``; every copy follows it.

Jupyter Book makes the book's repository, issues and Colab buttons of ``repository:`` (the theme options of
_config.yml no longer carry copies that override it, so a fork's buttons point at the fork), the footer's
links come from it (tools/sphinx_course.py), and the places that cannot read it -- README.md, CITATION.cff,
pyproject.toml's URLs, LICENSE-CC-BY-4.0, the notebooks' setup cell -- are checked against it here.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import repository  # noqa: E402  (tools/repository.py)

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

URL = repository.repository_url()
OWNER, NAME = repository.owner_and_name()
PAGES = repository.pages_url()
# A URL of a GitHub repository (or its Colab or Pages address): owner and name.
REPO_URL = re.compile(r"(?:github\.com|colab\.research\.google\.com/github)/(?P<owner>[A-Za-z0-9-]+)/"
                      r"(?P<name>[A-Za-z0-9._-]+)|(?P<pages_owner>[A-Za-z0-9-]+)\.github\.io/(?P<pages_name>[A-Za-z0-9._-]+)")


def _text_files() -> list[Path]:
    try:
        listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True, timeout=60)
        paths = [ROOT / line for line in listed.stdout.splitlines()]
    except (OSError, subprocess.CalledProcessError):  # not a git checkout (an sdist)
        skip = {".venv", "_build", "dist", ".git", "node_modules"}
        paths = [p for p in ROOT.rglob("*") if not skip & set(p.relative_to(ROOT).parts)
                 and not p.relative_to(ROOT).parts[0].startswith(".venv")]
    texts = []
    for path in paths:
        if path.is_file() and path.suffix not in {".png", ".svg", ".pdf", ".zip", ".pt", ".woff", ".woff2"}:
            try:
                path.read_text(encoding="utf-8")
            except UnicodeDecodeError:
                continue
            texts.append(path)
    return texts


def test_the_one_place_is_a_github_repository_url():
    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    assert config["repository"]["url"] == URL
    assert re.fullmatch(r"https://github\.com/[A-Za-z0-9-]+/[A-Za-z0-9._-]+", URL), URL


def test_the_theme_options_hold_no_copy_of_the_repository():
    """sphinx.config.html_theme_options used to repeat the URL, and (replacing what Jupyter Book derives from
    `repository:`) kept a fork's buttons pointing upstream."""
    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    theme = config["sphinx"]["config"].get("html_theme_options", {})
    copies = {"repository_url", "repository_branch", "path_to_docs", "launch_buttons"} & set(theme)
    assert not copies, f"_config.yml's html_theme_options repeats {sorted(copies)}: set them under repository:"
    assert "github.com" not in yaml.safe_dump(config["sphinx"]), "a URL of the repository in sphinx: config:"


def _final_theme_options(config: dict, tmp_path: Path) -> dict:
    jupyter_book_config = pytest.importorskip("jupyter_book.config")
    path = tmp_path / "_config.yml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    final, _ = jupyter_book_config.get_final_config(user_yaml=path, cli_config={"latex_individualpages": False},
                                                    sourcedir=ROOT / "book")
    return final["html_theme_options"]


def test_the_buttons_and_the_footer_follow_repository_url_in_a_fork(tmp_path):
    """What Sphinx gets (Jupyter Book's own translation of _config.yml): the buttons' URL, then the footer's."""
    from sphinx_course import set_version

    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    for url in (URL, "https://github.com/a-fork/its-copy"):
        config["repository"]["url"] = url
        options = _final_theme_options(config, tmp_path)
        assert options["repository_url"] == url
        assert options["path_to_docs"] == "book" and options["repository_branch"] == "main"
        assert options["use_repository_button"] and options["use_issues_button"]
        assert options["launch_buttons"]["colab_url"] == "https://colab.research.google.com"
        assert options.get("use_download_button") and options.get("use_fullscreen_button"), options

        class Config:  # what set_version reads and writes of Sphinx's config
            html_theme_options = options
            version = release = None

        set_version(None, Config)
        footer = Config.html_theme_options["extra_footer"]
        assert f'href="{url}/blob/main/LICENSE"' in footer and f'href="{url}/blob/main/CITATION.cff"' in footer
        assert "{" not in footer, footer


def test_every_copy_names_the_repository_of_config_yml():
    """A URL of this repository (by its name: GitHub, Colab or Pages) anywhere in the tracked files names the
    owner of _config.yml: a fork that changes the one place is shown here every copy it must change too."""
    wrong = []
    for path in _text_files():
        for found in REPO_URL.finditer(path.read_text(encoding="utf-8")):
            owner = found["owner"] or found["pages_owner"]
            name = (found["name"] or found["pages_name"]).removesuffix(".git").rstrip(".")
            if name.lower() == NAME.lower() and (owner.lower() != OWNER.lower() or name != NAME):
                wrong.append(f"{path.relative_to(ROOT)}: {found.group(0)}")
    assert not wrong, f"not {URL}:\n  " + "\n  ".join(wrong)


def test_the_places_that_cannot_read_it_hold_it():
    citation = yaml.safe_load((ROOT / "CITATION.cff").read_text(encoding="utf-8"))
    assert citation["repository-code"] == URL and citation["url"] == PAGES
    urls = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["urls"]
    assert urls["Repository"] == URL and urls["Homepage"] == PAGES and urls["Documentation"] == PAGES
    assert urls["Issues"] == f"{URL}/issues" and urls["Changelog"] == f"{URL}/blob/main/CHANGELOG.md"
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert f"https://colab.research.google.com/github/{OWNER}/{NAME}/blob/main/book/" in readme
    assert PAGES in readme and f"git+{URL}@" in readme
    assert PAGES in (ROOT / "LICENSE-CC-BY-4.0").read_text(encoding="utf-8")
    import setup_cell  # tools/setup_cell.py: the notebooks' first cell installs course_lib from the repository

    assert getattr(setup_cell, "REPOSITORY", URL) == URL
    for notebook in setup_cell.chapter_notebooks():
        assert URL in notebook.read_text(encoding="utf-8"), f"{notebook.name}: its setup cell does not name {URL}"


def test_a_copy_with_another_owner_is_found(tmp_path):
    """The scan can fail: an upstream URL left in a fork's README is reported."""
    text = f"see https://github.com/someone-else/{NAME}/blob/main/README.md and https://{OWNER}.github.io/{NAME}/"
    found = [(m["owner"] or m["pages_owner"]) for m in REPO_URL.finditer(text)]
    assert found == ["someone-else", OWNER]
