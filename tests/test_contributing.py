"""CONTRIBUTING.md, the issue forms and CHANGELOG.md: what they say to run exists, their format is valid."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
FORMS = sorted(p for p in (ROOT / ".github" / "ISSUE_TEMPLATE").glob("*.yml") if p.name != "config.yml")
# GitHub's issue forms: the element types and the keys a form has.
FORM_TYPES = {"markdown", "textarea", "input", "dropdown", "checkboxes"}


def test_the_make_targets_contributing_names_exist():
    text = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    targets = sorted(set(re.findall(r"(?:^|`|\s)make ([a-z][a-z-]*)", text)))
    assert {"venv", "unit", "book", "test", "data"} <= set(targets), targets
    for target in targets:
        done = subprocess.run(["make", "-n", target], cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, f"make {target}: {done.stderr.strip()[-300:]}"


@pytest.mark.parametrize("path", FORMS, ids=[p.name for p in FORMS])
def test_each_issue_form_is_a_valid_github_form(path):
    form = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert form["name"] and form["description"] and isinstance(form["body"], list), path.name
    ids = [element.get("id") for element in form["body"] if element["type"] != "markdown"]
    assert len(ids) == len(set(ids)) and all(ids), f"{path.name}: ids {ids}"
    for element in form["body"]:
        assert element["type"] in FORM_TYPES, element
        assert element["attributes"].get("label" if element["type"] != "markdown" else "value"), element
        if element["type"] == "dropdown":
            assert element["attributes"]["options"], element
    assert any(e.get("validations", {}).get("required") for e in form["body"]), f"{path.name}: nothing required"


def test_the_issue_chooser_links_to_the_book_and_the_guide():
    config = yaml.safe_load((ROOT / ".github" / "ISSUE_TEMPLATE" / "config.yml").read_text(encoding="utf-8"))
    urls = [link["url"] for link in config["contact_links"]]
    assert any(u.endswith(".github.io/attention-from-first-principles/") for u in urls)
    assert any(u.endswith("/CONTRIBUTING.md") for u in urls)


def test_the_changelog_keeps_a_changelog():
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert text.startswith("# Changelog\n") and "keepachangelog.com/en/1.1.0" in text
    releases = re.findall(r"^## \[(.+?)\](.*)$", text, re.MULTILINE)
    assert releases and releases[0][0] == "Unreleased", releases
    for name, rest in releases[1:]:
        assert re.fullmatch(r"\d+\.\d+\.\d+", name) and re.fullmatch(r" - \d{4}-\d{2}-\d{2}", rest), (name, rest)
    kinds = set(re.findall(r"^### (.+)$", text, re.MULTILINE))
    assert kinds <= {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}, kinds
