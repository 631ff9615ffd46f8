"""Slides per chapter, generated from the book (`make slides` -> _build/slides/<chapter>.html, offline).

Each deck is a reveal.js page made from the chapter's executed notebook, nothing typed twice:

1. the chapter's number, title and opening paragraph;
2. its learning goals (the list after "**Learning goals.**");
3. for each section of the main path, its display equations (at most three a slide) and its figures (the
   stored images, each with its caption and number, "Fig. 3.2");
4. its summary (the "## Summary" section).

Glued numbers, cross-references and citations read as in the HTML (course_lib.assignments' BookIndex);
MathJax typesets the formulas. Everything a deck loads is local: reveal.js from the sphinx-revealjs wheel
(the book extra), MathJax 3 from sphinx-mathjax-offline, the figures as PNG files beside the deck, so the
slides open from a laptop with no network (tests/test_slides.py opens every deck in Chromium and refuses any
request that leaves 127.0.0.1).

    python tools/slides.py [--out _build/slides]
"""

from __future__ import annotations

import argparse
import base64
import html
import re
import shutil
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
OUT = ROOT / "_build" / "slides"
MAX_EQUATIONS = 3  # a slide
_FENCE = re.compile(r"^[ \t]*(`{3,}|:{3,})[ \t]*\{[\w:-]+\}[^\n]*\n.*?^[ \t]*\1[ \t]*$\n?", re.MULTILINE | re.DOTALL)
_DISPLAY = re.compile(r"^\$\$\n?(.*?)\n?\$\$(?:[ \t]*\([\w:.-]+\))?[ \t]*$", re.MULTILINE | re.DOTALL)
_SECTION = re.compile(r"^## (.+)$", re.MULTILINE)
_END_SECTIONS = ("Summary", "Exercises", "Notes")


def _assets() -> dict[str, Path]:
    """Where the local copies of reveal.js and MathJax come from (installed packages of the book extra)."""
    import sphinx_revealjs

    mathjax = next(Path(p) / "sphinx-mathjax-offline" / "static" / "mathjax" for p in sys.path
                   if (Path(p) / "sphinx-mathjax-offline" / "static" / "mathjax" / "tex-chtml.js").is_file())
    return {"revealjs": Path(sphinx_revealjs.__file__).parent / "_static" / "revealjs", "mathjax": mathjax}


def _markdown():
    from markdown_it import MarkdownIt
    from mdit_py_plugins.dollarmath import dollarmath_plugin

    def math(content: str, config: dict) -> str:
        text = html.escape(content)
        return f"<div class=\"math\">\\[{text}\\]</div>" if config.get("display_mode") else f"\\({text}\\)"

    md = MarkdownIt("commonmark").enable("table")
    dollarmath_plugin(md, renderer=math, allow_labels=True)
    return md


def _figures(cell: nbformat.NotebookNode) -> list[bytes]:
    return [base64.b64decode(o["data"]["image/png"]) for o in cell.get("outputs", [])
            if "image/png" in o.get("data", {})]


def chapter_slides(path: Path, book, cites, render, out: Path) -> tuple[str, int]:
    """The deck of one chapter (its HTML) and the number of its slides; writes its figures under ``out``."""
    from course_lib.assignments._markdown import to_plain_markdown
    from course_lib.assignments._notebook import strip_solutions

    page = path.stem
    nb = strip_solutions(nbformat.read(path, as_version=4))
    original = nbformat.read(path, as_version=4)
    figure_cells = {c.source: c for c in original.cells if c.cell_type == "code"}

    def plain(text: str) -> str:
        return to_plain_markdown(text, cites, book, page)

    slides: list[str] = []
    number = book.numbers.get(page, "")
    cells = nb.cells
    opening = next(c.source for c in cells if c.cell_type == "markdown")
    title = book.titles[page]
    first_paragraph = _FENCE.sub("", opening.split("\n", 1)[1]).strip().split("\n\n")[0]
    slides.append(f"<h3>{'Chapter' if '.' not in number else 'Section'} {number}</h3><h1>{html.escape(title)}</h1>"
                  f"<div class=\"lead\">{render(plain(first_paragraph))}</div>")
    goals = re.search(r"\*\*Learning goals\.\*\*([^\n]*\n(?:- .*\n?(?:  .*\n?)*)+)", opening)
    if goals:
        slides.append(f"<h2>Learning goals</h2>{render(plain(goals.group(1)))}")

    section, equations, summary = "", [], None
    figure_index = 0

    def flush_equations() -> None:
        for start in range(0, len(equations), MAX_EQUATIONS):
            body = "".join(render(f"$$\n{e}\n$$") for e in equations[start:start + MAX_EQUATIONS])
            slides.append(f"<h2>{render(plain(section)).removeprefix('<p>').removesuffix('</p>')}</h2>{body}")
        equations.clear()

    for cell in cells:
        if cell.cell_type == "markdown":
            text = _FENCE.sub("", cell.source)  # dropdowns, proofs' directives, exercises: not the main path
            parts = _SECTION.split(text)
            for k, part in enumerate(parts):
                if k % 2 == 1:  # a heading
                    flush_equations()
                    section = part.strip()
                    if section.startswith(_END_SECTIONS):
                        if section.startswith("Summary"):
                            summary = ""
                        else:
                            section = None
                    continue
                if section is None:
                    continue
                if summary is not None and section.startswith("Summary"):
                    summary += part
                    continue
                if cell is cells[0] and k == 0:
                    continue  # the opening: title and goals slides
                equations.extend(e.strip() for e in _DISPLAY.findall(part))
        elif cell.cell_type == "code" and section is not None and summary is None:
            source = figure_cells.get(cell.source)
            figure = source.metadata.get("mystnb", {}).get("figure", {}) if source is not None else {}
            images = _figures(source) if source is not None and figure.get("caption") else []
            for image in images[:1]:
                flush_equations()
                figure_index += 1
                name = f"{page}/fig-{figure_index}.png"
                (out / page).mkdir(parents=True, exist_ok=True)
                (out / name).write_bytes(image)
                label = book.labels.get(figure.get("name", ""), "")
                caption = render(plain(f"{label + ': ' if label else ''}{figure['caption']}"))
                alt = html.escape(source.metadata.get("mystnb", {}).get("image", {}).get("alt", figure["caption"]))
                slides.append(f"<h2>{render(plain(section)).removeprefix('<p>').removesuffix('</p>')}</h2>"
                              f"<figure><img src=\"{name}\" alt=\"{alt}\"><figcaption>{caption}</figcaption></figure>")
    flush_equations()
    if summary:
        slides.append(f"<h2>Summary</h2><div class=\"summary\">{render(plain(summary))}</div>")
    sections = "\n".join(f"<section>{s}</section>" for s in slides)
    deck = f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{html.escape(f"{number}. {title}")}: slides</title>
<link rel="stylesheet" href="_static/revealjs/dist/reveal.css">
<link rel="stylesheet" href="_static/revealjs/dist/theme/white.css">
<style>
.reveal h1, .reveal h2, .reveal h3 {{ text-transform: none; }}
.reveal h1 {{ font-size: 1.6em; }} .reveal h2 {{ font-size: 1.2em; }} .reveal h3 {{ font-size: 0.9em; color: #666; }}
.reveal .slides section {{ font-size: 0.6em; text-align: left; }}
.reveal figure img {{ height: 560px; max-width: 100%; object-fit: contain; display: block; margin: 0 auto; }}
.reveal figcaption {{ font-size: 0.75em; color: #444; }}
.reveal .summary {{ font-size: 0.85em; }} .reveal table {{ font-size: 0.8em; }}
.reveal .lead {{ font-size: 0.9em; }}
</style>
<script>
window.MathJax = {{ tex: {{ inlineMath: [["\\\\(", "\\\\)"]], displayMath: [["\\\\[", "\\\\]"]] }},
                   startup: {{ typeset: true }} }};
</script>
<script defer src="_static/mathjax/tex-chtml.js"></script>
</head>
<body>
<div class="reveal"><div class="slides">
{sections}
</div></div>
<script src="_static/revealjs/dist/reveal.js"></script>
<script>Reveal.initialize({{ hash: true, center: false, width: 1280, height: 800 }});</script>
</body>
</html>
"""
    return deck, len(slides)


def build(out: Path = OUT) -> dict[str, int]:
    """Write every chapter's deck, an index and the local assets into ``out``; ``{chapter: slides}``."""
    sys.path.insert(0, str(ROOT))
    from course_lib.assignments._book import BookIndex
    from course_lib.assignments._markdown import bibliography

    if out.exists():
        shutil.rmtree(out)
    (out / "_static").mkdir(parents=True)
    assets = _assets()
    shutil.copytree(assets["revealjs"] / "dist", out / "_static" / "revealjs" / "dist")
    shutil.copy(assets["revealjs"] / "LICENSE", out / "_static" / "revealjs" / "LICENSE")
    shutil.copytree(assets["mathjax"], out / "_static" / "mathjax")
    book = BookIndex.from_book(BOOK)
    cites = bibliography(BOOK / "references.bib")
    render = _markdown().render
    counts, links = {}, []
    for page, number in sorted(book.numbers.items(), key=lambda kv: [int(x) for x in kv[1].split(".")]):
        path = BOOK / f"{page}.ipynb"
        if not path.is_file():
            continue
        deck, counts[page] = chapter_slides(path, book, cites, render, out)
        (out / f"{page}.html").write_text(deck, encoding="utf-8")
        links.append(f'<li><a href="{page}.html">{number}. {html.escape(book.titles[page])}</a> '
                     f"({counts[page]} slides)</li>")
    (out / "index.html").write_text(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>Slides</title></head><body>"
        "<h1>Attention and Transformers from first principles: slides</h1><ul>" + "".join(links)
        + "</ul></body></html>\n", encoding="utf-8")
    return counts


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="reveal.js slides per chapter, from the book")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    for chapter, n in build(args.out).items():
        print(f"{chapter}: {n} slides")
    print(f"-> {args.out / 'index.html'}")
