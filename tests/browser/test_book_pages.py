"""Open every page of the built book in Debian's Chromium and check what a reader would see.

Run after the build: `make browser` (part of `make test`), or
`.venv/bin/python -m pytest tests/browser -q` (set BOOK_HTML=<folder> to check another build).

The book is served from a local HTTP server on 127.0.0.1; every request to another host is
aborted and recorded. For each page the test asserts:

- no console error and no uncaught exception; no local file missing (HTTP status >= 400);
- no request to a non-local host was even attempted (the book must be offline-complete);
- every math block (Sphinx's `.math` elements) is typeset by MathJax (an `mjx-container` inside,
  no `mjx-merror`), and no raw `$$` is left in the text outside code;
- every altair chart (`div#altair-viz-*`) has drawn: vega-embed put a canvas or svg of non-zero
  size in it;
- every image loaded (naturalWidth > 0) and has alt text (not just its file name);
- no visible line of code or printed output is cut off at the 1,280-pixel window (a block that
  must scroll sideways hides the end of its longest line; folded cells are not visible and not
  checked);
- on notebook pages, every chart and figure stored in the notebook is on the page, the Colab
  link points at that notebook in the repository named by _config.yml (and the notebook exists
  there), and the download button offers the .ipynb;
- previous/next navigation is present, and the repository button points at the repository;
- every internal link resolves: the file exists and the #anchor exists in it.

It saves one full-page screenshot per page under `<build>/screenshots/` (`_build/screenshots/`).
The page with the most charts and math is also opened as file:// (the book read from a folder).
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import re
import shutil
import tempfile
import threading
from pathlib import Path
from urllib.parse import unquote, urljoin, urlparse

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
BOOK_HTML = Path(os.environ.get("BOOK_HTML", ROOT / "_build" / "html")).resolve()
SCREENSHOTS = BOOK_HTML.parent / "screenshots"
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
LOCAL_HOSTS = {"127.0.0.1", "localhost"}
CHART_TIMEOUT_MS = 20_000


def _pages() -> list[str]:
    if not (BOOK_HTML / "index.html").is_file():
        return []
    return sorted(
        p.relative_to(BOOK_HTML).as_posix()
        for p in BOOK_HTML.rglob("*.html")
        if not {"_static", "_sources", "_images", "_downloads"}
        & set(p.relative_to(BOOK_HTML).parts)
    )


PAGES = _pages()


def _expected_colab(docname: str) -> str:
    """The Colab address of a notebook page, derived from _config.yml's one repository setting."""
    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    repo = config["repository"]
    owner_repo = urlparse(repo["url"]).path.strip("/").removesuffix(".git")
    book = (repo.get("path_to_book") or "").strip("/")
    path = f"{book}/{docname}.ipynb" if book else f"{docname}.ipynb"
    colab = config.get("launch_buttons", {}).get("colab_url", "https://colab.research.google.com")
    return f"{colab.rstrip('/')}/github/{owner_repo}/blob/{repo.get('branch', 'main')}/{path}", path


@functools.cache
def _ids(path: Path) -> frozenset[str]:
    html = path.read_text(encoding="utf-8", errors="replace")
    return frozenset(re.findall(r"""\b(?:id|name)=["']([^"']+)["']""", html))


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="session")
def server():
    handler = functools.partial(_Quiet, directory=str(BOOK_HTML))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(scope="session")
def browser_context():
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} not found: install Debian's chromium (apt-get install chromium).")
    from playwright.sync_api import sync_playwright

    profile = tempfile.mkdtemp(prefix="book-chromium-")
    with sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            profile,
            executable_path=CHROMIUM,
            headless=True,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
            ],
            viewport={"width": 1280, "height": 900},
        )
        blocked: list[str] = []

        def route(r):
            url = r.request.url
            parsed = urlparse(url)
            if parsed.scheme in {"data", "blob", "about", "file"} or parsed.hostname in LOCAL_HOSTS:
                r.continue_()
            else:
                blocked.append(url)
                r.abort()

        context.route("**/*", route)
        context.blocked = blocked
        yield context
        context.close()
    shutil.rmtree(profile, ignore_errors=True)


# Runs in the page once it has loaded: waits for MathJax and vega-embed, then reports what is there.
INSPECT_JS = """
async (chartTimeoutMs) => {
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
  const inspect = async () => {
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
  // Sphinx loads MathJax with defer; wait for it to exist, then for its first typesetting.
  for (let t = 0; document.querySelector('.math') && !(window.MathJax && MathJax.startup
       && MathJax.startup.promise) && t < 100; t++) { await sleep(100); }
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
    await MathJax.startup.promise;
  }
  const charts = () => Array.from(document.querySelectorAll('div[id^="altair-viz-"]'));
  // Drawn: vega-embed put a canvas or svg with a size in it (by attribute too: a chart inside a
  // collapsed dropdown is drawn but has no layout box).
  const sized = (el) => (el.getBoundingClientRect().width > 0 && el.getBoundingClientRect().height > 0)
      || (Number(el.getAttribute('width')) > 0 && Number(el.getAttribute('height')) > 0);
  const drawn = (d) => Array.from(d.querySelectorAll('canvas, svg.marks')).some(sized);
  const start = Date.now();
  while (charts().some((d) => !drawn(d) && !d.querySelector('.error'))
         && Date.now() - start < chartTimeoutMs) {
    await sleep(100);
  }
  await Promise.all(Array.from(document.images).map((img) => img.complete ? null :
      new Promise((r) => { img.onload = img.onerror = r; setTimeout(r, 10000); })));
  const outsideCode = (el) => !el.closest('pre, code, .highlight, script, style');
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  const rawDollars = [];
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    if (n.textContent.includes('$$') && outsideCode(n.parentElement)) {
      rawDollars.push(n.textContent.trim().slice(0, 80));
    }
  }
  const maths = Array.from(document.querySelectorAll('.math'));
  // Code inputs, printed outputs and code blocks in the text wider than their box.
  const cutCode = Array.from(document.querySelectorAll('div.highlight pre'))
    .filter((p) => !p.closest('details:not([open])')
            && (p.checkVisibility ? p.checkVisibility({checkVisibilityCSS: true}) : p.offsetParent !== null)
            && p.scrollWidth > p.clientWidth + 1)
    .map((p) => p.textContent.split(String.fromCharCode(10)).reduce((a, b) => (b.length > a.length ? b : a), ''));
  return {
    cutCode,
    mathjax: !!(window.MathJax && MathJax.startup),
    math: maths.map((m) => ({
      source: m.textContent.trim().slice(0, 80),
      typeset: !!m.querySelector('mjx-container'),
      error: (m.querySelector('mjx-merror') || {}).textContent || null,
    })),
    rawDollars,
    charts: charts().map((d) => ({
      id: d.id,
      drawn: drawn(d),
      error: (d.querySelector('.error') || {}).textContent || null,
    })),
    images: Array.from(document.images).map((img) => ({
      src: img.getAttribute('src'), ok: img.complete && img.naturalWidth > 0,
      alt: img.getAttribute('alt'), output: !!img.closest('.cell_output'),
      theme: !!img.closest('.navbar-brand, .logo, header, .bd-header'),
    })),
    links: Array.from(document.querySelectorAll('a[href], link[href]')).map((a) => ({
      href: a.getAttribute('href'), cls: a.className || '', title: a.title || '',
    })),
  };
  };
  const limit = sleep(chartTimeoutMs + 40000).then(() => { throw new Error('page inspection timed out'); });
  return Promise.race([inspect(), limit]);
}
"""


def _open(context, url: str, problems: list[str], screenshot: str | None = None) -> dict:
    """Load url in a new tab, inspect it (INSPECT_JS), record load problems; screenshot it."""
    console: list[str] = []
    missing: list[str] = []
    context.blocked.clear()
    page = context.new_page()
    page.set_default_timeout(60_000)
    page.on("console", lambda m: console.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: console.append(f"uncaught {e}"))
    page.on(
        "response",
        lambda r: missing.append(f"{r.status} {r.url}") if r.status >= 400 else None,
    )
    try:
        page.goto(url, wait_until="load")
        report = page.evaluate(INSPECT_JS, CHART_TIMEOUT_MS)
        if screenshot:
            SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            shot = SCREENSHOTS / (screenshot.removesuffix(".html").replace("/", "__") + ".png")
            page.screenshot(path=str(shot), full_page=True)
    finally:
        page.close()
    for blocked in context.blocked:
        problems.append(f"requested a non-local host (blocked): {blocked}")
    for text in missing:
        problems.append(f"local file missing: {text}")
    for text in console:
        problems.append(f"console error: {text}")
    return report


def _check_content(html: str, report: dict, problems: list[str]) -> None:
    """Math typeset, charts drawn, images loaded."""
    # Math: every .math element typeset, no MathJax error, no $$ left in the text.
    if report["math"] and not report["mathjax"]:
        problems.append(f"{len(report['math'])} math blocks but MathJax did not load")
    for m in report["math"]:
        if not m["typeset"]:
            problems.append(f"math not typeset: {m['source']!r}")
        if m["error"]:
            problems.append(f"MathJax error {m['error']!r} in {m['source']!r}")
    for text in report["rawDollars"]:
        problems.append(f"raw $$ left in the text (math not parsed): {text!r}")

    # Charts: the altair outputs in the page source must all be in the page, and drawn.
    source_charts = len(re.findall(r'<div id="altair-viz-', html))
    if source_charts != len(report["charts"]):
        problems.append(
            f"{source_charts} altair charts in the HTML, {len(report['charts'])} in the page"
        )
    for c in report["charts"]:
        if not c["drawn"]:
            why = c["error"] or f"no canvas/svg after {CHART_TIMEOUT_MS // 1000} s"
            problems.append(f"altair chart #{c['id']} did not draw: {why}")

    for line in report["cutCode"]:
        problems.append(f"line of code or output cut off at the window's width: {line.strip()[:90]!r}")

    for img in report["images"]:
        if not img["ok"]:
            problems.append(f"image did not load: {img['src']}")
        # Alt text: what a screen reader says, and what shows when the image fails. Docutils
        # falls back to the file path, which says nothing: figures in the text get `:alt:`,
        # notebook figures the cell metadata {"mystnb": {"image": {"alt": "..."}}}.
        alt = (img["alt"] or "").strip()
        src = img["src"] or ""
        if not img["theme"] and (not alt or alt == src or alt.endswith(src.rsplit("/", 1)[-1])):
            where = "notebook output" if img["output"] else "figure"
            problems.append(f"{where} without alt text: {src}")


IMAGE_MIMES = ("image/png", "image/jpeg", "image/svg+xml", "image/gif")


def _stored_outputs(notebook: Path) -> tuple[int, int]:
    """(altair charts, images) among a notebook's shown outputs.

    A chart is altair's text/html output or a vega-lite MIME bundle; an image is an output whose
    best representation is an image (no text/html beside it). Cells tagged remove-output or
    remove-cell are not shown, so not counted.
    """
    charts = images = 0
    for cell in json.loads(notebook.read_text(encoding="utf-8")).get("cells", []):
        if {"remove-output", "remove-cell"} & set(cell.get("metadata", {}).get("tags", [])):
            continue
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            html = data.get("text/html", "")
            html = "".join(html) if isinstance(html, list) else html
            vegalite = any(key.startswith("application/vnd.vegalite") for key in data)
            charts += html.count('<div id="altair-viz-') or int(vegalite)
            images += int(not html and not vegalite and any(m in data for m in IMAGE_MIMES))
    return charts, images


def _check_links(docname: str, links: list[dict], problems: list[str]) -> None:
    base = f"http://book.invalid/{docname}"
    for link in links:
        href = link["href"].strip()
        if not href or href.startswith(("mailto:", "javascript:", "tel:")):
            continue
        target = urlparse(urljoin(base, href))
        if target.hostname != "book.invalid":
            continue  # an external link (GitHub, Colab, a paper): not fetched, not checked here
        path = BOOK_HTML / unquote(target.path.lstrip("/"))
        if target.path.endswith("/") or path.is_dir():
            path = path / "index.html"
        if not path.is_file():
            problems.append(
                f"internal link {href!r} points at a missing file {path.relative_to(BOOK_HTML)}"
            )
            continue
        fragment = unquote(target.fragment)
        if fragment and path.suffix == ".html" and fragment not in _ids(path):
            problems.append(
                f"internal link {href!r}: no anchor #{fragment} in {path.relative_to(BOOK_HTML)}"
            )


@pytest.mark.parametrize("docname", PAGES)
def test_page(docname, server, browser_context):
    problems: list[str] = []
    html = (BOOK_HTML / docname).read_text(encoding="utf-8")
    redirect = re.fullmatch(r'\s*<meta http-equiv="Refresh" content="0; url=([^"]+)" />\s*', html)
    if redirect:  # index.html: Jupyter Book's redirect to the root page
        assert (BOOK_HTML / docname).parent.joinpath(redirect.group(1)).is_file(), (
            f"{docname} redirects to a missing page {redirect.group(1)}"
        )
        return
    report = _open(browser_context, server + docname, problems, screenshot=docname)
    _check_content(html, report, problems)

    # Reader features: previous/next, repository button; on notebook pages Colab and download.
    links = report["links"]
    hrefs = [link["href"] for link in links]
    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    repo_url = config["repository"]["url"].rstrip("/")
    if docname not in {"genindex.html", "search.html"}:
        if not any("left-prev" in link["cls"] or "right-next" in link["cls"] for link in links):
            problems.append("no previous/next navigation")
        if repo_url not in hrefs:
            problems.append(f"no repository button linking {repo_url}")
    stem = docname.removesuffix(".html")
    notebook = BOOK_HTML / "_sources" / f"{stem}.ipynb"
    if notebook.is_file():
        # Every chart and figure stored in the notebook is on the page (an output with only a
        # vega-lite MIME bundle and no text/html would be dropped from the HTML silently).
        stored_charts, stored_images = _stored_outputs(notebook)
        if len(report["charts"]) < stored_charts:
            problems.append(
                f"the notebook stores {stored_charts} altair chart outputs, the page shows "
                f"{len(report['charts'])} (render charts as text/html: altair's default renderer)"
            )
        shown_images = sum("_images/" in (img["src"] or "") for img in report["images"])
        if shown_images < stored_images:
            problems.append(
                f"the notebook stores {stored_images} image outputs (figures), the page shows "
                f"{shown_images}"
            )
        expected, repo_path = _expected_colab(stem)
        colab = [h for h in hrefs if "colab.research.google.com" in h]
        if colab != [expected]:
            problems.append(f"Colab link(s) {colab} should be exactly [{expected!r}]")
        if not (ROOT / repo_path).is_file():
            problems.append(
                f"the Colab link's notebook {repo_path} does not exist in the repository"
            )
        if not any(
            link["href"].endswith(f"_sources/{stem}.ipynb") and "btn-download" in link["cls"]
            for link in links
        ):
            problems.append("no download button for the .ipynb")

    _check_links(docname, links, problems)

    assert not problems, f"{docname}: {len(problems)} problem(s):\n  " + "\n  ".join(problems)


def test_book_is_built():
    assert PAGES, f"no built book at {BOOK_HTML}: run `make build` first (or set BOOK_HTML)."
    assert "index.html" in PAGES
    # Every page listed in the table of contents was built.
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    files = [toc["root"]]
    for part in toc.get("parts", []):
        files += [c["file"] for c in part.get("chapters", [])]
    missing = [f for f in files if f"{f}.html" not in PAGES]
    assert not missing, f"pages in _toc.yml but not in the build: {missing}"


def test_book_opens_from_a_folder(browser_context):
    """Offline means from a plain folder too: the richest page, opened as file://, renders."""
    if not PAGES:
        pytest.skip("no built book (test_book_is_built says so)")

    def richness(docname: str) -> tuple[int, int]:
        html = (BOOK_HTML / docname).read_text(encoding="utf-8")
        return html.count('<div id="altair-viz-'), html.count('class="math')

    docname = max(PAGES, key=richness)
    problems: list[str] = []
    report = _open(browser_context, (BOOK_HTML / docname).as_uri(), problems)
    _check_content((BOOK_HTML / docname).read_text(encoding="utf-8"), report, problems)
    assert not problems, f"{docname} from file://: {len(problems)} problem(s):\n  " + "\n  ".join(
        problems
    )
