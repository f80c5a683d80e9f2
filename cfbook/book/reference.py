"""The book's API reference: pages written from cfbook's docstrings by quartodoc.

``_quarto.yml``'s ``quartodoc:`` section lists the pages and what each documents; its
``book.appendices`` lists the same pages, so that they sit in the site's navigation. The pages
are committed (a plain ``quarto render`` in a fresh clone needs them); the pipeline writes them
again before it renders, and a test checks that the committed ones are what the docstrings give.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from cfbook.book.toc import CONFIG_FILE

__all__ = ["write_reference"]


@contextmanager
def _inside(folder: Path) -> Iterator[None]:
    # quartodoc writes its pages relative to the working directory.
    before = Path.cwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(before)


def write_reference(project_dir: str | Path) -> list[Path]:
    """Write the reference pages into ``<project_dir>/<quartodoc dir>``; returns their paths.

    Each page's first heading (quartodoc writes every heading at the renderer's level) becomes
    the page's title, so that each page is one appendix of the book with its objects as
    sections."""
    try:
        from quartodoc import Builder
    except ImportError as err:
        raise ImportError(
            "the API reference needs quartodoc: pip install 'cfbook[book]' (or quartodoc)"
        ) from err
    project_dir = Path(project_dir).resolve()
    with _inside(project_dir):
        builder = Builder.from_quarto_config(CONFIG_FILE)
        builder.build()
        folder = project_dir / builder.dir
    pages = sorted(folder.glob("*.qmd"))
    for page in pages:
        text = page.read_text(encoding="utf-8")
        if text.startswith("## "):
            page.write_text(text[1:], encoding="utf-8")
    return pages
