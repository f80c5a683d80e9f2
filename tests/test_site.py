"""The website: nbconvert pages, the Quarto hand-off, and the built book in a real browser."""

from __future__ import annotations

import functools
import http.server
import os
import stat
import threading
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

import nbformat
import pytest
from conftest import REPO, SmokeBook
from playwright.sync_api import Browser, ConsoleMessage, Page, Request, Response, sync_playwright

from cfbook.site import CONFIG_FILE, PLOTLY_JS, build_site, chapter_title, read_book

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
]

_CONFIG = """
book:
  title: "Tiny book"
  chapters:
    - book/index.ipynb
    - book/first.ipynb
    - book/second.ipynb
"""


def _tiny_project(root: Path) -> Path:
    """A three-chapter project with math, a code cell and a stored output."""
    (root / "book").mkdir(parents=True)
    (root / CONFIG_FILE).write_text(_CONFIG)
    for stem, title in [("index", "Welcome"), ("first", "First steps"), ("second", "Second")]:
        nb = nbformat.v4.new_notebook()
        nb.cells = [
            nbformat.v4.new_markdown_cell(f"# {title}\n\nInline $E = -f_y(x')$ and\n\n$$a^2$$"),
            nbformat.v4.new_code_cell(
                "print(1)", outputs=[nbformat.v4.new_output("stream", text="1\n")]
            ),
        ]
        nbformat.write(nb, root / "book" / f"{stem}.ipynb")
    return root


class _LinkParser(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[tuple[dict[str, str | None], str]] = []
        self._open: dict[str, str | None] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self._open = {k: v for k, v in attrs if k != "class"}
            self.links.append((self._open, ""))

    def handle_data(self, data: str) -> None:
        if self._open is not None:
            self.links[-1] = (self._open, self.links[-1][1] + data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "a":
            self._open = None


def _links(page: str) -> list[tuple[dict[str, str | None], str]]:
    """(attributes, text) of every link in the page, in document order."""
    parser = _LinkParser()
    parser.feed(page)
    return [(attrs, text.strip()) for attrs, text in parser.links if attrs.get("href")]


def test_chapter_title_is_the_first_level_one_heading() -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("Intro\n\n## Sub\n\n# Real title\n")]
    assert chapter_title(nb, "fallback") == "Real title"
    nb.metadata["title"] = "From metadata"
    assert chapter_title(nb, "fallback") == "From metadata"
    assert chapter_title(nbformat.v4.new_notebook(), "fallback") == "fallback"


def test_nbconvert_site_has_navigation_math_and_no_cdn(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = _tiny_project(tmp_path / "project")
    index = build_site(project, tmp_path / "site", use_quarto=False)
    site = tmp_path / "site"
    assert index == site / "index.html"
    assert sorted(p.name for p in site.iterdir()) == [
        "first.html", "index.html", PLOTLY_JS, "second.html",
    ]
    assert "nbconvert" in capsys.readouterr().out
    first = (site / "first.html").read_text(encoding="utf-8")
    assert "<title>First steps</title>" in first
    links = _links(first)
    # Sidebar in _quarto.yml order with the current page marked, then prev/next neighbours.
    assert links[1:4] == [
        ({"href": "index.html"}, "Welcome"),
        ({"href": "first.html", "aria-current": "page"}, "First steps"),
        ({"href": "second.html"}, "Second"),
    ]
    assert links[-2:] == [
        ({"href": "index.html", "rel": "prev"}, "\u2190 Welcome"),
        ({"href": "second.html", "rel": "next"}, "Second \u2192"),
    ]
    assert "<math" in first and "$$" not in first  # MathML, not TeX waiting for MathJax
    head = first.split("</head>")[0]
    assert f'<script src="{PLOTLY_JS}"></script>' in head
    for cdn in ("require.js", "mathjax", "cdnjs", "unpkg", "jsdelivr"):
        assert cdn not in first.lower()


def test_quarto_is_required_when_asked_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no quarto here
    with pytest.raises(FileNotFoundError, match="quarto"):
        build_site(_tiny_project(tmp_path / "p"), tmp_path / "site", use_quarto=True)


def test_quarto_renders_a_staged_copy_of_the_executed_chapters(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A stand-in `quarto` that records what it was asked to render and what the project held.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    record = tmp_path / "quarto-call.txt"
    fake = bin_dir / "quarto"
    fake.write_text(
        "#!/bin/sh\n"
        f'echo "$@" > {record}\n'
        f'ls "$2" "$2/book" >> {record}\n'
        'mkdir -p "$4" && touch "$4/index.html"\n'
    )
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    project = _tiny_project(tmp_path / "project")
    executed = tmp_path / "executed"
    executed.mkdir()
    for chapter in read_book(project).chapters:
        (executed / chapter.name).write_bytes((project / chapter).read_bytes())
    index = build_site(project, tmp_path / "site", chapter_dir=executed)
    assert index == (tmp_path / "site" / "index.html").resolve() and index.is_file()
    call = record.read_text().split()
    assert call[0] == "render" and call[2:4] == ["--output-dir", str(index.parent)]
    assert call[1] != str(project)  # chapters from elsewhere: a staged copy was rendered
    assert {CONFIG_FILE, PLOTLY_JS, "book", "index.ipynb", "first.ipynb"} <= set(call[4:])


# --- the smoke build in headless Chromium --------------------------------------------------------


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Debian's Chromium driven by playwright; never downloads a browser."""
    if not CHROMIUM.exists():
        if os.environ.get("CI"):
            pytest.fail(f"{CHROMIUM} is missing on CI (install Debian's chromium package)")
        pytest.skip(f"{CHROMIUM} not installed")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield browser
        browser.close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        """Keep the test output clean."""


@pytest.fixture(scope="module")
def site_url(smoke_book: SmokeBook) -> Iterator[str]:
    """Serve the smoke build's site on a loopback port for the duration of the module."""
    assert smoke_book.exit_code == 0, smoke_book.output
    handler = functools.partial(_QuietHandler, directory=str(smoke_book.site_dir))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _open(browser: Browser, site_url: str, page_name: str) -> tuple[Page, list[str]]:
    """Load one page of the site and collect everything that went wrong while doing so."""
    page = browser.new_page()
    problems: list[str] = []

    def on_console(message: ConsoleMessage) -> None:
        if message.type == "error":
            problems.append(f"console error: {message.text}")

    def on_request(request: Request) -> None:
        if not request.url.startswith(site_url + "/"):
            problems.append(f"non-local request: {request.url}")

    def on_response(response: Response) -> None:
        if response.status >= 400:
            problems.append(f"HTTP {response.status}: {response.url}")

    page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    page.on("requestfailed", lambda request: problems.append(f"failed: {request.url}"))
    page.on("console", on_console)
    page.on("request", on_request)
    page.on("response", on_response)
    page.goto(f"{site_url}/{page_name}", wait_until="load")
    return page, problems


@pytest.mark.slow
def test_every_chapter_page_loads_cleanly(browser: Browser, site_url: str) -> None:
    for chapter in read_book(REPO).chapters:
        page, problems = _open(browser, site_url, f"{chapter.stem}.html")
        page.wait_for_timeout(300)  # let late scripts report their errors
        assert problems == [], f"{chapter.stem}.html: {problems}"
        assert page.locator("nav.cfbook-sidebar li a").count() == len(read_book(REPO).chapters)
        page.close()


@pytest.mark.slow
def test_comparison_page_shows_the_three_panel_figure(browser: Browser, site_url: str) -> None:
    page, problems = _open(browser, site_url, "comparison.html")
    page.wait_for_selector(".plotly-graph-div .main-svg")
    panels = page.evaluate(
        "() => document.querySelector('.plotly-graph-div')._fullLayout._subplots.cartesian"
    )
    assert len(panels) == 3
    figure = page.locator(".plotly-graph-div").first
    assert figure.locator("g.cartesianlayer > g.subplot").count() == 3
    assert problems == []
    page.close()


@pytest.mark.slow
def test_next_links_walk_the_chapters_in_order(browser: Browser, site_url: str) -> None:
    page, _ = _open(browser, site_url, "index.html")
    visited = [page.url.rsplit("/", 1)[-1]]
    while page.locator("a[rel=next]").count():
        page.locator("a[rel=next]").first.click()
        page.wait_for_load_state("load")
        visited.append(page.url.rsplit("/", 1)[-1])
    assert visited == [f"{c.stem}.html" for c in read_book(REPO).chapters]
    page.close()
