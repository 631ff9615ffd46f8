"""The slides of `make slides` (tools/slides.py): built from the book, opened in Chromium with no network."""

from __future__ import annotations

import contextlib
import functools
import http.server
import sys
import threading
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import book_pdf  # noqa: E402
import slides  # noqa: E402

sys.path.pop(0)

pytest.importorskip("sphinx_revealjs", reason="reveal.js comes with the book extra (sphinx-revealjs)")


@pytest.fixture(scope="module")
def decks(tmp_path_factory) -> tuple[Path, dict[str, int]]:
    out = tmp_path_factory.mktemp("slides")
    return out, slides.build(out)


def test_every_chapter_has_a_deck_of_its_goals_equations_figures_and_summary(decks):
    out, counts = decks
    chapters = sorted(p.stem for p in (ROOT / "book").glob("[0-9]*.ipynb"))
    assert sorted(counts) == chapters
    deck = (out / "03_scoring_functions.html").read_text()
    assert "<h1>Attention scoring functions</h1>" in deck and "<h2>Learning goals</h2>" in deck
    assert "explain and measure why the dot product is divided by" in deck and "<h2>Summary</h2>" in deck
    assert "Fig. 3.4: " in deck and 'src="03_scoring_functions/fig-' in deck
    assert "\\[" in deck and "{glue" not in deck and "{doc}" not in deck and "{cite" not in deck
    for page, n in counts.items():
        assert n >= 5, (page, n)
        figures = [c for c in nbformat.read(ROOT / "book" / f"{page}.ipynb", as_version=4).cells
                   if c.cell_type == "code" and c.metadata.get("mystnb", {}).get("figure", {}).get("caption")]
        html = (out / f"{page}.html").read_text()
        assert html.count("<figure>") >= min(len(figures), 1), page
    assert not list(out.glob("**/*.html")) or all("http://" not in p.read_text() and "https://" not in p.read_text()
                                                  or p.name == "index.html" for p in out.glob("*.html")), \
        "a deck names a remote URL"


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@contextlib.contextmanager
def _serve(folder: Path):
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(folder)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.mark.browser
def test_every_deck_opens_offline_in_chromium_with_its_maths_typeset(decks):
    if not book_pdf.CHROMIUM.exists():
        pytest.skip(f"no Chromium at {book_pdf.CHROMIUM}")
    sync_api = pytest.importorskip("playwright.sync_api")
    out, counts = decks
    failures = {}
    with _serve(out) as base, sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(book_pdf.CHROMIUM), args=list(book_pdf.CHROMIUM_FLAGS))
        try:
            for page_name, n in counts.items():
                page = browser.new_page(viewport={"width": 1280, "height": 800})
                problems: list[str] = []
                page.on("console", lambda m, problems=problems: problems.append(f"console: {m.text}")
                        if m.type == "error" else None)
                page.on("pageerror", lambda e, problems=problems: problems.append(f"page error: {e}"))

                def route(r, problems=problems):
                    if r.request.url.startswith(base):
                        r.continue_()
                    else:
                        problems.append(f"left 127.0.0.1: {r.request.url}")
                        r.abort()

                page.route("**/*", route)
                page.goto(f"{base}/{page_name}.html", wait_until="load")
                page.wait_for_function("() => window.Reveal && Reveal.isReady() && window.MathJax && "
                                       "MathJax.startup && MathJax.startup.promise", timeout=30000)
                page.evaluate("() => MathJax.startup.promise")
                state = page.evaluate("""() => ({
                    slides: Reveal.getTotalSlides(),
                    merrors: document.querySelectorAll('mjx-merror').length,
                    typeset: document.querySelectorAll('mjx-container').length,
                    raw: [...document.querySelectorAll('.slides section')]
                        .some(s => /\\\\\\(|\\\\\\[/.test(s.innerText)),
                    broken: [...document.images].filter(i => !i.complete || i.naturalWidth === 0).map(i => i.src),
                })""")
                if state["slides"] != n:
                    problems.append(f"{state['slides']} slides, expected {n}")
                if state["merrors"] or state["raw"] or not state["typeset"]:
                    problems.append(f"maths: {state}")
                if state["broken"]:
                    problems.append(f"images not loaded: {state['broken'][:3]}")
                if problems:
                    failures[page_name] = problems
                page.close()
        finally:
            browser.close()
    assert not failures, failures
