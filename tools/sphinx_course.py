"""The book's own Sphinx extension (loaded from _config.yml's ``sphinx.local_extensions``).

Launch buttons only on pages with code: sphinx-book-theme adds the "Launch interactive content"
group (Colab) to every page built from a notebook, including the intro, the notation table and the
bibliography, which have no code to run. This removes the group from pages whose doctree holds no
code cell.

The version in the footer: ``{version}`` in the theme's ``extra_footer`` (_config.yml) becomes the
package's version from pyproject.toml (the same as ``course_lib.__version__`` and CITATION.cff, checked
by tests/test_packaging.py), which is also Sphinx's ``version`` and ``release``; ``{repository}`` becomes
the repository's URL and branch from _config.yml's ``repository:`` (its one place).

Sections numbered in reading order: a numbered page with pages of its own below it in the toc (chapter 8,
whose section 8.1 is a page of its own) gives the numbers x.1, x.2, ... to those pages, and its own headings
are not numbered. Sphinx numbers a page's headings and its child pages in one sequence, in the order they
sit in the page, so the child page read after the whole chapter became 8.15 (after the chapter's 8.1-8.14),
or 8.1 read after 8.2-8.15 when its toctree stood at the top. See :func:`number_subpages_in_reading_order`.

Bibliography labels as the citations read: the ``course`` pybtex style is unsrt with labels
"Author, year", "Author and Author, year" or "Author et al., year" (sphinxcontrib-bibtex's
author_year citations) instead of "[VSP+17]", sorted by author and year.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from docutils import nodes
from sphinx import addnodes
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


def repository_blob_url(options: dict[str, Any]) -> str:
    """``https://github.com/OWNER/NAME/blob/BRANCH``: where the footer's links to LICENSE and CITATION.cff point.

    From the theme options Jupyter Book makes of _config.yml's ``repository:`` (``url`` and ``branch``), so a
    fork's footer follows its own ``repository:`` setting.
    """
    url = options.get("repository_url")
    if not url:
        raise ValueError("_config.yml has no repository: url: (the footer links to the repository's LICENSE)")
    return f"{url.rstrip('/')}/blob/{options.get('repository_branch') or 'main'}"


def set_version(app: Sphinx, config) -> None:
    """``{version}`` and ``{repository}`` in the footer: the package's version and :func:`repository_blob_url`."""
    version = package_version()
    config.version = config.release = version
    options = config.html_theme_options
    footer = options.get("extra_footer", "")
    if "{version}" in footer:
        footer = footer.replace("{version}", version)
    if "{repository}" in footer:
        footer = footer.replace("{repository}", repository_blob_url(options))
    options["extra_footer"] = footer


# ---------------------------------------------------------------------------------------------------
# Section numbers in reading order


def _child_pages(env, docname: str) -> list[str]:
    """The pages listed in the toctrees of ``docname``'s table of contents, in order."""
    return [ref for toctree in env.tocs[docname].findall(addnodes.toctree) for _, ref in toctree["entries"]
            if ref in env.tocs]


def _renumber(env, docname: str, old: tuple[int, ...], new: tuple[int, ...]) -> list[str]:
    """Replace the prefix ``old`` of every section number of ``docname`` and of the pages below it by ``new``."""
    def moved(number):
        return new + tuple(number[len(old):]) if number and tuple(number[:len(old)]) == old else number

    numbers = env.toc_secnumbers.get(docname, {})
    for anchor, number in numbers.items():
        numbers[anchor] = moved(number)
    for reference in env.tocs[docname].findall(nodes.reference):
        if reference.get("secnumber"):
            reference["secnumber"] = list(moved(tuple(reference["secnumber"])))
    title = env.titles.get(docname)
    if title is not None and title.get("secnumber"):
        title["secnumber"] = list(moved(tuple(title["secnumber"])))
    return [docname] + [page for child in _child_pages(env, docname) for page in _renumber(env, child, old, new)]


def number_subpages_in_reading_order(app: Sphinx, env) -> list[str]:
    """On a numbered page with pages of its own in the toc, number those pages x.1, x.2, ... and not its headings.

    Runs after Sphinx has numbered the sections (``env-get-updated``, after the TocTreeCollector and
    sphinx-multitoc-numbering's numbering at priority 500). Sphinx numbers a page's headings and its
    child pages in one sequence; here the page's own headings lose their numbers (the empty number
    ``()``, which the HTML writer shows as none) and the k-th child page, with everything below it,
    takes the number of the page followed by k. The root page is left alone.

    Returns:
        The pages whose numbers changed (Sphinx writes them again).
    """
    changed: list[str] = []
    for docname in list(env.tocs):
        numbers = env.toc_secnumbers.get(docname, {})
        prefix = numbers.get("")
        children = _child_pages(env, docname) if docname != app.config.root_doc else []
        if not prefix or not children:
            continue
        prefix = tuple(prefix)
        for anchor in numbers:
            if anchor:
                numbers[anchor] = ()
        for reference in env.tocs[docname].findall(nodes.reference):
            if reference.get("anchorname"):
                reference["secnumber"] = None
        for k, child in enumerate(children, start=1):
            old = tuple(env.toc_secnumbers.get(child, {}).get("") or ())
            if old:
                changed += _renumber(env, child, old, prefix + (k,))
        changed.append(docname)
    return changed


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
    # After Sphinx's section numbering (env-get-updated, priority 500).
    app.connect("env-get-updated", number_subpages_in_reading_order, priority=600)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
