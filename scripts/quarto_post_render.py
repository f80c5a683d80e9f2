"""Quarto post-render step: no page of the site may load anything from another machine.

Quarto 1.7 takes every notebook output with text/html for a JavaScript widget that may need
require.js and jQuery, and adds both from cdnjs to that page, plus an inline shim that calls
require.js's `define`. The book's figures need none of it: they draw with the global `Plotly` of
the site's own plotly.min.js (which require.js would even hide, since plotly.js registers as an
AMD module when `define` exists). This script removes those three tags from the rendered pages,
adds the site's figure script (cfbook/book/site/figures.js: it fits each figure to the page
column, on a phone as on a desktop) to the end of each page, gives each chapter a link that
downloads its notebook (copied beside the page), then fails the render if a page or stylesheet
still loads a script, style, image or font from the network, naming the file and the address.

Quarto runs it in the project folder with $QUARTO_PROJECT_OUTPUT_DIR set. Standard library only.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path

WIDGET_DEPENDENCIES = re.compile(
    r'<script src="https://cdnjs\.cloudflare\.com/ajax/libs/(?:require\.js|jquery)/[^"]*"'
    r"[^>]*></script>\n?"
    r"|<script type=\"application/javascript\">define\('jquery', \[\],"
    r"function\(\) \{return window\.jQuery;\}\)</script>\n?"
)
_REMOTE = r"(?:https?:)?//[^\"')\s]+"
# The script that fits the figures to the column; the checkout this script lives in has it (the
# pipeline renders a staged copy whose scripts/ links back to the checkout).
FIGURES_JS = Path(__file__).resolve().parents[1] / "cfbook" / "book" / "site" / "figures.js"
FIGURES_TAG = '<script data-cfbook="figures">'
REMOTE_ASSETS = {
    ".html": re.compile(
        rf"<(?:script|link|img|iframe|source)\b[^>]*?\s(?:src|href)=\"({_REMOTE})\""
    ),
    ".css": re.compile(rf"(?:url\(|@import\s)\s*[\"']?({_REMOTE})"),
}


def with_figure_script(page: str, script: str) -> str:
    """``page`` with the figure script inlined before ``</body>`` (once)."""
    if FIGURES_TAG in page or "</body>" not in page:
        return page
    head, tail = page.rsplit("</body>", 1)
    return f"{head}{FIGURES_TAG}\n{script}</script>\n</body>{tail}"


NOTEBOOK_LINK = (
    '<p class="cfbook-notebook"><a href="{name}" download="{name}">'
    "Download this chapter as a notebook</a></p>"
)
_TITLE_BLOCK = re.compile(r'<header id="title-block-header".*?</header>', re.S)


def with_notebook_link(page: str, notebook: str) -> str:
    """``page`` with a link that downloads ``notebook`` (a file name beside the page) after its
    title block (once)."""
    if 'class="cfbook-notebook"' in page:
        return page
    title = _TITLE_BLOCK.search(page)
    if title is None:
        return page
    link = NOTEBOOK_LINK.format(name=notebook)
    return f"{page[: title.end()]}\n{link}{page[title.end() :]}"


def add_notebooks(site_dir: Path, project_dir: Path) -> int:
    """Copy each page's source notebook (``<page>.ipynb`` in the project) beside the page and
    link it from the page; pages without a notebook (the API reference) are left alone. Returns
    how many pages got a link."""
    linked = 0
    for page in sorted(site_dir.rglob("*.html")):
        relative = page.relative_to(site_dir).with_suffix(".ipynb")
        source = project_dir / relative
        if not source.is_file():
            continue
        shutil.copyfile(source, site_dir / relative)
        text = page.read_text(encoding="utf-8")
        linked_text = with_notebook_link(text, relative.name)
        if linked_text != text:
            page.write_text(linked_text, encoding="utf-8")
            linked += 1
    return linked


def offline(site_dir: Path, script: str = "") -> list[str]:
    """Strip Quarto's widget scripts from the site's pages and add ``script`` (the figure
    script) to each; return the remote assets left."""
    remote: list[str] = []
    for path in sorted(site_dir.rglob("*")):
        pattern = REMOTE_ASSETS.get(path.suffix)
        if pattern is None or not path.is_file():
            continue
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".html":
            stripped = WIDGET_DEPENDENCIES.sub("", text)
            if script:
                stripped = with_figure_script(stripped, script)
            if stripped != text:
                path.write_text(stripped, encoding="utf-8")
                text = stripped
        name = path.relative_to(site_dir)
        remote += [f"{name}: {url}" for url in pattern.findall(text)]
    return remote


def main() -> None:
    site_dir = Path(os.environ.get("QUARTO_PROJECT_OUTPUT_DIR") or "_site")
    add_notebooks(site_dir, Path.cwd())
    remote = offline(site_dir, FIGURES_JS.read_text(encoding="utf-8"))
    if remote:
        sys.exit(
            f"{__file__}: the site must work offline, but these files load from the network:\n  "
            + "\n  ".join(remote)
        )


if __name__ == "__main__":
    main()
