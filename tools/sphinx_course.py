"""The book's own Sphinx extension (loaded from _config.yml's ``sphinx.local_extensions``).

Launch buttons only on pages with code: sphinx-book-theme adds the "Launch interactive content"
group (Colab) to every page built from a notebook, including the intro, the notation table and the
bibliography, which have no code to run. This removes the group from pages whose doctree holds no
code cell.

The version in the footer: ``{version}`` in the theme's ``extra_footer`` (_config.yml) becomes the
package's version from pyproject.toml (the same as ``course_lib.__version__`` and CITATION.cff, checked
by tests/test_packaging.py), which is also Sphinx's ``version`` and ``release``.

Bibliography labels as the citations read: the ``course`` pybtex style is unsrt with labels
"Author, year", "Author and Author, year" or "Author et al., year" (sphinxcontrib-bibtex's
author_year citations) instead of "[VSP+17]", sorted by author and year.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx


def _has_code_cell(doctree: nodes.document | None) -> bool:
    if doctree is None:
        return False
    return any(node.get("nb_element") == "cell_code" for node in doctree.findall(nodes.Element))


def remove_launch_buttons_without_code(app: Sphinx, pagename: str, templatename: str,
                                       context: dict[str, Any], doctree: nodes.document | None) -> None:
    if _has_code_cell(doctree):
        return
    buttons = context.get("header_buttons")
    if buttons:
        buttons[:] = [b for b in buttons if b.get("label") != "launch-buttons"]


# ---------------------------------------------------------------------------------------------------
# The version number in the footer


def package_version() -> str:
    """The version of pyproject.toml's [project] table."""
    text = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text(encoding="utf-8")
    found = re.search(r'^version\s*=\s*"([^"]+)"', text, re.MULTILINE)
    if found is None:
        raise ValueError("pyproject.toml has no version")
    return found.group(1)


def set_version(app: Sphinx, config) -> None:
    version = package_version()
    config.version = config.release = version
    options = config.html_theme_options
    if "{version}" in options.get("extra_footer", ""):
        options["extra_footer"] = options["extra_footer"].replace("{version}", version)


# ---------------------------------------------------------------------------------------------------
# Bibliography labels in the author-year style of the citations ("[Vaswani et al., 2017]").


def _last_names(person) -> str:
    from pybtex.richtext import Text

    return Text.from_latex(" ".join(person.prelast_names + person.last_names)).render_as("text")


def author_year_label(entry) -> str:
    """"Nadaraya, 1964", "Bahdanau and Cho, 2015"... as sphinxcontrib-bibtex's author_year citations."""
    people = entry.persons.get("author") or entry.persons.get("editor") or []
    names = [_last_names(p) for p in people]
    if not names:
        who = entry.fields.get("title", entry.key)
    elif len(names) == 1:
        who = names[0]
    elif len(names) == 2:
        who = f"{names[0]} and {names[1]}"
    else:
        who = f"{names[0]} et al."
    return f"{who}, {entry.fields.get('year', 'n.d.')}"


def _register_bibliography_style() -> None:
    from pybtex.plugin import register_plugin
    from pybtex.style.formatting.unsrt import Style as UnsrtStyle
    from pybtex.style.labels import BaseLabelStyle

    class AuthorYearLabels(BaseLabelStyle):
        def format_labels(self, sorted_entries):
            labels = [author_year_label(e) for e in sorted_entries]
            seen: dict[str, int] = {}
            for label in labels:  # two works of the same authors and year: 2017a, 2017b
                seen[label] = seen.get(label, 0) + 1
            suffix: dict[str, int] = {}
            for label in labels:
                if seen[label] > 1:
                    suffix[label] = suffix.get(label, 0) + 1
                    yield label + "abcdefghijklmnopqrstuvwxyz"[suffix[label] - 1]
                else:
                    yield label

    class CourseStyle(UnsrtStyle):
        default_label_style = "course_author_year"
        default_sorting_style = "author_year_title"

    register_plugin("pybtex.style.labels", "course_author_year", AuthorYearLabels)
    register_plugin("pybtex.style.formatting", "course", CourseStyle)


def setup(app: Sphinx) -> dict[str, Any]:
    _register_bibliography_style()  # bibtex_default_style: course in _config.yml
    app.connect("config-inited", set_version)
    # sphinx-book-theme adds the launch buttons at priority 501; run after it.
    app.connect("html-page-context", remove_launch_buttons_without_code, priority=600)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
