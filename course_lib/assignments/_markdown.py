"""MyST Markdown -> Markdown that plain Jupyter and Colab render (the student notebooks' text)."""

from __future__ import annotations

import re
from pathlib import Path

from ._book import BookIndex
from ._notebook import directive_options

_DIRECTIVE = re.compile(
    r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|:{3,})[ \t]*\{(?P<name>[\w:-]+)\}(?P<arg>[^\n]*)\n(?P<body>.*?)"
    r"^[ \t]*(?P=fence)[ \t]*$\n?",
    re.MULTILINE | re.DOTALL,
)
# A role's name starts with a lower-case letter: `y_{T-1}` in inline code is not a role.
_ROLE = re.compile(r"(?<![\w}])\{(?P<name>[a-z][\w:-]*)\}`(?P<content>[^`]*)`")
_TARGET = re.compile(r"^\([\w:.-]+\)=[ \t]*\n", re.MULTILINE)
_COMMENT = re.compile(r"^%[^\n]*\n?", re.MULTILINE)
_TITLES = {"prf:proposition": "Proposition", "prf:proof": "Proof", "prf:theorem": "Theorem", "prf:lemma": "Lemma",
           "prf:definition": "Definition", "note": "Note", "tip": "Tip", "warning": "Warning", "important": "Important"}


def bibliography(path: Path) -> dict[str, tuple[str, str]]:
    """``key -> ("Author et al.", "year")`` from a BibTeX file (first author's last name, "and" the second's
    for two authors, "et al." for more; the year), as the book's author-year citations read."""
    if not path.is_file():
        return {}
    cites = {}
    for entry in re.split(r"\n(?=@)", path.read_text(encoding="utf-8")):
        key = re.match(r"@\w+\{([^,]+),", entry.strip())
        if not key:
            continue
        author = re.search(r"author\s*=\s*[{\"](.+?)[}\"]\s*,?\s*\n", entry)
        year = re.search(r"year\s*=\s*[{\"]?(\d{4})", entry)
        names = [a.strip() for a in author.group(1).split(" and ")] if author else []
        first = names[0].split(",")[0].strip("{} ") if names else key.group(1)
        if names and "," not in names[0]:
            first = names[0].split()[-1].strip("{}")
        who = first + (" et al." if len(names) > 2 else f" and {names[1].split(',')[0].split()[-1]}"
                       if len(names) == 2 else "")
        cites[key.group(1).strip()] = (who, year.group(1) if year else "n.d.")
    return cites


def to_plain_markdown(text: str, cites: dict[str, tuple[str, str]] | None = None, book: BookIndex | None = None,
                      page: str | None = None) -> str:
    """MyST Markdown -> Markdown that plain Jupyter and Colab render: no directive fences, no roles.

    ``{exercise}`` becomes a bold heading with its title and label, ``{prf:...}`` and admonitions a
    bold title, ``{literalinclude}`` a pointer to the file, ``{cite}`` "[Author et al., year]" and
    ``{cite:t}`` "Author et al. [year]" (as the HTML's author-year citations read);
    ``(label)=`` targets and ``%`` comments are dropped. With ``book`` (and the notebook's ``page``), the
    roles read as the HTML shows them (:class:`~course_lib.assignments._book.BookIndex`):
    ``{glue:text}`` the glued value, formatted; ``{doc}`` the page's title; ``{ref}``, ``{numref}`` and
    ``{prf:ref}`` the section's title, "Fig. 8.3", "Exercise 3.2", "Proposition 3.1". Without it they
    read as their explicit text or their target.

    Raises:
        ValueError: with ``book``, a glue key or a reference the book does not have.
    """
    cites = cites or {}

    def directive(m: re.Match) -> str:
        name, arg = m.group("name"), m.group("arg").strip()
        options, body = directive_options(m.group("body"))
        body = to_plain_markdown(body, cites, book, page)
        if name == "exercise":
            label = options.get("label", "")
            return f"**Exercise{': ' + arg if arg else ''}** ({label})\n\n{body}\n"
        if name == "literalinclude":
            return f"(See `{arg.lstrip('./').replace('../', '')}` in the course library.)\n"
        if name == "math":
            return f"$$\n{body}\n$$\n"
        title = _TITLES.get(name, name.split(":")[-1].capitalize())
        return f"**{title}{' (' + arg + ')' if arg else ''}.** {body}\n"

    def role(m: re.Match) -> str:
        name, content = m.group("name"), m.group("content")
        explicit = re.match(r"^(?P<text>.*?)\s*<(?P<target>[^>]+)>$", content, re.DOTALL)
        if name in ("cite", "cite:p", "cite:t"):
            found = [cites.get(k.strip(), (k.strip(), "")) for k in content.split(",")]
            if name == "cite:t":
                return ", ".join(f"{who} [{year}]" if year else who for who, year in found)
            return "[" + ", ".join(f"{who}, {year}" if year else who for who, year in found) + "]"
        if name in ("math",):
            return f"${content}$"
        if book is not None and name in ("glue", "glue:", "glue:text"):
            return book.glued(page or "", content)
        if explicit:
            text, target = explicit.group("text"), explicit.group("target")
            if book is not None and name == "numref" and "{number}" in text:
                return text.replace("{number}", book.ref(target).split()[-1])
            return text
        if book is not None and name == "doc":
            return book.doc(content)
        if book is not None and name in ("ref", "numref", "prf:ref", "eq"):
            return book.ref(content)
        if name == "doc":
            return f"`{content}`"
        return content

    text = _COMMENT.sub("", _TARGET.sub("", text))
    text = _DIRECTIVE.sub(directive, text)
    return _ROLE.sub(role, text)
