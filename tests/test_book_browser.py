"""The built book as a reader sees it: every page opened in headless Chromium, served from 127.0.0.1.

The module builds the HTML exactly as `make book` does (it runs `make book`, whose notebooks execute
through the jupyter cache that `tools/book_build.py` clears whenever course_lib changes) unless
`_build/html` was already built from the current sources, then opens each page at a 1280 x 900
window. Each check gathers its failures over all pages and reports them in one assertion; pages
with a failure are photographed under `_build/browser-test/` (the offending element outlined).

Needs Debian's Chromium (`apt-get install chromium`, driven by Playwright with `executable_path`;
`playwright install` downloads a browser and does not work offline). Without it the tests are
skipped with that message, except in CI (`CI=true`), where they fail. Select or deselect them with
`-m browser` / `-m "not browser"`; `BOOK_HTML=path` tests an existing build instead of building.
"""

from __future__ import annotations

import functools
import http.server
import io
import os
import re
import subprocess
import threading
from collections import defaultdict
from pathlib import Path
from urllib.parse import unquote, urlsplit

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
# BOOK_HTML=path tests that build as it is (no build): for example a build made elsewhere.
HTML = Path(os.environ.get("BOOK_HTML", ROOT / "_build" / "html")).resolve()
SHOTS = ROOT / "_build" / "browser-test"
CHROMIUM = Path(os.environ.get("CHROMIUM", "/usr/bin/chromium"))
# Flags that keep Chromium from calling home (verified on Debian's chromium 156).
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]
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

HOW_TO_GET_CHROMIUM = ("the browser test needs Debian's Chromium at /usr/bin/chromium: "
                       "`sudo apt-get install chromium` (or set CHROMIUM=/path/to/chromium); "
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


def _build_book() -> None:
    """Build exactly as `make book` does, unless _build/html was built from the current sources."""
    import sys

    if "BOOK_HTML" in os.environ:
        return

    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import book_build
    finally:
        sys.path.pop(0)
    if book_build.is_up_to_date():
        return
    SHOTS.mkdir(parents=True, exist_ok=True)
    log = SHOTS / "build.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MAKE", "MFLAGS"))}
    with log.open("w") as out:
        done = subprocess.run(["make", "--no-print-directory", "book"], cwd=ROOT, env=env, stdout=out,
                              stderr=subprocess.STDOUT)
    if done.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:])
        pytest.fail(f"`make book` failed (full log: {log}):\n{tail}", pytrace=False)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def server():
    _require_browser()
    _build_book()
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                            functools.partial(_QuietHandler, directory=str(HTML)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def _redirect(path: Path) -> str | None:
    """The target of a page that only redirects (Jupyter Book's index.html), else None."""
    m = re.match(r'\s*<meta http-equiv="Refresh" content="0; url=([^"]+)"', path.read_text(errors="replace"), re.I)
    return m.group(1) if m else None


def _pages() -> list[str]:
    return sorted(p.name for p in HTML.glob("*.html"))


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


def _file_for(url: str, base: str) -> Path | None:
    parts = urlsplit(url)
    if not url.startswith(base):
        return None
    path = HTML / unquote(parts.path).lstrip("/")
    if path.is_dir():
        path = path / "index.html"
    return path


@functools.cache
def _ids_in(path: Path) -> frozenset[str]:
    text = path.read_text(errors="replace")
    return frozenset(re.findall(r'\b(?:id|name)="([^"]+)"', text))


def _visit(browser, base: str, page_name: str, failures: dict[str, list[str]]) -> dict[str, list]:
    """Open one page, record its failures per check; return the offending elements' checks."""
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
        png_path = _file_for(fig["src"], base)
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
        target = _file_for(href, base)
        if target is None or not target.exists():
            page_failures["links"].append(f'"{link["text"]}" -> {unquote(parts.path)} (no such file)')
            continue
        fragment = unquote(parts.fragment)
        if fragment and target.suffix == ".html":
            ids = own_ids if target == HTML / page_name else _ids_in(target)
            if fragment not in ids:
                page_failures["links"].append(f'"{link["text"]}" -> {target.name}#{fragment} (no such anchor)')

    for check, items in page_failures.items():
        failures[check] += [f"{page_name}: {item}" for item in items]
    if any(page_failures.values()):
        _screenshots(page, page_name, [c for c, items in page_failures.items() if items])
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


@pytest.fixture(scope="module")
def report(server):
    from playwright.sync_api import sync_playwright

    pages = _pages()
    assert "intro.html" in pages, f"no intro.html in {HTML}"
    failures: dict[str, list[str]] = {check: [] for check in CHECKS}
    for old in SHOTS.glob("*.png"):
        old.unlink()
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_FLAGS)
        try:
            for name in pages:
                target = _redirect(HTML / name)
                if target is None:
                    _visit(browser, server, name, failures)
                elif not (HTML / target.split("#")[0]).exists():
                    failures["links"].append(f"{name}: redirects to {target} (no such file)")
        finally:
            browser.close()
    return {"pages": pages, "failures": failures}


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
        pytest.fail(f"{len(failures)} x {CHECKS[check]} ({len(report['pages'])} pages; screenshots in "
                    f"{SHOTS.relative_to(ROOT)}/*--{check}.png):\n  " + "\n  ".join(failures), pytrace=False)
