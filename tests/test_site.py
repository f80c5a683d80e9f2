"""The nbconvert fallback site, and that site in a real browser (the chapter list: test_toc.py)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import TYPE_CHECKING

import nbformat
import pytest
import yaml
from conftest import REPO, SmokeBook
from sitecheck import dead_links, drawn_figures, notebook_figures, page_links, serve, visits

from cfbook.book.site.build import PLOTLY_JS, build_site
from cfbook.book.site.nbconvert import chapter_title
from cfbook.book.toc import CONFIG_FILE, read_book

if TYPE_CHECKING:  # the browser extra; only the browser tests need it
    from playwright.sync_api import Browser

_CONFIG = {
    "book": {
        "title": "Tiny book",
        "chapters": ["index.ipynb", "book/first.ipynb", "book/second.ipynb"],
    }
}


def _tiny_project(root: Path) -> Path:
    """A three-chapter project in the book's layout, with math, a cross-link and an output."""
    (root / "book").mkdir(parents=True)
    (root / CONFIG_FILE).write_text(yaml.safe_dump(_CONFIG))
    pages = [
        ("index", "Welcome", ""),
        ("book/first", "First steps", "[on](second.ipynb#more)"),
        ("book/second", "Second", "## More"),
    ]
    for stem, title, extra in pages:
        nb = nbformat.v4.new_notebook()
        nb.cells = [
            nbformat.v4.new_markdown_cell(
                f"# {title}\n\nInline $E = -f_y(x')$ and\n\n$$a^2$$\n\n{extra}"
            ),
            nbformat.v4.new_code_cell(
                "print(1)", outputs=[nbformat.v4.new_output("stream", text="1\n")]
            ),
        ]
        nbformat.write(nb, root / f"{stem}.ipynb")
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


# --- chapter titles ------------------------------------------------------------------------------


def test_chapter_title_is_the_first_level_one_heading() -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("Intro\n\n## Sub\n\n# Real title\n")]
    assert chapter_title(nb, "fallback") == "Real title"
    nb.metadata["title"] = "From metadata"
    assert chapter_title(nb, "fallback") == "From metadata"
    assert chapter_title(nbformat.v4.new_notebook(), "fallback") == "fallback"


# --- the nbconvert fallback ----------------------------------------------------------------------


def test_nbconvert_site_has_quartos_layout_navigation_math_and_no_cdn(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = _tiny_project(tmp_path / "project")
    site = build_site(project, tmp_path / "site", use_quarto=False)
    root = tmp_path / "site"
    assert site.index == root / "index.html" and site.builder == "nbconvert"
    assert sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()) == [
        "book/first.html",
        "book/first.ipynb",
        "book/second.html",
        "book/second.ipynb",
        "index.html",
        "index.ipynb",
        PLOTLY_JS,
    ]
    assert "nbconvert" in capsys.readouterr().out
    first = (root / "book" / "first.html").read_text(encoding="utf-8")
    assert "<title>First steps</title>" in first
    links = _links(first)
    # Sidebar in _quarto.yml order with the current page marked, relative to book/first.html.
    assert links[:4] == [
        ({"href": "../index.html"}, "Tiny book"),
        ({"href": "../index.html"}, "Welcome"),
        ({"href": "first.html", "aria-current": "page"}, "First steps"),
        ({"href": "second.html"}, "Second"),
    ]
    assert ({"href": "second.html#more"}, "on") in links  # a notebook link becomes a page link
    # Each page downloads its own notebook, copied beside it.
    notebook = (
        {"href": "first.ipynb", "download": "first.ipynb"},
        "Download this chapter as a notebook",
    )
    assert notebook in links
    assert (root / "book" / "first.ipynb").read_bytes() == (
        project / "book" / "first.ipynb"
    ).read_bytes()
    assert links[-2:] == [
        ({"href": "../index.html", "rel": "prev"}, "\u2190 Welcome"),
        ({"href": "second.html", "rel": "next"}, "Second \u2192"),
    ]
    assert "<math" in first and "$$" not in first  # MathML, not TeX waiting for MathJax
    head = first.split("</head>")[0]
    assert f'<script src="../{PLOTLY_JS}"></script>' in head
    assert f'<script src="{PLOTLY_JS}"></script>' in (root / "index.html").read_text()
    for cdn in ("require.js", "mathjax", "cdnjs", "unpkg", "jsdelivr"):
        assert cdn not in first.lower()
    # The script that fits the figures to the column, once, at the end of the page.
    assert first.count('<script data-cfbook="figures">') == 1
    assert first.index('data-cfbook="figures"') > first.index("</main>")


def test_quarto_is_required_when_asked_for(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no quarto here
    with pytest.raises(FileNotFoundError, match="quarto"):
        build_site(_tiny_project(tmp_path / "p"), tmp_path / "site", use_quarto=True)


def test_missing_executed_chapters_are_named(tmp_path: Path) -> None:
    project = _tiny_project(tmp_path / "project")
    with pytest.raises(FileNotFoundError, match="book/first.ipynb, book/second.ipynb"):
        build_site(project, tmp_path / "site", source_dir=tmp_path, use_quarto=False)


# --- the smoke build's chapters as an nbconvert site, in headless Chromium ----------------------


@pytest.fixture(scope="module")
def nbconvert_site(smoke_book: SmokeBook, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The smoke build's executed chapters rendered by the fallback builder."""
    assert smoke_book.exit_code == 0, smoke_book.output
    site_dir = tmp_path_factory.mktemp("nbconvert-site")
    build_site(REPO, site_dir, source_dir=smoke_book.build_dir, use_quarto=False)
    return site_dir


@pytest.fixture(scope="module", params=["http", "file"])
def nbconvert_base(request: pytest.FixtureRequest, nbconvert_site: Path) -> Iterator[str]:
    """The site's base URL, served over http or opened from disk: both must work."""
    if request.param == "file":
        yield nbconvert_site.as_uri()
    else:
        with serve(nbconvert_site) as base:
            yield base


@pytest.mark.slow
def test_every_nbconvert_page_loads_draws_and_links_cleanly(
    browser: Browser, nbconvert_site: Path, nbconvert_base: str, smoke_book: SmokeBook
) -> None:
    """One walk over the pages: each loads without errors and draws its notebook's figures
    (the main example's page both of its three-panel figures), has no dead link, and its "next"
    link leads to the following chapter."""
    book = read_book(REPO)
    pages = [chapter.with_suffix(".html").as_posix() for chapter in book.chapters]
    links, following = {}, []
    walk = visits(browser, nbconvert_base, pages)
    for chapter, page, visit in zip(book.chapters, pages, walk, strict=True):
        figures = drawn_figures(visit.page)
        assert figures == notebook_figures(smoke_book.build_dir / chapter), page
        assert visit.page.locator("nav.cfbook-sidebar li a").count() == len(book.chapters)
        if page == "book/what_ct_buys.html":  # the seeds' comparison and the GPU run's panels
            panels = visit.page.evaluate(
                "() => [...document.querySelectorAll('.plotly-graph-div')]"
                ".map(d => d._fullLayout._subplots.cartesian.length)"
            )
            assert panels.count(3) == 2, panels
        links[page] = page_links(visit.page)
        following += visit.page.evaluate(
            "() => Array.from(document.querySelectorAll('a[rel=next]'), a => a.href).slice(0, 1)"
        )
        visit.page.wait_for_timeout(200)  # let late scripts report their errors
        assert visit.problems == [], f"{page}: {visit.problems}"
    assert dead_links(links, nbconvert_base, nbconvert_site, {}) == []
    assert following == [f"{nbconvert_base}/{page}" for page in pages[1:]]


@pytest.mark.slow
def test_smoke_chapters_are_nbconvert_pages_with_one_plotly(nbconvert_site: Path) -> None:
    pages = sorted(p.relative_to(nbconvert_site).as_posix() for p in nbconvert_site.rglob("*.html"))
    assert pages == sorted(c.with_suffix(".html").as_posix() for c in read_book(REPO).chapters)
    assert [p.name for p in nbconvert_site.rglob(PLOTLY_JS)] == [PLOTLY_JS]
    for page in nbconvert_site.rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        assert not re.search(r"<script[^>]+src=\"(https?:)?//", text)  # nothing from a CDN


def test_nbconvert_pages_apply_the_quarto_cell_options_and_figure_references(
    tmp_path: Path,
) -> None:
    project = _tiny_project(tmp_path / "project")
    second = nbformat.read(project / "book" / "second.ipynb", as_version=4)
    figure = nbformat.v4.new_output("display_data", {"text/html": "<div>plot</div>"})
    second.cells += [
        nbformat.v4.new_code_cell("#| include: false\nsecret_parameter = 1"),
        nbformat.v4.new_code_cell(
            "#| echo: false\nhidden_setup()",
            outputs=[nbformat.v4.new_output("stream", text="ok\n")],
        ),
        nbformat.v4.new_code_cell(
            '#| label: fig-curve\n#| fig-cap: "A curve & its axis"\nshow_curve()',
            outputs=[figure],
        ),
        nbformat.v4.new_markdown_cell("As @fig-curve shows, and @fig-unknown does not."),
    ]
    nbformat.write(second, project / "book" / "second.ipynb")
    first = nbformat.read(project / "book" / "first.ipynb", as_version=4)
    first.cells.append(nbformat.v4.new_markdown_cell("See @fig-curve."))
    nbformat.write(first, project / "book" / "first.ipynb")
    build_site(project, tmp_path / "site", use_quarto=False)
    page = (tmp_path / "site" / "book" / "second.html").read_text(encoding="utf-8")
    assert "secret_parameter" not in page  # include: false drops the cell and its output
    assert "hidden_setup" not in page and "ok\n" in page  # echo: false keeps the output only
    assert "#|" not in page
    # The third chapter, counting the home page as Quarto does: Figure 3.1, captioned, anchored.
    assert (
        '<p class="cfbook-caption" id="fig-curve"><b>Figure 3.1</b>: A curve &amp; its axis' in page
    )
    assert ({"href": "#fig-curve"}, "Figure 3.1") in _links(page)
    assert "@fig-unknown" in page  # left as it is, as Quarto leaves an unresolved reference
    other = (tmp_path / "site" / "book" / "first.html").read_text(encoding="utf-8")
    assert ({"href": "second.html#fig-curve"}, "Figure 3.1") in _links(other)
