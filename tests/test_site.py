"""The course's static site (docs/build.py), checked in Chromium on the browser test's harness.

    python3 dev.py site && python3 dev.py test --site -m site -n 0 tests/test_site.py

The tests read the site that ``python3 dev.py site`` built in _site/ (they never build it: the
contributor's ``python3 dev.py test`` skips them, see conftest.py) and serve it on 127.0.0.1:

* every page the sources call for exists (one per notebook, in course order, derived from
  ``notebooks/*.ipynb``), loads with nothing in the console, requests nothing from another site,
  and every image on it shows and every link inside the site leads to a page and an anchor that exist;
* each notebook page shows each of its labs' stored views with the line saying it is live when the
  notebook runs, and launch buttons whose URLs are tests/notebook_header.py's for that notebook;
* worked solutions are collapsed as in the notebook and open on a click;
* the search finds notebook 03 for ``register_full_backward_hook``; a phone-sized window needs no
  sideways scrolling; the dark mode is dark; the landing page and the API reference hold what they
  are built from (README.md, the docstrings).
"""

from __future__ import annotations

import functools
import html
import json
import re
import threading
import urllib.request
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urldefrag, urlparse

import pytest

import hooklab

from . import notebook_header as header
from .browser_session import required, shared_chromium
from .nbtools import notebooks, read

pytestmark = pytest.mark.site

ROOT = Path(__file__).resolve().parents[1]
SITE = ROOT / "_site"
NOTEBOOKS = notebooks()
IDS = [p.name for p in NOTEBOOKS]
#: The pages the sources call for: one per notebook, the landing page, TEACHING.md, the API
#: reference, and Sphinx's search, index and module index.
PAGES = ["index.html", "TEACHING.html", "api.html", "search.html", "genindex.html", "py-modindex.html",
         *(f"notebooks/{p.stem}.html" for p in NOTEBOOKS)]
SERVICES = ("binder", "colab", "kaggle", "studio_lab")
#: What a stored lab view (a panel's HTML snapshot, hooklab/lab/panel.py) says about itself.
SNAPSHOT_MARK = "(a live panel: run the notebook to use its controls)"
PHONE = {"width": 390, "height": 844}


# ---------------------------------------------------------------------- fixtures
class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def site() -> Iterator[str]:
    """The base URL of _site/ served on 127.0.0.1."""
    if not (SITE / "index.html").exists():
        pytest.fail("no site in _site/: build it first with `python3 dev.py site`", pytrace=False)
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(SITE)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def chromium(request: pytest.FixtureRequest) -> Any:
    """This process's Chromium (tests/browser_session.py: one per process, as playwright allows)."""
    return required(shared_chromium(request.config), "the site's browser test")


class Visit:
    """A page opened in a fresh context that lets nothing leave the site: what went wrong on the way."""

    def __init__(self, chromium: Any, site: str, *, viewport: dict | None = None, scheme: str = "light") -> None:
        self.site = site
        self.context = chromium.new_context(viewport=viewport or {"width": 1280, "height": 900}, color_scheme=scheme)
        self.outside: list[str] = []
        self.failed: list[str] = []
        self.console: list[str] = []
        self.context.route("**/*", self._route)
        self.page = self.context.new_page()
        self.page.on("console", lambda m: self.console.append(f"{m.text} ({m.location.get('url', '')})")
                     if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.console.append(f"page error: {e}"))
        self.page.on("requestfailed", lambda r: self.failed.append(f"{r.url}: {r.failure}"))
        self.page.on("response", lambda r: self.failed.append(f"{r.url}: HTTP {r.status}") if r.status >= 400 else None)

    def _route(self, route: Any) -> None:
        if route.request.url.startswith(self.site) or route.request.url.startswith(("data:", "blob:")):
            route.continue_()
        else:  # a third-party request: recorded, and not made
            self.outside.append(route.request.url)
            route.abort()

    def open(self, page: str) -> Any:
        self.page.goto(self.site + page, wait_until="load")  # every image and script loaded (or failed)
        return self.page

    def close(self) -> None:
        self.context.close()


@pytest.fixture(scope="module")
def opened(chromium: Any, site: str) -> Iterator[Any]:
    """``opened(page)``: the page, opened once for every test that reads it (each in its own context)."""
    cache: dict[str, Visit] = {}

    def get(page: str) -> Visit:
        if page not in cache:
            cache[page] = Visit(chromium, site)
            cache[page].open(page)
        return cache[page]

    yield get
    for v in cache.values():
        v.close()


@pytest.fixture
def visit(chromium: Any, site: str) -> Iterator[Any]:
    """``visit(viewport=..., scheme=...)``: a fresh context, for a page opened in other conditions."""
    opened: list[Visit] = []

    def make(**kwargs: Any) -> Visit:
        opened.append(Visit(chromium, site, **kwargs))
        return opened[-1]

    yield make
    for v in opened:
        v.close()


# ---------------------------------------------------------------------- helpers
def stored_outputs_html(path: Path) -> list[str]:
    """Every stored text/html output of a notebook."""
    return [o["data"]["text/html"] for c in read(path).cells if c.cell_type == "code"
            for o in c.get("outputs", []) if "text/html" in o.get("data", {})]


def lab_titles(path: Path) -> list[str]:
    """The title of every lab whose stored view the notebook holds (a panel's snapshot)."""
    return [html.unescape(re.sub(r"<[^>]+>", "", re.match(r"<div[^>]*><b>(.*?)</b>", h).group(1)))
            for h in stored_outputs_html(path) if SNAPSHOT_MARK in h]


@functools.lru_cache(maxsize=None)
def ids_in(page: str) -> frozenset[str]:
    text = (SITE / page).read_text()
    return frozenset(re.findall(r"""\sid=["']([^"']+)["']""", text))


def broken_links(hrefs: list[str], site: str) -> list[str]:
    """Links inside the site whose page does not exist, or whose anchor is not on that page."""
    broken = []
    for href in hrefs:
        if not href.startswith(site):
            continue
        url, fragment = urldefrag(href)
        rel = unquote(urlparse(url).path).lstrip("/") or "index.html"
        rel = rel + "index.html" if rel.endswith("/") else rel
        if not (SITE / rel).is_file():
            broken.append(f"{href}: no {rel} in _site/")
        elif fragment and rel.endswith(".html") and unquote(fragment) not in ids_in(rel):
            broken.append(f"{href}: no #{fragment} on {rel}")
    return broken


# ---------------------------------------------------------------------- every page
def test_the_site_has_exactly_the_pages_its_sources_call_for() -> None:
    if not SITE.exists():
        pytest.fail("no site in _site/: build it first with `python3 dev.py site`", pytrace=False)
    built = {str(p.relative_to(SITE)) for p in SITE.glob("*.html")} | {
        f"notebooks/{p.name}" for p in (SITE / "notebooks").glob("*.html")}
    assert built == set(PAGES), f"missing: {sorted(set(PAGES) - built)}; not expected: {sorted(built - set(PAGES))}"


def test_no_page_loads_scripts_or_styles_from_another_site() -> None:
    """What the site needs, it serves: no require.js, widget manager, fonts or MathJax from a CDN."""
    found = []
    for path in sorted(SITE.rglob("*.html")):
        for tag in re.findall(r"<(?:script|link|img|iframe)\b[^>]*>", path.read_text()):
            if re.search(r"""\s(?:src|href)=["'](?:https?:)?//""", tag):
                found.append(f"{path.relative_to(SITE)}: {tag[:160]}")
    assert PAGES and not found, "\n".join(found)


@pytest.mark.parametrize("page", PAGES)
def test_page_loads_cleanly_and_its_images_and_links_resolve(page: str, opened: Any, site: str) -> None:
    v = opened(page)
    p = v.page
    images = p.eval_on_selector_all("img", "els => els.map(e => [e.currentSrc || e.src, e.complete && "
                                           "e.naturalWidth > 0])")
    hrefs = p.eval_on_selector_all("a[href]", "els => els.map(e => e.href)")
    assert not v.console, f"{page}: console errors: {v.console}"
    assert not v.outside, f"{page}: requests to other sites: {v.outside}"
    assert not v.failed, f"{page}: requests that failed: {v.failed}"
    assert not [src for src, ok in images if not ok], f"{page}: images that do not show"
    assert not broken_links(hrefs, site), f"{page}: broken links: {broken_links(hrefs, site)}"
    inside = [h for h in hrefs if h.startswith(site)]
    assert len(inside) >= len(NOTEBOOKS), f"{page}: only {len(inside)} links inside the site: is the sidebar there?"
    if page.startswith("notebooks/") and any(
            "image/png" in o.get("data", {}) for c in read(ROOT / "notebooks" / f"{Path(page).stem}.ipynb").cells
            for o in c.get("outputs", [])):
        assert any("/_images/" in src for src, _ in images), f"{page}: the notebook's pictures are missing"


def test_the_notebooks_are_pages_in_course_order(opened: Any, site: str) -> None:
    p = opened("index.html").page
    order = [h for h in p.eval_on_selector_all("nav.bd-docs-nav a[href]", "els => els.map(e => e.href)")
             if "/notebooks/" in h]
    assert order == [f"{site}notebooks/{nb.stem}.html" for nb in NOTEBOOKS], order


# ---------------------------------------------------------------------- notebook pages
@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_notebook_page_shows_its_lab_views_and_launch_buttons(path: Path, opened: Any) -> None:
    p = opened(f"notebooks/{path.stem}.html").page
    titles = lab_titles(path)
    assert titles, f"{path.name} stores no lab view: is the snapshot's wording still {SNAPSHOT_MARK!r}?"
    labs = p.locator("div.cell_output .hooklab-lab-snapshot")
    assert labs.count() == len(titles), f"{path.name}: {labs.count()} lab views on the page, {len(titles)} stored"
    for i, title in enumerate(titles):
        lab = labs.nth(i)
        assert lab.is_visible() and lab.locator("b").first.inner_text() == title
        assert "live when the notebook runs" in lab.locator(".hooklab-live-note").inner_text()
    want = header.links(path.name)
    buttons = p.locator(".hooklab-launch a")
    got = {buttons.nth(i).get_attribute("data-service"): buttons.nth(i).get_attribute("href")
           for i in range(buttons.count())}
    assert got == {s: getattr(want, s) for s in SERVICES}, f"{path.name}: launch buttons {got}"
    assert p.locator(".hooklab-launch").is_visible()


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_worked_solutions_are_collapsed_as_in_the_notebook(path: Path, opened: Any) -> None:
    """(It opens them: nothing else read on a notebook page depends on whether they are open.)"""
    stored = sum(h.count("<details") - h.count("<details open") for h in stored_outputs_html(path))
    hidden_inputs = sum(1 for c in read(path).cells if c.get("metadata", {}).get("jupyter", {}).get("source_hidden"))
    p = opened(f"notebooks/{path.stem}.html").page
    details = p.locator("div.cell_output details")
    assert details.count() == stored, f"{path.name}: {details.count()} collapsible outputs, {stored} stored"
    for i in range(details.count()):
        d = details.nth(i)
        assert d.evaluate("e => e.open") is False, f"{path.name}: collapsible output {i} is open"
        body = d.locator("pre").first
        assert not body.is_visible(), f"{path.name}: a collapsed solution's code shows"
        d.locator("summary").click()
        assert body.is_visible(), f"{path.name}: a click does not open the solution"
    assert p.locator(".tag_hide-input").count() == hidden_inputs, f"{path.name}: hidden inputs differ"


def test_search_finds_notebook_03(visit: Any, site: str) -> None:
    p = visit().open("search.html?q=register_full_backward_hook")
    finished = "() => /Search finished|did not match/.test(document.querySelector('#search-results')?.innerText || '')"
    p.wait_for_function(finished, timeout=30_000)
    found = p.eval_on_selector_all("#search-results ul.search li a", "els => els.map(e => e.href)")
    assert f"{site}notebooks/03_module_hooks.html" in [urldefrag(h)[0] for h in found], found


# ---------------------------------------------------------------------- layout, modes, content
@pytest.mark.parametrize("page", ["index.html", "notebooks/03_module_hooks.html", "notebooks/05_resnet_traversal.html",
                                  "api.html"])
def test_a_phone_sized_window_needs_no_sideways_scrolling(page: str, visit: Any) -> None:
    p = visit(viewport=PHONE).open(page)
    widths = p.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
    assert widths[0] <= widths[1], f"{page}: {widths[0]} px wide in a {widths[1]} px window"
    article = p.locator("article").bounding_box()
    assert article and article["x"] >= 0 and article["x"] + article["width"] <= PHONE["width"] + 1, article


#: The colour of an element's text and the background it shows on (the first ancestor that has one).
COLOURS = """e => { let b = e;
                   while (b && getComputedStyle(b).backgroundColor === 'rgba(0, 0, 0, 0)') b = b.parentElement;
                   return [getComputedStyle(e).color, getComputedStyle(b || document.body).backgroundColor]; }"""


def contrast(fg: str, bg: str) -> float:
    """WCAG's contrast ratio of two CSS rgb() colours."""
    def luminance(rgb: str) -> float:
        channels = [int(x) / 255 for x in re.findall(r"[\d.]+", rgb)[:3]]
        r, g, b = (c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels)
        return 0.2126 * r + 0.7152 * g + 0.0722 * b

    hi, lo = sorted((luminance(fg), luminance(bg)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_both_modes_keep_text_and_lab_views_readable(scheme: str, visit: Any) -> None:
    """The theme follows the reader's system; prose, code and a lab view's values stay readable."""
    p = visit(scheme=scheme).open("notebooks/05_resnet_traversal.html")
    assert p.evaluate("() => document.documentElement.dataset.theme") == scheme
    body = p.evaluate("() => getComputedStyle(document.body).backgroundColor")
    assert (contrast(body, "rgb(0, 0, 0)") < 2) == (scheme == "dark"), f"{scheme} mode, page background {body}"
    for selector in ("article p", "article div.highlight pre", ".hooklab-lab-snapshot td code", ".hooklab-live-note"):
        fg, bg = p.locator(selector).first.evaluate(COLOURS)
        assert contrast(fg, bg) >= 4.5, f"{scheme} mode: {selector} is {fg} on {bg}"


def words(text: str) -> str:
    """Text as a reader sees it: whitespace collapsed, typographic apostrophes (Sphinx's) plain."""
    return " ".join(text.replace("\u2019", "'").replace("``", "").split())


def test_the_api_reference_is_built_from_the_docstrings(opened: Any) -> None:
    p = opened("api.html").page
    for name in hooklab.__all__:
        if callable(getattr(hooklab, name)) and getattr(hooklab, name).__doc__:
            entry = p.locator(f"dt[id='hooklab.{name}']")
            assert entry.count() == 1, f"api.html has no entry for hooklab.{name}"
    first = hooklab.Hooks.__doc__.strip().splitlines()[0]
    assert words(first) in words(p.locator("article").inner_text())


def test_the_download_button_gives_the_stored_notebook(site: str) -> None:
    for path in NOTEBOOKS:
        with urllib.request.urlopen(f"{site}_sources/notebooks/{path.name}") as response:
            assert json.loads(response.read()) == json.loads(path.read_text()), path.name
