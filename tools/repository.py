"""The repository's URL, read from its one place: ``repository: url:`` in _config.yml.

Jupyter Book makes the book's repository, issues and Colab buttons of it, and tools/sphinx_course.py the
footer's links; code that needs the URL reads it here::

    from repository import repository_url      # with tools/ on sys.path, as the tests and tools have it
    repository_url()                            # 'https://github.com/OWNER/NAME'

The copies that cannot read it (README.md, CITATION.cff, pyproject.toml's [project.urls], the notebooks'
setup cells, LICENSE-CC-BY-4.0) are checked against it by tests/test_repository_url.py, so a fork that
changes _config.yml is told every other place to change.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "_config.yml"
GITHUB = re.compile(r"https://github\.com/(?P<owner>[A-Za-z0-9-]+)/(?P<name>[A-Za-z0-9._-]+)")


def repository(config: Path = CONFIG) -> dict[str, str]:
    """_config.yml's ``repository:`` table: ``url``, ``branch``, ``path_to_book``."""
    import yaml

    table = (yaml.safe_load(config.read_text(encoding="utf-8")) or {}).get("repository") or {}
    url = str(table.get("url", "")).rstrip("/")
    if not GITHUB.fullmatch(url):
        raise ValueError(f"{config.name}: repository: url: is {url!r}, not https://github.com/OWNER/NAME")
    return {"url": url, "branch": str(table.get("branch", "main")), "path_to_book": str(table.get("path_to_book", ""))}


def repository_url(config: Path = CONFIG) -> str:
    """``https://github.com/OWNER/NAME``, from _config.yml."""
    return repository(config)["url"]


def owner_and_name(config: Path = CONFIG) -> tuple[str, str]:
    """``(OWNER, NAME)`` of :func:`repository_url`."""
    found = GITHUB.fullmatch(repository_url(config))
    return found["owner"], found["name"]


def pages_url(config: Path = CONFIG) -> str:
    """Where publish.yml deploys the book: ``https://OWNER.github.io/NAME/`` (GitHub Pages' project site)."""
    owner, name = owner_and_name(config)
    return f"https://{owner.lower()}.github.io/{name}/"


if __name__ == "__main__":
    print(repository_url())
