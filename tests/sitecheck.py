"""Browse a built site in headless Chromium and report what a reader would find broken.

Shared by the nbconvert and the Quarto site tests: both must give pages that load without errors,
draw every plotly figure, keep every request on this machine and have no dead internal link.
"""

from __future__ import annotations

import functools
import http.server
import threading
from collections.abc import Callable, Iterator
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


def open_page(
    browser: Browser, base: str, page_path: str, *, expected: Callable[[str], bool] | None = None
) -> Visit:
    """Load ``base/page_path`` and collect console errors, page errors, failed or non-local
    requests and HTTP errors; ``expected`` names problems that are known and accepted."""
    visit = Visit(browser.new_page())

    def report(problem: str) -> None:
        if expected is None or not expected(problem):
            visit.problems.append(problem)

    def on_console(message: ConsoleMessage) -> None:
        if message.type == "error":
            report(f"console error: {message.text}")

    def on_request(request: Request) -> None:
        if not request.url.startswith((base + "/", "data:", "blob:", "about:")):
            report(f"request leaving the machine: {request.url}")

    def on_response(response: Response) -> None:
        if response.status >= 400:
            report(f"HTTP {response.status}: {response.url}")

    visit.page.on("pageerror", lambda error: report(f"page error: {error}"))
    visit.page.on("requestfailed", lambda request: report(f"failed: {request.url}"))
    visit.page.on("console", on_console)
    visit.page.on("request", on_request)
    visit.page.on("response", on_response)
    visit.page.goto(f"{base}/{page_path}", wait_until="load")
    return visit


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
