"""Turn the executed chapter notebooks into a website that works offline.

``_quarto.yml`` is the single source of the chapter list. With Quarto on PATH the site is
``quarto render``; without it, nbconvert renders the same executed notebooks into the same page
layout with a sidebar and prev/next links, so the book can still be read (and tested) anywhere.
Either way every page loads one local ``plotly.min.js`` and nothing from the network.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cfbook.book.site.nbconvert import PLOTLY_JS, render_with_nbconvert
from cfbook.book.site.quarto import find_quarto, quarto_version, render_with_quarto
from cfbook.book.toc import CONFIG_FILE, Book, read_book

__all__ = ["CONFIG_FILE", "PLOTLY_JS", "Book", "Site", "build_site", "read_book"]


@dataclass(frozen=True)
class Site:
    """A built website: its home page and the tool that built it."""

    index: Path
    builder: str  # "Quarto 1.7.34" or "nbconvert"


def build_site(
    project_dir: str | Path,
    site_dir: str | Path,
    *,
    source_dir: str | Path | None = None,
    use_quarto: bool | None = None,
) -> Site:
    """Build the website from executed chapters.

    ``source_dir`` holds the executed notebooks at the paths ``_quarto.yml`` lists (default: the
    project itself). ``use_quarto=None`` uses Quarto when it is on PATH and nbconvert otherwise.
    """
    book = read_book(project_dir)
    source_dir = Path(source_dir) if source_dir is not None else book.project_dir
    site_dir = Path(site_dir).resolve()
    missing = [str(c) for c in book.chapters if not (source_dir / c).is_file()]
    if missing:
        raise FileNotFoundError(f"chapters missing from {source_dir}: {', '.join(missing)}")
    quarto = find_quarto() if use_quarto is not False else None
    if use_quarto and quarto is None:
        raise FileNotFoundError("use_quarto=True but `quarto` is not on PATH; install Quarto 1.7+")
    if quarto is not None:
        index = render_with_quarto(quarto, book, source_dir, site_dir)
        return Site(index, f"Quarto {quarto_version(quarto)}")
    if use_quarto is None:
        print("Quarto not found on PATH: building the site with nbconvert instead.")
    return Site(render_with_nbconvert(book, source_dir, site_dir), "nbconvert")
