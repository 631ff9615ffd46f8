"""What the executed book shows where its Markdown has roles: glued numbers and cross-references as text.

The student notebooks are plain Markdown (no MyST), so each role the HTML renders is replaced by the text
the HTML shows for it:

- ``{glue:text}`key:fmt``` by the value the notebook's cell glued (its stored output, the executed book's
  glue store), formatted as myst-nb formats it (``format_plain_text``: the value literal-evaluated, then
  ``format(value, fmt)``);
- ``{doc}``, ``{ref}``, ``{numref}`` and ``{prf:ref}`` by what the HTML prints for them: a chapter's
  title, a section's title, "Fig. 8.3", "Exercise 3.2", "Proposition 3.1", numbered as the book numbers
  them (chapters in the order of ``_toc.yml``'s numbered parts, a chapter's section pages 8.1, 8.2, ...;
  figures, exercises and propositions per chapter, in reading order).

:class:`BookIndex` collects all of it once from ``book/`` and ``_toc.yml``.
"""

from __future__ import annotations

import re
from ast import literal_eval
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*$", re.MULTILINE)
_TARGET = re.compile(r"^\(([\w:.-]+)\)=[ \t]*\n(?:[ \t]*\n)*(#{1,6})\s+(.+?)\s*$", re.MULTILINE)
_LABELLED = re.compile(r"^[ \t]*(?:`{3,}|:{3,})[ \t]*\{(?P<kind>exercise|prf:\w+)\}[^\n]*\n(?:[ \t]*:[\w-]+:[^\n]*\n)*?"
                       r"[ \t]*:label:[ \t]*(?P<label>\S+)", re.MULTILINE)
_PROOF_NAMES = {"prf:proposition": "Proposition", "prf:theorem": "Theorem", "prf:lemma": "Lemma",
                "prf:definition": "Definition", "prf:corollary": "Corollary", "prf:proof": "Proof"}


def glue_store(nb: nbformat.NotebookNode) -> dict[str, dict[str, str]]:
    """``key -> {mime type: data}`` of every value the notebook's cells glued (their stored outputs)."""
    store = {}
    for cell in nb.cells:
        for output in cell.get("outputs", []) if cell.cell_type == "code" else []:
            scrap = output.get("metadata", {}).get("scrapbook")
            if scrap and "name" in scrap:
                prefix = scrap.get("mime_prefix", "")
                store[scrap["name"]] = {mime[len(prefix):] if mime.startswith(prefix) else mime: data
                                        for mime, data in output.get("data", {}).items()}
    return store


def _glue_file(path: Path) -> dict[str, dict[str, str]]:
    """A glue store as myst-nb writes it beside an executed notebook (``<page>.glue.json``)."""
    import json

    return {key: dict(output.get("data", {})) for key, output in json.loads(path.read_text(encoding="utf-8")).items()}


def format_glue(text: str, fmt_spec: str) -> str:
    """A glued ``text/plain`` value formatted as myst-nb's ``{glue:text}`` formats it."""
    try:
        value = literal_eval(text)
    except (SyntaxError, ValueError):
        value = text
    if fmt_spec == "":
        return str(value)
    kind = fmt_spec[-1]
    if kind == "s":
        value = str(value)
    elif kind in "bcdoxX":
        value = int(value)
    elif kind in "eEfFgGn%":
        value = float(value)
    return format(value, fmt_spec)


def _title(nb: nbformat.NotebookNode) -> str:
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            found = _HEADING.search(cell.source)
            if found:
                return found.group(2)
    return ""


def toc_numbers(toc_file: Path) -> dict[str, str]:
    """``{page: number}`` for the numbered pages of a Jupyter Book ``_toc.yml`` (chapters 1, 2, ... across its
    numbered parts, as ``use_multitoc_numbering`` numbers them; a chapter's sections N.1, N.2, ...)."""
    import yaml

    toc = yaml.safe_load(toc_file.read_text(encoding="utf-8"))
    numbers, chapter = {}, 0
    for part in toc.get("parts", [{"chapters": toc.get("chapters", []), "numbered": True}]):
        if not part.get("numbered"):
            continue
        for entry in part.get("chapters", []):
            chapter += 1
            numbers[entry["file"]] = str(chapter)
            for k, section in enumerate(entry.get("sections", []), start=1):
                numbers[section["file"]] = f"{chapter}.{k}"
    return numbers


@dataclass
class BookIndex:
    """Glue stores and cross-reference texts of a book (see the module docstring)."""

    titles: dict[str, str] = field(default_factory=dict)      # page -> its title
    numbers: dict[str, str] = field(default_factory=dict)     # page -> "8" or "8.1"
    labels: dict[str, str] = field(default_factory=dict)      # label -> the text a reference to it shows
    glue: dict[str, dict[str, dict[str, str]]] = field(default_factory=dict)  # page -> key -> data

    @classmethod
    def from_book(cls, book_dir: str | Path, toc_file: str | Path | None = None,
                  executed: str | Path | None = None) -> BookIndex:
        """Index the book in ``book_dir`` (numbered by ``toc_file``, default ``_toc.yml`` beside it).

        ``executed``: the folder where the HTML build keeps its executed notebooks' glue stores
        (``_build/jupyter_execute/<page>.glue.json``); the glued values then come from there, the numbers
        the HTML shows. Without it (or for a page it lacks) they come from the notebook's stored outputs.
        """
        book_dir = Path(book_dir)
        toc_file = Path(toc_file) if toc_file is not None else book_dir.parent / "_toc.yml"
        index = cls(numbers=toc_numbers(toc_file) if toc_file.is_file() else {})
        pages = sorted(book_dir.glob("*.ipynb"))
        counters: dict[tuple[str, str], int] = {}
        # reading order: numbered pages as the toc numbers them, then the others
        order = sorted(pages, key=lambda p: (p.stem not in index.numbers,
                                             [int(x) for x in index.numbers.get(p.stem, "0").split(".")], p.stem))
        for path in order:
            nb = nbformat.read(path, as_version=4)
            page = path.stem
            index.titles[page] = _title(nb)
            store = Path(executed) / f"{page}.glue.json" if executed is not None else None
            index.glue[page] = _glue_file(store) if store is not None and store.is_file() else glue_store(nb)
            number = index.numbers.get(page)
            chapter = number.split(".")[0] if number else None
            for cell in nb.cells:
                if cell.cell_type == "markdown":
                    for m in _TARGET.finditer(cell.source):
                        index.labels[m.group(1)] = m.group(3)
                    for m in _LABELLED.finditer(cell.source):
                        kind = m.group("kind")
                        name = "Exercise" if kind == "exercise" else _PROOF_NAMES.get(kind, kind.split(":")[-1].title())
                        index.labels[m.group("label")] = index._numbered(name, chapter, counters, kind)
                elif cell.cell_type == "code":
                    figure = cell.metadata.get("mystnb", {}).get("figure", {})
                    if figure.get("name"):
                        index.labels[figure["name"]] = index._numbered("Fig.", chapter, counters, "figure")
        return index

    @staticmethod
    def _numbered(name: str, chapter: str | None, counters: dict[tuple[str, str], int], kind: str) -> str:
        if chapter is None:
            return name
        counters[kind, chapter] = counters.get((kind, chapter), 0) + 1
        return f"{name} {chapter}.{counters[kind, chapter]}"

    def doc(self, page: str) -> str:
        """The text of ``{doc}`page```: the page's title."""
        page = page.removesuffix(".ipynb").split("/")[-1]
        if page not in self.titles:
            raise ValueError(f"{{doc}} names {page!r}, which is not a page of the book")
        return self.titles[page]

    def ref(self, label: str) -> str:
        """The text of a ``{ref}``, ``{numref}`` or ``{prf:ref}`` to ``label``."""
        if label not in self.labels:
            raise ValueError(f"a reference names {label!r}, which no page of the book defines")
        return self.labels[label]

    def glued(self, page: str, key_and_format: str) -> str:
        """The text of ``{glue:text}`key:fmt``` in ``page``: the glued value, formatted."""
        key, _, fmt = key_and_format.rpartition(":") if ":" in key_and_format else (key_and_format, "", "")
        if "::" in key:  # another page's value: "page::key"
            page, key = key.split("::", 1)
            page = Path(page).stem
        data = self.glue.get(page, {}).get(key)
        if data is None or "text/plain" not in data:
            raise ValueError(f"{page}: no glued value {key!r} in the notebook's stored outputs (execute it first)")
        return format_glue(data["text/plain"], fmt)
