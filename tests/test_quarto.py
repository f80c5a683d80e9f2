"""The real Quarto CLI on the real book: a fresh clone renders, and the site works offline.

The site is rendered the way a Quarto user does it: ``quarto render`` in a copy of the repository
that has only run the setup (its .venv), with a PATH that does not have the venv's Python on it.
The pages are then checked in headless Chromium over http (everything, search included) and from
disk (what Quarto 1.7 supports there: its own scripts are ES modules, which browsers refuse to
load from file://).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import nbformat
import pytest
from conftest import REPO
from sitecheck import (
    column_offenders,
    dead_links,
    drawn_figures,
    notebook_figures,
    open_page,
    page_ids,
    page_links,
    serve,
    visits,
)

from cfbook.book.site.build import PLOTLY_JS
from cfbook.book.site.nbconvert import _figure_numbers
from cfbook.book.toc import read_book

if TYPE_CHECKING:  # the browser extra; only the browser tests need it
    from playwright.sync_api import Browser

PRE_RENDER = REPO / "scripts" / "quarto_pre_render.py"
POST_RENDER = REPO / "scripts" / "quarto_post_render.py"


def _plotly_js() -> bytes:
    import plotly

    return (Path(plotly.__file__).parent / "package_data" / PLOTLY_JS).read_bytes()


# --- the project's pre- and post-render scripts, run as Quarto runs them ------------------------


def test_pre_render_falls_back_to_the_projects_venv(tmp_path: Path) -> None:
    """A python3 without plotly (here: the base interpreter, without site-packages) hands over to
    the project's .venv, as for a user whose shell has not activated it."""
    base = Path(getattr(sys, "_base_executable", sys.executable))
    if sys.prefix == sys.base_prefix or not base.is_file():
        pytest.skip("not running inside a virtual environment")
    (tmp_path / ".venv").symlink_to(sys.prefix, target_is_directory=True)
    _link_katex(tmp_path)
    result = subprocess.run(
        [str(base), "-S", str(PRE_RENDER)], cwd=tmp_path, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / PLOTLY_JS).read_bytes() == _plotly_js()
    # KaTeX's script, stylesheet and every font, as its stylesheet names them.
    dist = REPO / KATEX_DIST
    for name in ("katex.min.js", "katex.min.css"):
        assert (tmp_path / "katex" / name).read_bytes() == (dist / name).read_bytes()
    fonts = set(re.findall(r"url\(fonts/([^)]+)\)", (dist / "katex.min.css").read_text()))
    assert fonts and fonts <= {p.name for p in (tmp_path / "katex" / "fonts").iterdir()}


def test_pre_render_finds_katex_beside_its_checkout(tmp_path: Path) -> None:
    # The pipeline renders a staged copy whose scripts/ links to the checkout, without .cache.
    (tmp_path / "scripts").symlink_to(REPO / "scripts", target_is_directory=True)
    result = subprocess.run(
        [sys.executable, str(tmp_path / "scripts" / PRE_RENDER.name)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    dist = REPO / KATEX_DIST
    assert (tmp_path / "katex" / "katex.min.js").read_bytes() == (
        dist / "katex.min.js"
    ).read_bytes()


def test_pre_render_without_katex_says_what_to_do(tmp_path: Path) -> None:
    # A copy of the script, so that the checkout it lives in has no KaTeX either.
    (tmp_path / "scripts").mkdir()
    script = shutil.copy(PRE_RENDER, tmp_path / "scripts")
    result = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True
    )
    assert result.returncode != 0
    assert "KaTeX" in result.stderr and "scripts/setup.sh" in result.stderr
    assert not (tmp_path / "katex").exists()


def test_pre_render_without_plotly_says_what_to_do(tmp_path: Path) -> None:
    base = Path(getattr(sys, "_base_executable", sys.executable))
    result = subprocess.run(
        [str(base), "-S", str(PRE_RENDER)], cwd=tmp_path, capture_output=True, text=True
    )
    assert result.returncode != 0
    assert "cannot import plotly" in result.stderr and "scripts/setup.sh" in result.stderr
    assert not (tmp_path / PLOTLY_JS).exists()


_QUARTO_WIDGET_HEAD = """<script src="https://cdnjs.cloudflare.com/ajax/libs/require.js/2.3.6/\
require.min.js" integrity="sha512-x" crossorigin="anonymous"></script>
<script src="https://cdnjs.cloudflare.com/ajax/libs/jquery/3.5.1/jquery.min.js" integrity=\
"sha512-y" crossorigin="anonymous" data-relocate-top="true"></script>
<script type="application/javascript">define('jquery', [],function() {return window.jQuery;})\
</script>
"""


def _post_render(site: Path, project: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "QUARTO_PROJECT_OUTPUT_DIR": str(site)}
    return subprocess.run(
        [sys.executable, str(POST_RENDER)],
        env=env,
        capture_output=True,
        text=True,
        cwd=project or site,  # Quarto runs it in the project folder
    )


def test_post_render_links_each_chapter_to_its_notebook_copied_beside_it(tmp_path: Path) -> None:
    project, site = tmp_path / "project", tmp_path / "project" / "_site"
    (project / "book").mkdir(parents=True)
    (site / "book").mkdir(parents=True)
    (site / "reference").mkdir()
    (project / "book" / "two_d.ipynb").write_text('{"cells": []}')
    title = '<header id="title-block-header" class="quarto-title-block"><h1>T</h1></header>'
    (site / "book" / "two_d.html").write_text(f"<body><main>{title}<p>x</p></main></body>")
    (site / "reference" / "index.html").write_text(f"<body><main>{title}</main></body>")
    for _ in range(2):  # a second render of the same site adds nothing
        result = _post_render(site, project)
        assert result.returncode == 0, result.stderr
    page = (site / "book" / "two_d.html").read_text()
    assert page.count('class="cfbook-notebook"') == 1
    assert f'{title}\n<p class="cfbook-notebook"><a href="two_d.ipynb" download' in page
    assert (site / "book" / "two_d.ipynb").read_text() == '{"cells": []}'
    assert "cfbook-notebook" not in (site / "reference" / "index.html").read_text()


def test_post_render_removes_quartos_widget_scripts(tmp_path: Path) -> None:
    page = tmp_path / "book" / "mnist.html"
    page.parent.mkdir()
    local = '<script src="../site_libs/quarto-nav/quarto-nav.js"></script>\n'
    page.write_text(f'<head>{local}{_QUARTO_WIDGET_HEAD}</head><a href="https://plotly.com/">')
    result = _post_render(tmp_path)
    assert result.returncode == 0, result.stderr
    assert page.read_text() == f'<head>{local}</head><a href="https://plotly.com/">'


def test_post_render_adds_the_figure_script_once(tmp_path: Path) -> None:
    page = tmp_path / "index.html"
    page.write_text("<html><body><p>text</p></body></html>")
    for _ in range(2):  # a second render of the same site adds nothing
        result = _post_render(tmp_path)
        assert result.returncode == 0, result.stderr
    script = (REPO / "cfbook" / "book" / "site" / "figures.js").read_text()
    assert page.read_text() == (
        f'<html><body><p>text</p><script data-cfbook="figures">\n{script}</script>\n</body></html>'
    )


def test_post_render_fails_on_any_other_remote_asset(tmp_path: Path) -> None:
    (tmp_path / "index.html").write_text('<img alt="x" src="https://example.org/a.png">')
    (tmp_path / "site_libs").mkdir()
    (tmp_path / "site_libs" / "theme.css").write_text(
        '@import url("https://fonts.googleapis.com/css2?family=X");\nbody { color: red }'
    )
    result = _post_render(tmp_path)
    assert result.returncode != 0
    assert "index.html: https://example.org/a.png" in result.stderr
    assert "site_libs/theme.css: https://fonts.googleapis.com/css2?family=X" in result.stderr


# --- quarto render in a fresh clone --------------------------------------------------------------


KATEX_DIST = Path(".cache") / "npm" / "node_modules" / "katex" / "dist"


def _link_katex(project: Path) -> None:
    """KaTeX as scripts/setup.sh installs it (from the npm registry into .cache/npm)."""
    if not (REPO / KATEX_DIST / "katex.min.js").is_file():
        pytest.fail(f"KaTeX is not in {REPO / KATEX_DIST}: run bash scripts/setup.sh")
    (project / ".cache").mkdir()
    (project / ".cache" / "npm").symlink_to(REPO / ".cache" / "npm", target_is_directory=True)


def _project_files() -> list[str]:
    """What a clone holds: tracked files plus new ones not ignored (work in progress)."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=REPO,
            capture_output=True,
            check=True,
        ).stdout.decode()
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("the repository is not a git checkout")
    return [f for f in listed.split("\0") if f and (REPO / f).is_file()]


def _git(folder: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=folder, capture_output=True, text=True, check=True
    ).stdout


@pytest.fixture(scope="module")
def fresh_clone(quarto: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the repository after `bash scripts/setup.sh`, where `quarto render` has run."""
    clone = tmp_path_factory.mktemp("clone")
    for name in _project_files():
        (clone / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, clone / name)
    _git(clone, "init", "-q")
    _git(clone, "add", "-A")
    _git(clone, "-c", "user.name=cfbook", "-c", "user.email=cfbook@localhost", "commit", "-qm", ".")
    (clone / ".venv").symlink_to(sys.prefix, target_is_directory=True)
    _link_katex(clone)
    # .gitignore's `.venv/` matches the folder setup.sh makes, not this link standing in for it.
    (clone / ".git" / "info" / "exclude").write_text("/.venv\n")
    # The user's shell: Quarto on PATH, the venv not activated, no QUARTO_PYTHON.
    venv_bin = str(Path(sys.executable).parent)
    path = [p for p in os.environ["PATH"].split(os.pathsep) if p != venv_bin]
    env = {k: v for k, v in os.environ.items() if k not in ("QUARTO_PYTHON", "VIRTUAL_ENV")}
    env["PATH"] = os.pathsep.join([str(Path(quarto).parent), *path])
    result = subprocess.run(
        ["quarto", "render"], cwd=clone, env=env, capture_output=True, text=True, timeout=900
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return clone


@pytest.mark.slow
def test_quarto_render_works_in_a_fresh_clone(fresh_clone: Path) -> None:
    site = fresh_clone / "_site"
    for chapter in read_book(fresh_clone).chapters:
        assert (site / chapter.with_suffix(".html")).is_file(), chapter
    assert (site / PLOTLY_JS).read_bytes() == _plotly_js()
    assert [p.relative_to(site).as_posix() for p in site.rglob(PLOTLY_JS)] == [PLOTLY_JS]
    # Everything the render wrote is git-ignored, and Quarto did not touch .gitignore.
    assert _git(fresh_clone, "status", "--porcelain", "--untracked-files=all") == ""


@pytest.fixture(scope="module")
def quarto_site(fresh_clone: Path) -> Iterator[str]:
    """The fresh clone's site served over http."""
    with serve(fresh_clone / "_site") as base:
        yield base


def _pages(clone: Path) -> list[tuple[str, Path]]:
    return [(c.with_suffix(".html").as_posix(), clone / c) for c in read_book(clone).chapters]


# --- what a reader must find on the rendered pages ----------------------------------------------

# Plotly figures not inside a float numbered and captioned by Quarto ("Figure 11.1: ...");
# subfigures count by their enclosing float's caption.
_UNCAPTIONED = """() => Array.from(document.querySelectorAll('.plotly-graph-div')).filter(div => {
    let figure = div.closest('figure');
    while (figure?.parentElement?.closest('figure')) {
        figure = figure.parentElement.closest('figure');
    }
    const caption = figure && figure.querySelector(':scope > figcaption');
    return !(caption && /^\\s*Figure\\s[A-Z\\d.]+:\\s*\\S/.test(caption.textContent));
}).map(div => div.id)"""
_NUMBERS = """() => Object.fromEntries(Array.from(
    document.querySelectorAll('div.quarto-float[id^="fig-"]'),
    float => [float.id, float.querySelector(':scope > figure > figcaption').textContent
        .match(/Figure\\s([A-Z\\d.]+):/)[1]]))"""
_CODE = "() => Array.from(document.querySelectorAll('div.sourceCode pre'), pre => pre.innerText)"
_HEATMAPS = """() => Array.from(
    document.querySelectorAll('#fig-microscope .plotly-graph-div g.hm image'),
    image => image.getAttribute('href'))"""


@pytest.mark.slow
def test_quarto_pages_over_http_load_draw_link_and_caption_cleanly(
    browser: Browser, fresh_clone: Path, quarto_site: str
) -> None:
    """One walk over the pages: each loads without errors, draws its notebook's figures, each in
    a numbered, captioned float (numbered as the nbconvert fallback numbers them), typesets its
    equations, has no dead link, and shows the API rather than the chapters' machinery."""
    links, ids, code, numbers = {}, {}, {}, {}
    figures = equations = 0
    pages = _pages(fresh_clone)
    walk = visits(browser, quarto_site, [page for page, _ in pages])
    for (page, notebook), visit in zip(pages, walk, strict=True):
        drawn = drawn_figures(visit.page)
        assert drawn == notebook_figures(notebook), page
        figures += drawn
        assert visit.page.evaluate(_UNCAPTIONED) == [], f"{page}: figures without a caption"
        numbers |= {
            label: (page, f"Figure {n}") for label, n in visit.page.evaluate(_NUMBERS).items()
        }
        code[page] = visit.page.evaluate(_CODE)
        # Every equation typeset by the site's KaTeX, none left as TeX or failed.
        typeset = visit.page.locator(".katex").count()
        assert visit.page.locator(".katex-error").count() == 0, page
        assert typeset == visit.page.locator("span.math").count(), page
        equations += typeset
        links[page], ids[page] = page_links(visit.page), page_ids(visit.page)
        visit.page.wait_for_timeout(300)  # let late scripts report their errors
        assert visit.problems == [], f"{page}: {visit.problems}"
    assert figures >= 10  # the check saw real figures
    assert equations >= 30  # the preface's method and the chapters' inline math
    assert dead_links(links, quarto_site, fresh_clone / "_site", ids) == []
    # The nbconvert fallback numbers the figures as Quarto does.
    notebooks = [nbformat.read(notebook, as_version=4) for _, notebook in _pages(fresh_clone)]
    book = read_book(fresh_clone)
    pages = [page for page, _ in _pages(fresh_clone)]
    assert _figure_numbers(notebooks, pages, [book.numbers[c] for c in book.chapters]) == numbers
    shown = "\n".join(block for blocks in code.values() for block in blocks)
    assert "counterfactual_training(" in shown and ".generate(" in shown
    explains_machinery = {"book/setup.html", "book/training.html"}
    for page, blocks in code.items():
        if page not in explains_machinery:
            assert not [b for b in blocks if "CT_MODE = None" in b or "setup(CT_MODE" in b], page


def _unique_word(clone: Path) -> tuple[str, str]:
    """A long word of one chapter's prose that no other chapter uses, and that chapter's page."""
    words = {}
    for page, notebook in _pages(clone):
        nb = nbformat.read(notebook, as_version=4)
        text = " ".join(c.source for c in nb.cells if c.cell_type == "markdown").lower()
        words[page] = set(re.findall(r"\b[a-z]{10,}\b", text))
    for page, own in words.items():
        others = set().union(*(w for p, w in words.items() if p != page))
        if own - others:
            return sorted(own - others)[0], page
    raise AssertionError("no chapter has a word of its own")


@pytest.mark.slow
def test_quarto_search_finds_a_word_from_a_chapter(
    browser: Browser, fresh_clone: Path, quarto_site: str
) -> None:
    word, page = _unique_word(fresh_clone)
    visit = open_page(browser, quarto_site, "index.html")
    visit.page.fill(".aa-Input", word)
    hit = visit.page.locator(f'.aa-Panel a[href*="{page.rsplit("/", 1)[-1]}"]').first
    hit.wait_for(timeout=15_000)
    assert word in hit.inner_text().lower()
    assert visit.problems == []
    visit.page.close()


def _blocked_module(problem: str) -> bool:
    """Quarto 1.7 loads quarto.js and tabsets.js as ES modules, which file:// pages may not."""
    return "site_libs/quarto-html/" in problem or problem.endswith("net::ERR_FAILED")


@pytest.mark.slow
def test_quarto_pages_from_disk_draw_their_figures_offline(
    browser: Browser, fresh_clone: Path
) -> None:
    base = (fresh_clone / "_site").as_uri()
    pages = _pages(fresh_clone)
    walk = visits(browser, base, [page for page, _ in pages], expected=_blocked_module)
    for (page, notebook), visit in zip(pages, walk, strict=True):
        assert drawn_figures(visit.page) == notebook_figures(notebook), page
        visit.page.wait_for_timeout(300)
        assert visit.problems == [], f"{page}: {visit.problems}"


@pytest.mark.slow
def test_quarto_search_slider_moves_the_images(
    browser: Browser, fresh_clone: Path, quarto_site: str
) -> None:
    visit = open_page(browser, quarto_site, "book/what_ct_buys.html")
    drawn_figures(visit.page)
    before = visit.page.evaluate(_HEATMAPS)
    assert len(before) == 4 and all(before)  # iterate and change, for both models
    label = visit.page.locator("#fig-microscope text.slider-label").first
    opened = label.text_content()  # the page opens on the finished searches, not on step 0
    assert opened.startswith("search step ") and opened != "search step 0"
    rail = visit.page.locator("#fig-microscope .slider-rail-touch-rect").first
    rail.scroll_into_view_if_needed()
    box = rail.bounding_box()
    assert box is not None
    visit.page.mouse.click(box["x"] + 2, box["y"] + box["height"] / 2)  # back to step 0
    visit.page.wait_for_function(
        f"before => JSON.stringify(({_HEATMAPS})()) !== JSON.stringify(before)", arg=before
    )
    after = visit.page.evaluate(_HEATMAPS)
    assert after[0] != before[0] and after[2] != before[2]  # both models' iterates changed
    assert label.text_content() == "search step 0"
    assert visit.problems == []
    visit.page.close()


@pytest.mark.slow
@pytest.mark.parametrize("width", [1280, 390])
def test_quarto_pages_fit_a_desktop_and_a_phone(
    browser: Browser, fresh_clone: Path, quarto_site: str, width: int
) -> None:
    """Nothing runs off the page sideways, and every figure, image, table, display equation and
    code block fits the page column or scrolls inside a box that does (book/theme.scss,
    cfbook/book/site/figures.js); no figure's titles or labels are cut off or overlap, and no
    mode bar covers a title. The reference's pages are checked too."""
    site = fresh_clone / "_site"
    pages = [page for page, _ in _pages(fresh_clone)]
    pages += [p.relative_to(site).as_posix() for p in sorted((site / "reference").glob("*.html"))]
    assert len(pages) > len(_pages(fresh_clone))  # the API reference was built
    page = browser.new_page(viewport={"width": width, "height": 900})
    wide, offenders = [], []
    for path in pages:
        page.goto(f"{quarto_site}/{path}")
        drawn_figures(page)
        offenders += [f"{path}: {problem}" for problem in column_offenders(page)]
        scroll, inner = page.evaluate(
            "() => [document.documentElement.scrollWidth, window.innerWidth]"
        )
        if scroll > inner:
            wide.append(f"{path}: {scroll} px")
    page.close()
    assert wide == [], f"wider than a {width} px window: {wide}"
    assert offenders == [], f"not fitting a {width} px window's column:\n" + "\n".join(offenders)
