// What tests/test_book_browser.py measures in each page, run after MathJax has finished.
// Every offending element gets data-browser-test="<check> ..." so that the screenshot can outline it.
(limits) => {
  const out = {mathjax: [], tall_outputs: [], too_wide: [], figures: [], numbering: [], alt_text: [],
               links: [], ids: []};
  const mark = (el, check) => {
    const old = el.getAttribute('data-browser-test') || '';
    el.setAttribute('data-browser-test', (old + ' ' + check).trim());
  };
  const short = (s, n = 70) => { s = s.replace(/\s+/g, ' ').trim(); return s.length > n ? s.slice(0, n) + '...' : s; };
  const article = document.querySelector('article.bd-article') || document.querySelector('main') || document.body;
  const where = (el) => {
    let h = null;
    for (const cand of article.querySelectorAll('h1, h2, h3, h4')) {
      if (cand.compareDocumentPosition(el) & Node.DOCUMENT_POSITION_FOLLOWING) h = cand; else break;
    }
    return h ? 'under "' + short(h.textContent.replace(/[#¶]/g, ''), 40) + '"' : 'at the top';
  };

  // MathJax: every math element typeset, no error node, no raw TeX left in prose.
  const maths = [...article.querySelectorAll('.math')];
  for (const m of maths) {
    if (!m.querySelector('mjx-container')) { out.mathjax.push('not typeset: ' + short(m.textContent) + ' ' + where(m)); mark(m, 'mathjax'); }
  }
  for (const e of article.querySelectorAll('mjx-merror, [data-mjx-error]')) {
    out.mathjax.push('MathJax error: ' + short(e.getAttribute('data-mjx-error') || e.textContent) + ' ' + where(e)); mark(e, 'mathjax');
  }
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);  // sidebars too
  const rawTex = /\\\(|\\\[|\$\$|\\begin\{|\$[^$\s][^$]*[\\^_][^$]*\$/;
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    const p = n.parentElement;
    if (!p || p.closest('pre, code, script, style, textarea, mjx-container, .math, .cell_input, .cell_output')) continue;
    if (rawTex.test(n.textContent)) { out.mathjax.push('raw TeX in text: "' + short(n.textContent) + '" ' + where(p)); mark(p, 'mathjax'); }
  }

  // Cell outputs taller than the limit (text outputs, counted in lines, hidden ones included).
  for (const pre of article.querySelectorAll('.cell_output pre')) {
    const lines = pre.textContent.replace(/\n+$/, '').split('\n').length;
    if (lines > limits.maxLines) { out.tall_outputs.push(lines + '-line output ' + where(pre)); mark(pre, 'tall_outputs'); }
  }

  // Wider than the column: code and outputs scroll sideways, equations and tables overflow.
  const col = article.getBoundingClientRect();
  const wide = (el, what) => {
    const r = el.getBoundingClientRect();
    if (r.width === 0) return;
    const over = Math.max(el.scrollWidth - el.clientWidth, r.right - col.right);
    if (over > 1) { out.too_wide.push(what + ' by ' + Math.round(over) + ' px: ' + short(el.textContent, 50) + ' ' + where(el)); mark(el, 'too_wide'); }
  };
  for (const pre of article.querySelectorAll('pre')) wide(pre, pre.closest('.cell_output') ? 'output' : 'code');
  for (const m of article.querySelectorAll('mjx-container[display="true"]')) wide(m, 'equation');
  for (const t of article.querySelectorAll('table')) {
    const box = t.parentElement;
    const r = t.getBoundingClientRect();
    const over = Math.max(r.width - box.clientWidth, box.scrollWidth - box.clientWidth, r.right - col.right);
    if (r.width > 0 && over > 1) { out.too_wide.push('table by ' + Math.round(over) + ' px ' + where(t)); mark(t, 'too_wide'); }
  }

  // Figures: displayed size against the PNG's own size (the text size is estimated in Python).
  for (const img of article.querySelectorAll('img')) {
    const r = img.getBoundingClientRect();
    if (!img.naturalWidth || r.width === 0) continue;
    const fig = img.closest('figure');
    const cap = fig && fig.querySelector('.caption-number');
    out.figures.push({src: img.currentSrc || img.src, scale: r.width / img.naturalWidth, natural: img.naturalWidth,
                      name: cap ? cap.textContent.trim() : 'image ' + short(img.getAttribute('src'), 40) + ' ' + where(img),
                      index: [...document.images].indexOf(img)});
  }

  // Alt text on every image of the page.
  for (const img of document.querySelectorAll('img')) {
    if (!(img.getAttribute('alt') || '').trim()) { out.alt_text.push('no alt: ' + short(img.getAttribute('src') || '', 60) + ' ' + where(img)); mark(img, 'alt_text'); }
  }

  // Numbering: a number written in the title as well as given by the toc shows twice.
  const twice = /^\s*\d+(\.\d+)*\.?\s+\d+(\.\d+)*\.?\s/;
  const clean = (el) => { const c = el.cloneNode(true); c.querySelectorAll('.headerlink').forEach(x => x.remove()); return c.textContent.replace(/\s+/g, ' ').trim(); };
  for (const h of article.querySelectorAll('h1, h2, h3, h4, h5, h6')) {
    const t = clean(h);
    if (twice.test(t)) { out.numbering.push('heading "' + short(t, 60) + '"'); mark(h, 'numbering'); }
  }
  if (twice.test(document.title)) out.numbering.push('window title "' + short(document.title, 60) + '"');
  for (const a of document.querySelectorAll('.bd-sidebar-primary a, .prev-next-area a, .bd-breadcrumbs a')) {
    const t = clean(a).replace(/^(previous|next)\s+/i, '');
    if (twice.test(t)) { out.numbering.push('link "' + short(t, 60) + '"'); mark(a, 'numbering'); }
  }
  for (const a of document.querySelectorAll('.bd-sidebar-primary a')) {
    if (/08b_translation/.test(a.getAttribute('href') || '') && !/^8\.1\.?\s/.test(clean(a))) {
      out.numbering.push('sidebar numbers section 8.1 as "' + short(clean(a), 50) + '"'); mark(a, 'numbering');
    }
  }
  if (/08b_translation\.html$/.test(location.pathname)) {
    const num = document.querySelector('article h1 .section-number');
    const got = num ? num.textContent.trim() : '(none)';
    if (!/^8\.1\.?$/.test(got)) out.numbering.push('the translation section is numbered "' + got + '", not 8.1');
  }

  // Links: every same-site href, resolved by the browser; checked against the files in Python.
  for (const a of document.querySelectorAll('a[href]')) {
    const href = a.getAttribute('href');
    if (/^(mailto|javascript|tel):/i.test(href)) continue;
    out.links.push({href: a.href, text: short(a.textContent, 40), index: [...document.querySelectorAll('a[href]')].indexOf(a)});
  }
  out.ids = [...document.querySelectorAll('[id]')].map(e => e.id).concat([...document.querySelectorAll('a[name]')].map(e => e.getAttribute('name')));
  return out;
}
