"""The built book as a reader sees it: every page opened in headless Chromium, served from 127.0.0.1.

The module builds the HTML exactly as `make book` does (it runs `make book`, whose notebooks execute
through the jupyter cache that `tools/book_build.py` clears whenever course_lib changes) unless
`_build/html` was already built from the current sources, then opens each page at a 1280 x 900
window. Each check gathers its failures over all pages and reports them in one assertion; pages
with a failure are photographed under `_build/browser-test/` (the offending element outlined).

Two builds go through the same checks (the test ids say which): `book`, every page of the book as
built with the data, and `without-data`, the pages of the notebooks that read data files as a
newcomer's clone without ../shared/data shows them (`make book-without-data`: only those notebooks
are executed again, with an empty data folder, so this costs a build of the pages from stored
outputs, not a second execution of the book). Then the PDF of the book (`make pdf`), printed by the
same Chromium from the first build (the module prints it when it is stale): its page count, every
page of the toc in order, maths typeset, figures present, no raw TeX in its text.

Needs Debian's Chromium (`apt-get install chromium`, driven by Playwright with `executable_path`;
`playwright install` downloads a browser and does not work offline), or another Chromium-based browser
named by `CHROMIUM=path` (GitHub's runners: Google Chrome). Without it the tests are skipped with that
message, except in CI (`CI=true`), where they fail. Select or deselect them with `-m browser` /
`-m "not browser"`; `BOOK_HTML=path` tests an existing build (and its PDF) instead of building.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import io
import os
import re
import subprocess
import sys
import threading
import unicodedata
from collections import defaultdict
from pathlib import Path
from urllib.parse import unquote, urlsplit

import nbformat
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import book_build  # noqa: E402
import book_pdf  # noqa: E402

sys.path.pop(0)
# BOOK_HTML=path tests that build as it is (no build): for example a build made elsewhere.
HTML = Path(os.environ.get("BOOK_HTML", book_build.HTML)).resolve()
SHOTS = ROOT / "_build" / "browser-test"
# Chromium and the flags that keep it from calling home (verified on Debian's chromium 156): the same
# browser prints the PDF (tools/book_pdf.py).
CHROMIUM = book_pdf.CHROMIUM
CHROMIUM_FLAGS = book_pdf.CHROMIUM_FLAGS
BUILDS = {"book": "the book, built with the data",
          "without-data": "the pages of the notebooks that read data, built without the data"}
WINDOW = {"width": 1280, "height": 900}
MAX_OUTPUT_LINES = 40
MIN_FIGURE_SCALE = 0.85
MIN_FIGURE_TEXT_PX = 9.0

pytestmark = pytest.mark.browser

CHECKS = {
    "offline": "a request left 127.0.0.1",
    "mathjax": "a formula not typeset by MathJax, a MathJax error or raw TeX in the text",
    "errors": "a page error or a console error",
    "tall_outputs": f"a cell output taller than {MAX_OUTPUT_LINES} lines",
    "too_wide": "code, an output, an equation or a table wider than its column at 1280 px",
    "figures": f"a figure shown below {MIN_FIGURE_SCALE:.0%} of its pixel width or with text under "
               f"{MIN_FIGURE_TEXT_PX:.0f} px",
    "numbering": "a heading numbered twice, or section 8.1 not numbered 8.1",
    "links": "an internal link or anchor that does not resolve",
    "alt_text": "an image without alt text",
}

HOW_TO_GET_CHROMIUM = (f"the browser test needs Debian's Chromium at {CHROMIUM}: "
                       "`sudo apt-get install chromium` (or set CHROMIUM=/path/to/chromium, e.g. Google Chrome); "
                       "deselect it with -m 'not browser'")


# ---------------------------------------------------------------------------------------------------
# Building and serving


def _require_browser():
    in_ci = os.environ.get("CI", "").lower() in ("1", "true", "yes")
    missing = None
    if not CHROMIUM.exists():
        missing = HOW_TO_GET_CHROMIUM
    else:
        try:
            import playwright.sync_api  # noqa: F401
        except ImportError:
            missing = "the browser test needs Playwright for Python: `make venv` installs the pinned version"
    if missing:
        if in_ci:
            pytest.fail(missing, pytrace=False)
        pytest.skip(missing)


def _run_logged(what: str, command: list[str], log: Path) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MAKE", "MFLAGS"))}
    with log.open("w") as out:
        done = subprocess.run(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:])
        pytest.fail(f"{what} failed (full log: {log}):\n{tail}", pytrace=False)


def _build_book() -> None:
    """Build exactly as `make book` does, unless _build/html was built from the current sources; then
    print its PDF (`make pdf` without building again) unless it was printed from this build."""
    if "BOOK_HTML" in os.environ:
        return
    if not book_build.is_up_to_date():
        _run_logged("`make book`", ["make", "--no-print-directory", "book"], SHOTS / "build.log")
    if not book_pdf.is_up_to_date():
        _run_logged("printing the PDF", [sys.executable, str(ROOT / "tools" / "book_pdf.py")], SHOTS / "pdf.log")


def _build_without_data() -> Path:
    """`make book-without-data`, unless it was built from the current sources."""
    if not book_build.is_up_to_date(book_build.NO_DATA_HTML):
        _run_logged("`make book-without-data`", ["make", "--no-print-directory", "book-without-data"],
                    SHOTS / "build-without-data.log")
    return book_build.NO_DATA_HTML


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@contextlib.contextmanager
def _serve(html: Path):
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                            functools.partial(_QuietHandler, directory=str(html)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture(scope="module")
def book_html() -> Path:
    """The book's HTML (with its PDF), built when stale."""
    _require_browser()
    _build_book()
    return HTML


def _redirect(path: Path) -> str | None:
    """The target of a page that only redirects (Jupyter Book's index.html), else None."""
    m = re.match(r'\s*<meta http-equiv="Refresh" content="0; url=([^"]+)"', path.read_text(errors="replace"), re.I)
    return m.group(1) if m else None


def _pages(html: Path) -> list[str]:
    return sorted(p.name for p in html.glob("*.html"))


# ---------------------------------------------------------------------------------------------------
# What is measured in the page (one script, run after MathJax has finished)

MEASURE = (Path(__file__).with_name("book_browser_measure.js")).read_text()

# Open what a reader can open (dropdown solutions, hidden cells) so that their content is measured.
REVEAL = r"""
() => {
  document.querySelectorAll('details').forEach(d => d.open = true);
  document.querySelectorAll('.toggle-hidden').forEach(e => e.classList.remove('toggle-hidden'));
  document.querySelectorAll('img').forEach(img => img.loading = 'eager');
  return Promise.all([...document.images].map(img => img.decode().catch(() => null)));
}
"""

MATHJAX_DONE = r"""
() => {
  const mj = window.MathJax;
  const done = mj && mj.startup && mj.startup.promise ? mj.startup.promise : Promise.resolve();
  return Promise.race([done.then(() => 'ok', () => 'error'), new Promise(r => setTimeout(() => r('timeout'), 30000))]);
}
"""


# ---------------------------------------------------------------------------------------------------
# The text size in a figure, estimated from its pixels


@functools.cache
def estimate_text_px(png: bytes) -> float | None:
    """Estimate the font size (px, at the image's own size) of the text in a figure.

    Dark grey pixels (matplotlib's text colour) are grouped into connected components; glyph-sized
    ones that overlap vertically and nearly touch are chained into words. A word's height from its
    baseline (the median bottom of its glyphs, so descenders do not count) to its highest top is
    about 0.72 of the font size (digits, capitals, ascenders); words on one baseline form a line,
    whose tallest glyph sets the size of all its words (a word without ascenders is not read small).
    A lone glyph counts only when it lines up with two others (tick labels), so the dashes of a
    dashed curve do not. Every glyph takes its line's estimate and the figure's is their median: the
    size of most of its text. None when no text is found. The resolution is one pixel of glyph
    height (about 1.4 px of font size): it catches text of 6 pt and less, while 8 pt against 9 is
    left to tests/test_book.py, which checks the sizes where they are set.
    """
    from PIL import Image

    rgb = np.asarray(Image.open(io.BytesIO(png)).convert("RGB"), dtype=np.int16)
    hi, lo = rgb.max(axis=2), rgb.min(axis=2)
    ink = (hi < 150) & (hi - lo < 60)
    glyphs = [(x0, y0, x1, y1) for x0, y0, x1, y1, area in _components(ink)
              if 3 <= y1 - y0 <= 48 and x1 - x0 <= 1.6 * (y1 - y0) + 2
              and 0.1 <= area / ((x1 - x0) * (y1 - y0)) <= 0.95]
    if not glyphs:
        return None
    find, parent = _disjoint_sets(len(glyphs))

    by_x = sorted(range(len(glyphs)), key=lambda i: glyphs[i][0])
    for pos, a in enumerate(by_x):
        ax0, ay0, ax1, ay1 = glyphs[a]
        for b in by_x[pos + 1:]:
            bx0, by0, bx1, by1 = glyphs[b]
            if bx0 - ax1 > 0.5 * max(ay1 - ay0, by1 - by0):
                break
            overlap = min(ay1, by1) - max(ay0, by0)
            if overlap >= 0.6 * min(ay1 - ay0, by1 - by0):
                parent[find(a)] = find(b)
    words = defaultdict(list)
    for i, g in enumerate(glyphs):
        words[find(i)].append(g)
    # A one-glyph "word" is a tick label only when it lines up with two others of its height: a row
    # (same top, x-axis labels) or a column (same right edge, y-axis labels). Alone it is more likely
    # a mark of the plot, such as one dash of a dashed curve, which says nothing about the text.
    singles = [w[0] for w in words.values() if len(w) == 1]

    def lined_up(g) -> bool:
        same_height = [h for h in singles if h is not g and abs((h[3] - h[1]) - (g[3] - g[1])) <= 1]
        return (sum(abs(h[1] - g[1]) <= 1 for h in same_height) >= 2
                or sum(abs(h[2] - g[2]) <= 1 for h in same_height) >= 2)

    # Words on one baseline, close together, are one line of text: the line's tallest glyph (a
    # capital, an ascender) sets the size, so that a word without one ("sine") is not read small.
    kept = [w for w in words.values() if len(w) > 1 or lined_up(w[0])]
    spans = [(float(np.median([g[3] for g in w])), min(g[0] for g in w), max(g[2] for g in w),
              min(g[1] for g in w)) for w in kept]
    line_of, line_parent = _disjoint_sets(len(kept))
    for a, (base_a, x0_a, x1_a, top_a) in enumerate(spans):
        for b, (base_b, x0_b, x1_b, top_b) in enumerate(spans[:a]):
            gap = max(x0_a, x0_b) - min(x1_a, x1_b)
            if abs(base_a - base_b) <= 1 and gap <= 1.5 * max(base_a - top_a, base_b - top_b):
                line_parent[line_of(a)] = line_of(b)
    tops: dict[int, float] = {}
    for i, (_base, _x0, _x1, top) in enumerate(spans):
        tops[line_of(i)] = min(tops.get(line_of(i), top), top)
    sizes = []
    for i, word in enumerate(kept):
        sizes += [(spans[i][0] - tops[line_of(i)]) / 0.72] * len(word)
    return float(np.percentile(sizes, 50)) if sizes else None


def _disjoint_sets(n: int):
    """Union-find over 0..n-1: ``(find, parent)``; join two sets with ``parent[find(a)] = find(b)``."""
    parent = list(range(n))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]  # path halving
            i = parent[i]
        return i

    return find, parent


def _components(mask: np.ndarray) -> list[tuple[int, int, int, int, int]]:
    """Bounding boxes (x0, y0, x1, y1, area) of the 8-connected components of a boolean image."""
    rows, cols = mask.shape
    runs = []  # (row, start, end) of horizontal runs of True
    row_runs: list[list[int]] = []
    for y in range(rows):
        line = mask[y]
        if not line.any():
            row_runs.append([])
            continue
        d = np.diff(np.concatenate(([0], line.view(np.int8), [0])))
        starts, ends = np.flatnonzero(d == 1), np.flatnonzero(d == -1)
        ids = []
        for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
            ids.append(len(runs))
            runs.append((y, s, e))
        row_runs.append(ids)
    find, parent = _disjoint_sets(len(runs))

    for y in range(1, rows):
        above, here = row_runs[y - 1], row_runs[y]
        j = 0
        for i in here:
            _, s, e = runs[i]
            while j < len(above) and runs[above[j]][2] < s:  # ends before s-1 (8-connectivity)
                j += 1
            k = j
            while k < len(above) and runs[above[k]][1] <= e:
                parent[find(i)] = find(above[k])
                k += 1
    boxes: dict[int, list[int]] = {}
    for i, (y, s, e) in enumerate(runs):
        r = find(i)
        b = boxes.get(r)
        if b is None:
            boxes[r] = [s, y, e, y + 1, e - s]
        else:
            b[0], b[1], b[2], b[3], b[4] = min(b[0], s), min(b[1], y), max(b[2], e), max(b[3], y + 1), b[4] + e - s
    return [tuple(b) for b in boxes.values()]


# ---------------------------------------------------------------------------------------------------
# Visiting every page


def _file_for(url: str, base: str, html: Path) -> Path | None:
    parts = urlsplit(url)
    if not url.startswith(base):
        return None
    path = html / unquote(parts.path).lstrip("/")
    if path.is_dir():
        path = path / "index.html"
    return path


@functools.cache
def _ids_in(path: Path) -> frozenset[str]:
    text = path.read_text(errors="replace")
    return frozenset(re.findall(r'\b(?:id|name)="([^"]+)"', text))


def _visit(browser, base: str, html: Path, page_name: str, failures: dict[str, list[str]],
           shots_prefix: str = "") -> dict[str, list]:
    """Open one page of the build in ``html``, record its failures per check; return them per check."""
    context = browser.new_context(viewport=WINDOW, device_scale_factor=1, service_workers="block")
    page = context.new_page()
    errors: list[str] = []
    outside: list[str] = []

    def route(r):
        url = r.request.url
        host = urlsplit(url).hostname
        if url.startswith(("data:", "blob:", "about:")) or host == "127.0.0.1":
            r.continue_()
        else:
            outside.append(url)
            r.abort()

    page.route("**/*", route)
    page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
    page.on("console", lambda m: errors.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
    page.goto(f"{base}/{page_name}", wait_until="load")
    page.wait_for_load_state("networkidle")
    mathjax = page.evaluate(MATHJAX_DONE)
    page.evaluate(REVEAL)
    if mathjax == "timeout":
        failures["mathjax"].append(f"{page_name}: MathJax did not finish within 30 s")
    found = page.evaluate(MEASURE, {"maxLines": MAX_OUTPUT_LINES})

    page_failures: dict[str, list[str]] = defaultdict(list)
    for url in sorted(set(outside)):
        page_failures["offline"].append(f"request to {url[:100]}")
    for e in dict.fromkeys(errors):
        page_failures["errors"].append(e[:200])
    for check in ("mathjax", "tall_outputs", "too_wide", "numbering", "alt_text"):
        page_failures[check] += found[check]

    for fig in found["figures"]:
        problems = []
        if fig["scale"] < MIN_FIGURE_SCALE:
            problems.append(f"shown at {fig['scale']:.2f} of its width")
        png_path = _file_for(fig["src"], base, html)
        if png_path is not None and png_path.exists():
            text = estimate_text_px(png_path.read_bytes())
            if text is not None and text * min(fig["scale"], 1.0) < MIN_FIGURE_TEXT_PX:
                problems.append(f"text about {text * min(fig['scale'], 1.0):.1f} px")
        if problems:
            page_failures["figures"].append(f"{fig['name']}: " + ", ".join(problems))
            page.evaluate("(i) => document.images[i].setAttribute('data-browser-test', 'figures')", fig["index"])

    own_ids = set(found["ids"])
    for link in found["links"]:
        href = link["href"]
        if not href.startswith(base):
            continue
        parts = urlsplit(href)
        target = _file_for(href, base, html)
        if target is None or not target.exists():
            page_failures["links"].append(f'"{link["text"]}" -> {unquote(parts.path)} (no such file)')
            continue
        fragment = unquote(parts.fragment)
        if fragment and target.suffix == ".html":
            ids = own_ids if target == html / page_name else _ids_in(target)
            if fragment not in ids:
                page_failures["links"].append(f'"{link["text"]}" -> {target.name}#{fragment} (no such anchor)')

    for check, items in page_failures.items():
        failures[check] += [f"{page_name}: {item}" for item in items]
    if any(page_failures.values()):
        _screenshots(page, shots_prefix + page_name, [c for c, items in page_failures.items() if items])
    context.close()
    return page_failures


def _screenshots(page, page_name: str, checks: list[str]) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    stem = page_name.removesuffix(".html")
    for check in checks:
        # Outline this check's offending elements only.
        page.evaluate("""(check) => {
            let style = document.getElementById('browser-test-style');
            if (!style) {
                style = document.createElement('style');
                style.id = 'browser-test-style';
                document.head.append(style);
            }
            style.textContent = `[data-browser-test~="${check}"]`
                + ` { outline: 3px solid red !important; outline-offset: -3px }`;
        }""", check)
        marked = page.locator(f'[data-browser-test~="{check}"]')
        if marked.count():
            try:
                marked.first.scroll_into_view_if_needed(timeout=2000)
            except Exception:  # an element that cannot be scrolled to: photograph the top instead
                page.evaluate("window.scrollTo(0, 0)")
        else:
            page.evaluate("window.scrollTo(0, 0)")
        page.screenshot(path=SHOTS / f"{stem}--{check}.png")


@pytest.fixture(scope="module", params=list(BUILDS))
def report(request, book_html):
    """Every check's failures on the pages of one build (``book`` or ``without-data``)."""
    from playwright.sync_api import sync_playwright

    if request.param == "book":
        html, prefix = book_html, ""
        pages = _pages(html)
        assert "intro.html" in pages, f"no intro.html in {html}"
    else:
        html, prefix = _build_without_data(), "without-data--"
        pages = [f"{p.stem}.html" for p in book_build.data_notebooks()]
        assert pages and all((html / p).exists() for p in pages), f"{pages} not all in {html}"
    failures: dict[str, list[str]] = {check: [] for check in CHECKS}
    for old in SHOTS.glob(f"{prefix}*.png"):
        if prefix or not old.name.startswith("without-data--"):
            old.unlink()
    with sync_playwright() as pw, _serve(html) as base:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_FLAGS)
        try:
            for name in pages:
                target = _redirect(html / name)
                if target is None:
                    _visit(browser, base, html, name, failures, prefix)
                elif not (html / target.split("#")[0]).exists():
                    failures["links"].append(f"{name}: redirects to {target} (no such file)")
        finally:
            browser.close()
    return {"build": request.param, "pages": pages, "failures": failures}


# Checks known to fail on today's pages while an issue about them is open (none now). Strict: the day
# they pass, the xfail itself fails and must be removed, so a check cannot silently stay switched off.
KNOWN_FAILING: dict[str, str] = {}  # check -> reason, for a strict xfail while an issue is open


@pytest.mark.parametrize("check", [
    pytest.param(c, marks=pytest.mark.xfail(strict=True, reason=KNOWN_FAILING[c])) if c in KNOWN_FAILING else c
    for c in CHECKS
])
def test_every_page(report, check):
    failures = report["failures"][check]
    if failures:
        pytest.fail(f"{len(failures)} x {CHECKS[check]} in {BUILDS[report['build']]} ({len(report['pages'])} "
                    f"pages; screenshots in {SHOTS.relative_to(ROOT)}/*--{check}.png):\n  " + "\n  ".join(failures),
                    pytrace=False)


# ---------------------------------------------------------------------------------------------------
# The PDF of the book (tools/book_pdf.py, `make pdf`), printed from the book's build

MAX_PAGES_PER_DOCUMENT = 60  # today 13 documents give about 370 pages
TEX = re.compile(r"\\[A-Za-z]{2,}|\$\$|\\[()\[\]]")
TYPESET = {"\\sum": "∑", "\\sqrt": "√", "\\top": "⊤", "\\alpha": "α", "\\in ": "∈"}


def _title(notebook: Path) -> str:
    """A page's title as the book shows it: its first line '# ...', without Markdown, with Sphinx's
    smart apostrophes (chapter 11's "Today's" is shown, and bookmarked, as "Today’s")."""
    first = nbformat.read(notebook, as_version=4).cells[0].source
    line = next(line for line in first.splitlines() if line.startswith("# "))
    return re.sub(r"[`*_]", "", line[2:]).strip().replace("'", "\u2019")


def _squeeze(text: str) -> str:
    # NFKC: a PDF's text keeps the font's ligatures ("Eﬃcient attention" for "Efficient attention")
    return re.sub(r"\s+", "", unicodedata.normalize("NFKC", text))


@functools.cache
def _code_corpus() -> str:
    """Everything a page shows as code (cell sources and printed outputs, library listings), squeezed."""
    parts = [p.read_text(encoding="utf-8") for p in (ROOT / "course_lib").rglob("*.py")]
    for path in (ROOT / "book").glob("*.ipynb"):
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type == "code":
                parts.append(cell.source)
                parts += [o.get("text", "") or o.get("data", {}).get("text/plain", "") for o in cell.get("outputs", [])]
    return _squeeze("\n".join(parts))


def raw_tex_lines(text: str) -> list[str]:
    """Lines of a PDF's text that hold TeX (a macro such as \\frac, $$, \\( or \\[) and are not code.

    Code listings may show TeX (a matplotlib label such as r"$\\sqrt{n}$", a docstring's :math:), so a
    line that is part of a code cell, an output or the library's source is not counted.
    """
    return [line.strip() for line in text.splitlines()
            if TEX.search(line) and _squeeze(line) not in _code_corpus()]


@pytest.fixture(scope="module")
def pdf(book_html):
    from pypdf import PdfReader

    path = book_html / book_pdf.PDF_NAME
    assert path.exists(), f"no PDF at {path}: `make pdf` prints it"
    reader = PdfReader(path)
    return {"path": path, "reader": reader, "pages": [page.extract_text() for page in reader.pages]}


def test_pdf_has_every_page_of_the_toc_in_order(pdf):
    """One bookmark per document of _toc.yml (chapters 10 and 11 included the day they are listed),
    pointing at increasing pages, and each document's title in the text of its first page."""
    reader = pdf["reader"]
    titles = [_title(ROOT / "book" / f"{name}.ipynb") for name in book_pdf.toc_files()]
    outline = [(item.title, reader.get_destination_page_number(item)) for item in reader.outline]
    assert [t for t, _ in outline] == titles, f"bookmarks {[t for t, _ in outline]}\n != toc {titles}"
    starts = [page for _, page in outline]
    assert starts == sorted(set(starts)) and starts[0] == 0, starts
    for title, page in outline:
        assert _squeeze(title) in _squeeze(pdf["pages"][page]), f"{title!r} not on page {page + 1}"


def test_pdf_page_count(pdf):
    documents = len(book_pdf.toc_files())
    count = len(pdf["pages"])
    assert documents <= count <= MAX_PAGES_PER_DOCUMENT * documents, f"{count} pages for {documents} documents"
    size = pdf["path"].stat().st_size
    assert size < 100e6, f"{size / 1e6:.0f} MB"  # GitHub's limit for one file


def test_pdf_maths_is_typeset_no_raw_tex_left(pdf):
    raw = [f"page {i + 1}: {line[:100]}" for i, text in enumerate(pdf["pages"]) for line in raw_tex_lines(text)]
    assert not raw, f"{len(raw)} lines of raw TeX in the PDF's text:\n  " + "\n  ".join(raw[:20])
    # and the formulas are there, typeset: the symbols MathJax draws for macros the book uses
    markdown = "\n".join(c.source for name in book_pdf.toc_files()
                         for c in nbformat.read(ROOT / "book" / f"{name}.ipynb", as_version=4).cells
                         if c.cell_type == "markdown")
    text = "\n".join(pdf["pages"])
    missing = [f"{macro} ({glyph})" for macro, glyph in TYPESET.items() if macro in markdown and glyph not in text]
    assert not missing, f"formulas of the book missing from the PDF: {missing}"


def test_raw_tex_is_found_outside_code():
    assert raw_tex_lines("so that $$\\frac{1}{2}$$ holds\nthe weights \\alpha_i sum to one") == [
        "so that $$\\frac{1}{2}$$ holds", "the weights \\alpha_i sum to one"]
    assert raw_tex_lines('ax.axvline(math.sqrt(n), color="k", ls=":", lw=1, label=r"$\\sqrt{n}$")') == []


def test_pdf_has_every_figure_and_the_footer(pdf, book_html):
    from bs4 import BeautifulSoup

    figures = 0
    for name in book_pdf.toc_files():
        soup = BeautifulSoup((book_html / f"{name}.html").read_text(encoding="utf-8"), "html.parser")
        article = soup.select_one("main article") or soup
        figures += sum(1 for img in article.select("img[src*='_images/']")
                       if not img.find_parent("details", class_="hide"))  # hidden cells are not printed
    images = sum(1 for page in pdf["reader"].pages
                 for xobject in ((page["/Resources"].get("/XObject") or {}).values())
                 if xobject.get_object().get("/Subtype") == "/Image")
    assert figures > 0 and images >= figures, f"{images} images in the PDF, {figures} figures in the book"
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        from sphinx_course import package_version
    finally:
        sys.path.pop(0)
    text = _squeeze("\n".join(pdf["pages"]))
    assert _squeeze(f"Version {package_version()}") in text, "the footer's version is not in the PDF"
    assert _squeeze("licensed CC BY 4.0") in text, "the footer's licence is not in the PDF"
