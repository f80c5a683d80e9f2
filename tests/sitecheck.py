"""Browse a built site in headless Chromium and report what a reader would find broken.

Shared by the nbconvert and the Quarto site tests: both must give pages that load without errors,
draw every plotly figure, keep every request on this machine and have no dead internal link.
"""

from __future__ import annotations

import functools
import http.server
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urldefrag

if TYPE_CHECKING:  # the browser extra; only the browser tests call these helpers
    from playwright.sync_api import Browser, ConsoleMessage, Page, Request, Response


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        """Keep the test output clean."""


@contextmanager
def serve(directory: Path) -> Iterator[str]:
    """Serve ``directory`` on a loopback port; yields the base URL (no trailing slash)."""
    handler = functools.partial(_QuietHandler, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@dataclass
class Visit:
    """One page opened in the browser, and everything that went wrong while it loaded."""

    page: Page
    problems: list[str] = field(default_factory=list)


class Tab:
    """A browser tab that opens pages in turn and collects each page's console errors, page
    errors, failed or non-local requests and HTTP errors; ``expected`` names problems that are
    known and accepted."""

    def __init__(
        self, page: Page, base: str, expected: Callable[[str], bool] | None = None
    ) -> None:
        self.page, self.base, self.expected = page, base, expected
        self.visit = Visit(page)
        page.on("pageerror", lambda error: self._report(f"page error: {error}"))
        page.on("requestfailed", lambda request: self._report(f"failed: {request.url}"))
        page.on("console", self._on_console)
        page.on("request", self._on_request)
        page.on("response", self._on_response)

    def open(self, page_path: str) -> Visit:
        """Load ``base/page_path``; its problems go to the returned ``Visit``."""
        self.visit = Visit(self.page)
        self.page.goto(f"{self.base}/{page_path}", wait_until="load")
        return self.visit

    def _report(self, problem: str) -> None:
        if self.expected is None or not self.expected(problem):
            self.visit.problems.append(problem)

    def _on_console(self, message: ConsoleMessage) -> None:
        if message.type == "error":
            self._report(f"console error: {message.text}")

    def _on_request(self, request: Request) -> None:
        if not request.url.startswith((self.base + "/", "data:", "blob:", "about:")):
            self._report(f"request leaving the machine: {request.url}")

    def _on_response(self, response: Response) -> None:
        if response.status >= 400:
            self._report(f"HTTP {response.status}: {response.url}")


def visits(
    browser: Browser,
    base: str,
    page_paths: Iterable[str],
    *,
    expected: Callable[[str], bool] | None = None,
) -> Iterator[Visit]:
    """Each page of ``page_paths`` in turn, in one tab, as a reader clicking through (a fresh tab
    per page would start a renderer and parse plotly.js again each time)."""
    tab = Tab(browser.new_page(), base, expected)
    try:
        for page_path in page_paths:
            yield tab.open(page_path)
    finally:
        tab.page.close()


def open_page(
    browser: Browser, base: str, page_path: str, *, expected: Callable[[str], bool] | None = None
) -> Visit:
    """One page in a tab of its own (close ``Visit.page`` when done)."""
    return Tab(browser.new_page(), base, expected).open(page_path)


def drawn_figures(page: Page) -> int:
    """Wait until every plotly figure on the page has drawn its SVG; return how many there are."""
    figures = page.locator(".plotly-graph-div")
    for i in range(figures.count()):
        figures.nth(i).locator("svg.main-svg").first.wait_for(state="attached", timeout=15_000)
    return figures.count()


def page_links(page: Page) -> list[str]:
    """Absolute URLs of every link on the page, as the browser resolved them."""
    return page.evaluate("() => Array.from(document.querySelectorAll('a[href]'), a => a.href)")


def page_ids(page: Page) -> set[str]:
    """Every element id in the page's DOM, including those scripts added."""
    return set(page.evaluate("() => Array.from(document.querySelectorAll('[id]'), e => e.id)"))


class _IdParser(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.ids.update(value for name, value in attrs if name == "id" and value)


def _file_ids(path: Path) -> set[str]:
    parser = _IdParser()
    parser.feed(path.read_text(encoding="utf-8"))
    return parser.ids


def dead_links(
    links: dict[str, list[str]], base: str, site_dir: Path, ids: dict[str, set[str]]
) -> list[str]:
    """Internal links (``page -> [url]``) whose file or anchor does not exist in ``site_dir``.

    ``ids`` holds the live DOM ids of pages already opened (path relative to the site); other
    targets are parsed from their files.
    """
    dead = []
    for page, urls in links.items():
        for url in urls:
            if not url.startswith(base + "/"):
                continue  # external (e.g. plotly.com in a figure's logo): never fetched by a page
            address, fragment = urldefrag(url)
            target = unquote(address[len(base) + 1 :].split("?")[0]) or "index.html"
            if target.endswith("/"):
                target += "index.html"
            if not (site_dir / target).is_file():
                dead.append(f"{page}: {url} (no file {target})")
                continue
            anchor = unquote(fragment)
            if anchor and target.endswith(".html"):
                if target not in ids:
                    ids[target] = _file_ids(site_dir / target)
                if anchor not in ids[target]:
                    dead.append(f"{page}: {url} (no id {anchor!r} in {target})")
    return dead


def notebook_figures(notebook: Path) -> int:
    """How many plotly figures a stored notebook displays."""
    import nbformat

    nb = nbformat.read(notebook, as_version=4)
    return sum(
        "application/vnd.plotly.v1+json" in output.get("data", {})
        for cell in nb.cells
        if cell.cell_type == "code"
        for output in cell.outputs
    )


# What does not fit the page column (main#quarto-document-content, or the nbconvert fallback's
# main), measured from the page's own boxes:
# - a figure (plotly's div and its SVG), image, table, display equation or code block wider than
#   the column, unless it lies in a box that scrolls sideways (overflow-x auto or scroll) and
#   that box fits;
# - in a plotly figure, a title, subplot title, axis title or legend that runs out of the figure
#   (cut off) or overlaps another one;
# - a plotly mode bar whose box meets the figure's title or a subplot title (the mode bar shows
#   on hover, over whatever lies beneath it).
_COLUMN_OFFENDERS = """() => {
  const column = document.querySelector('main#quarto-document-content') ||
    document.querySelector('main');
  if (!column) return ['no main column'];
  const edge = column.getBoundingClientRect();
  const out = [];
  const name = el => {
    const cls = (el.className.baseVal ?? el.className).toString().trim().split(/\\s+/)[0];
    const owner = el.closest('[id^="fig-"], [id^="tbl-"], section[id]');
    return `${el.tagName.toLowerCase()}${cls ? '.' + cls : ''}` + (owner ? ` in #${owner.id}` : '');
  };
  const scrolls = el => ['auto', 'scroll'].includes(getComputedStyle(el).overflowX);
  const scroller = el => {
    for (let a = el; a && a !== column; a = a.parentElement) if (scrolls(a)) return a;
    return null;
  };
  const fits = box => box.left >= edge.left - 1 && box.right <= edge.right + 1;
  const px = box => `${Math.round(box.left)}..${Math.round(box.right)} px`;
  const wide = '.js-plotly-plot, .js-plotly-plot .main-svg, img, table, .katex-display, pre';
  for (const el of column.querySelectorAll(wide)) {
    const box = el.getBoundingClientRect();
    if (box.width === 0 || fits(box)) continue;
    // A table, an equation or a code block may scroll inside a box that fits; a figure may not:
    // it must fit the column itself, on a phone as on a desktop.
    const wrapper = el.closest('.js-plotly-plot') ? null : scroller(el);
    if (wrapper && fits(wrapper.getBoundingClientRect())) continue;
    out.push(`${name(el)} spans ${px(box)}, the column ${px(edge)}`);
  }
  const meet = (a, b) => Math.min(a.right, b.right) - Math.max(a.left, b.left) > 2 &&
    Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top) > 2;
  const label = el => `"${el.textContent.trim().slice(0, 40)}"`;
  const labels = '.g-gtitle .gtitle, .annotation-text-g, .g-xtitle text, .g-ytitle text, ' +
    '.legend .bg';
  for (const plot of column.querySelectorAll('.js-plotly-plot')) {
    const svg = plot.querySelector('.main-svg');
    if (!svg) continue;
    const frame = svg.getBoundingClientRect();
    const texts = Array.from(plot.querySelectorAll(labels), el => [el, el.getBoundingClientRect()])
      .filter(([el, b]) => b.width > 0 && b.height > 0 &&
        (el.textContent.trim() || el.matches('.bg')));
    for (const [el, b] of texts) {
      if (b.left < frame.left - 1 || b.right > frame.right + 1 || b.top < frame.top - 1) {
        out.push(`${label(el)} cut off at the edge of ${name(plot)}`);
      }
    }
    texts.forEach(([a, ab], i) => texts.slice(i + 1).forEach(([b, bb]) => {
      if (!a.contains(b) && !b.contains(a) && meet(ab, bb)) {
        out.push(`${label(a)} overlaps ${label(b)} in ${name(plot)}`);
      }
    }));
    const bar = plot.querySelector('.modebar');
    const barBox = bar && bar.getBoundingClientRect();
    if (!barBox || barBox.width === 0) continue;
    for (const title of plot.querySelectorAll('.g-gtitle .gtitle, .annotation-text-g')) {
      if (meet(barBox, title.getBoundingClientRect())) {
        out.push(`the mode bar covers ${label(title)} in ${name(plot)}`);
      }
    }
  }
  return out;
}"""


def column_offenders(page: Page) -> list[str]:
    """What on the open page does not fit its column (see ``_COLUMN_OFFENDERS``), measured
    once the site's figure script has fitted the figures (cfbook/book/site/figures.js)."""
    page.wait_for_function(
        "() => document.documentElement.dataset.cfbookFigures === 'fitted'", timeout=30_000
    )
    return page.evaluate(_COLUMN_OFFENDERS)
