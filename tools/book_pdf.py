"""The whole book as one PDF, printed from the built HTML by Chromium.

    python tools/book_pdf.py                # `make pdf` (after `make book`); nothing to do when up to date
    python tools/book_pdf.py --if-browser   # the end of `make book`: skipped, saying so, without a Chromium

Every page of ``_toc.yml``, in its order (the intro, each chapter followed by its sections, the back
matter), is opened from a server on 127.0.0.1 in headless Chromium -- the browser test's (Debian's
``/usr/bin/chromium`` here; ``CHROMIUM=path`` picks another, such as Google Chrome on GitHub's runners)
-- and printed to A4 once MathJax has typeset it and its images are loaded. For print, what a reader
opens on screen is shown open (worked solutions, "Going deeper" dropdowns) while the test cells the book
folds away (myst-nb's hidden cells and outputs) are left out. The pages' PDFs are joined with pypdf into
one file, ``_build/html/attention-from-first-principles.pdf``, published beside the HTML: one bookmark
per page of the toc, and the book's title and page number at the foot of every page (a second short
print, laid over the pages). ``_build/html/.pdf-digest`` records what it was printed from, so the
browser test prints it again only when the HTML or this file changed.
"""

from __future__ import annotations

import functools
import hashlib
import http.server
import io
import os
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HTML = ROOT / "_build" / "html"
PDF_NAME = "attention-from-first-principles.pdf"
PDF_DIGEST = ".pdf-digest"
BOOK_TITLE = "Attention and Transformers from first principles"
# The browser that prints, and the flags that keep it from calling home (shared with the browser test).
CHROMIUM = Path(os.environ.get("CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]
# Scaled so that the text column is as wide as on screen at 1280 px (752 px), where the browser test
# checks that code, outputs and equations fit it: 0.88 of the page's 703 px at A4 with these margins.
PAGE = {"format": "A4", "margin": {"top": "14mm", "bottom": "16mm", "left": "12mm", "right": "12mm"},
        "scale": 0.88, "print_background": True}
# Keep a code cell, an output, a figure, a table or a displayed equation on one page when it fits one.
PRINT_CSS = """
@media print {
  div.cell_input, div.cell_output, figure, table, mjx-container[display="true"], div.math-wrapper {
    break-inside: avoid;
  }
  h1, h2, h3, h4, p.admonition-title { break-after: avoid; }
}
"""

MATHJAX_DONE = r"""
() => {
  const mj = window.MathJax;
  const done = mj && mj.startup && mj.startup.promise ? mj.startup.promise : Promise.resolve();
  return Promise.race([done.then(() => 'ok', () => 'error'), new Promise(r => setTimeout(() => r('timeout'), 30000))]);
}
"""

# Open what folds for the reader's convenience; drop what folds away test plumbing; load every image.
FOR_PRINT = r"""
() => {
  document.querySelectorAll('div.cell details.hide').forEach(d => d.remove());
  document.querySelectorAll('details').forEach(d => d.open = true);
  document.querySelectorAll('.toggle-hidden').forEach(e => e.classList.remove('toggle-hidden'));
  document.querySelectorAll('button.toggle-button').forEach(b => b.remove());
  document.querySelectorAll('img').forEach(img => img.loading = 'eager');
  // The footer (author, version, licences) ends every chapter as on screen; the theme hides it in print.
  document.querySelectorAll('footer.bd-footer-content').forEach(f => {
    f.classList.remove('noprint');
    f.style.setProperty('display', 'block', 'important');
    f.style.setProperty('font-size', '0.8em');
  });
  const h1 = document.querySelector('main h1, article h1, h1');
  const title = h1 ? h1.innerText.replace(/[#¶]\s*$/, '').trim() : document.title;
  return Promise.all([...document.images].map(img => img.decode().catch(() => null))).then(() => title);
}
"""


def toc_files(toc: Path = ROOT / "_toc.yml") -> list[str]:
    """The book's documents in reading order: the root, then every part's chapters and their sections."""
    import yaml

    data = yaml.safe_load(toc.read_text(encoding="utf-8"))
    files = [data["root"]]

    def walk(entries):
        for entry in entries or []:
            if "file" in entry:
                files.append(entry["file"])
            walk(entry.get("sections"))
            walk(entry.get("chapters"))

    for part in data.get("parts", []):
        walk(part.get("chapters"))
    walk(data.get("chapters"))
    walk(data.get("sections"))
    return [str(Path(f).with_suffix("")) for f in files]


def _digest(html: Path) -> str:
    built = (html / ".inputs-digest").read_text().strip() if (html / ".inputs-digest").exists() else ""
    return hashlib.sha256((built + "\0").encode() + Path(__file__).read_bytes()).hexdigest()


def is_up_to_date(html: Path = HTML) -> bool:
    stamp = html / PDF_DIGEST
    return (html / PDF_NAME).exists() and stamp.exists() and stamp.read_text().strip() == _digest(html)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def _page_numbers(browser, count: int) -> bytes:
    """A PDF of ``count`` A4 pages, each with only the foot line: the book's title and the page number."""
    pages = "".join(f'<section><span>{BOOK_TITLE}</span><span>{i}</span></section>' for i in range(1, count + 1))
    html = f"""<!doctype html><html><head><meta charset="utf-8"><style>
      @page {{ size: A4; margin: 0 }}
      body {{ margin: 0; font: 8pt sans-serif; color: #555 }}
      section {{ height: 297mm; box-sizing: border-box; padding: 0 12mm 7mm; display: flex;
                 justify-content: space-between; align-items: flex-end; break-after: page }}
    </style></head><body>{pages}</body></html>"""
    page = browser.new_page()
    page.set_content(html)
    data = page.pdf(format="A4", margin={"top": "0", "bottom": "0", "left": "0", "right": "0"},
                    print_background=False)
    page.close()
    return data


def print_book(html: Path = HTML, out: Path | None = None, names: list[str] | None = None) -> Path:
    """Print the pages of the toc (or ``names``) from ``html`` into one PDF (default ``html/PDF_NAME``)."""
    from playwright.sync_api import sync_playwright
    from pypdf import PdfReader, PdfWriter

    out = out or html / PDF_NAME
    if not CHROMIUM.exists():
        sys.exit(f"book_pdf: no Chromium at {CHROMIUM}: install Debian's chromium or set CHROMIUM=/path/to/chrome")
    names = names or toc_files()
    missing = [f"{name}.html" for name in names if not (html / f"{name}.html").exists()]
    if missing:
        sys.exit(f"book_pdf: {html} lacks {', '.join(missing)}: run `make book` first")

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(html)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{httpd.server_address[1]}"
    writer = PdfWriter()
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_FLAGS)
            try:
                for name in names:
                    page = browser.new_page(viewport={"width": 1280, "height": 900})
                    page.route("**/*", lambda r: r.continue_() if r.request.url.startswith((base, "data:", "blob:"))
                               else r.abort())
                    page.goto(f"{base}/{name}.html", wait_until="load")
                    page.wait_for_load_state("networkidle")
                    if page.evaluate(MATHJAX_DONE) != "ok":
                        sys.exit(f"book_pdf: MathJax did not finish on {name}.html")
                    title = page.evaluate(FOR_PRINT)
                    page.add_style_tag(content=PRINT_CSS)
                    page.emulate_media(media="print")
                    data = page.pdf(**PAGE)
                    page.close()
                    first = len(writer.pages)
                    writer.append(PdfReader(io.BytesIO(data)))
                    writer.add_outline_item(title=title, page_number=first)
                    print(f"book_pdf: {name}.html -> pages {first + 1}-{len(writer.pages)} ({title})", flush=True)
                numbers = PdfReader(io.BytesIO(_page_numbers(browser, len(writer.pages))))
            finally:
                browser.close()
    finally:
        httpd.shutdown()
        httpd.server_close()
    for page, foot in zip(writer.pages, numbers.pages, strict=True):
        page.merge_page(foot)
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        from sphinx_course import package_version
    finally:
        sys.path.pop(0)
    writer.add_metadata({"/Title": BOOK_TITLE, "/Author": "The course contributors",
                         "/Subject": f"Version {package_version()}; text and figures CC BY 4.0, code MIT"})
    writer.page_mode = "/UseOutlines"
    writer.compress_identical_objects()
    with out.open("wb") as f:
        writer.write(f)
    if out == html / PDF_NAME and names == toc_files():
        (html / PDF_DIGEST).write_text(_digest(html) + "\n")
    print(f"book_pdf: {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}: {len(writer.pages)} pages, "
          f"{out.stat().st_size / 1e6:.1f} MB", flush=True)
    return out


def main(argv: list[str]) -> None:
    """Print the book's PDF unless it is up to date; ``--if-browser``: without a Chromium, say so and stop (0).

    ``make pdf`` runs it plainly (no Chromium is an error); ``make book`` with ``--if-browser``, so that the link
    to the PDF on the intro page works after ``make book`` alone wherever a browser is there.
    """
    if argv not in ([], ["--if-browser"]):
        sys.exit(f"usage: python {Path(__file__).name} [--if-browser]   (prints {HTML.relative_to(ROOT)} into "
                 f"{PDF_NAME} unless it is up to date)")
    if is_up_to_date():
        print(f"book_pdf: {(HTML / PDF_NAME).relative_to(ROOT)} is up to date", flush=True)
        return
    if argv == ["--if-browser"] and not CHROMIUM.exists():
        print(f"book_pdf: no Chromium at {CHROMIUM}, so no {PDF_NAME}: the intro's link to it works after "
              f"`make pdf` with a Chromium (Debian's chromium, or CHROMIUM=/path/to/chrome)", flush=True)
        return
    print_book()


if __name__ == "__main__":
    main(sys.argv[1:])
