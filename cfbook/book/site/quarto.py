"""Render the book with the Quarto CLI.

``_quarto.yml`` does the work: its pre-render script provides ``plotly.min.js`` and its
post-render script keeps the pages offline, so a plain ``quarto render`` in the project builds the
same site. This module finds Quarto, names its version, and renders either the project itself or,
when the executed chapters live elsewhere (``--build-dir``), a staged copy of the project.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from cfbook.book.reference import write_reference
from cfbook.book.toc import Book

__all__ = ["find_quarto", "quarto_version", "render_with_quarto"]


def find_quarto() -> str | None:
    """The ``quarto`` on PATH (from quarto.org, conda, or ``scripts/quarto.sh``), if any."""
    return shutil.which("quarto")


def quarto_version(quarto: str) -> str:
    """What ``quarto --version`` prints, e.g. ``1.7.34``."""
    result = subprocess.run([quarto, "--version"], capture_output=True, text=True, check=True)
    return result.stdout.strip()


def _stage(book: Book, source_dir: Path, stage: Path) -> None:
    """Fill ``stage`` with the project: chapters copied from ``source_dir``, the rest linked.

    Hidden entries (``.git``, ``.venv``, ``.quarto``) stay out: Quarto needs none of them.
    """
    chapters = set(book.chapters)
    folders = {parent for chapter in chapters for parent in chapter.parents} - {Path(".")}

    def fill(folder: Path) -> None:
        for entry in sorted((book.project_dir / folder).iterdir()):
            path = folder / entry.name
            if entry.name.startswith(".") or path in chapters:
                continue
            if path in folders:
                (stage / path).mkdir()
                fill(path)
            else:
                (stage / path).symlink_to(entry.resolve(), target_is_directory=entry.is_dir())

    fill(Path("."))
    for chapter in book.chapters:
        (stage / chapter).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source_dir / chapter, stage / chapter)


def _run(quarto: str, project_dir: Path, site_dir: Path) -> None:
    # Quarto runs the project's Python scripts with $QUARTO_PYTHON, else the python3 on PATH;
    # this interpreter is the one that certainly has plotly.
    env = {"QUARTO_PYTHON": sys.executable, **os.environ}
    print(f"Rendering the book with {quarto} into {site_dir}", flush=True)
    subprocess.run(
        [quarto, "render", str(project_dir), "--output-dir", str(site_dir)], check=True, env=env
    )


def render_with_quarto(quarto: str, book: Book, source_dir: Path, site_dir: Path) -> Path:
    """``quarto render`` the chapters of ``source_dir`` into ``site_dir``; returns the home page.
    The API reference's pages are written again from the docstrings first."""
    write_reference(book.project_dir)
    if source_dir.resolve() == book.project_dir.resolve():
        _run(quarto, book.project_dir, site_dir)
    else:
        with tempfile.TemporaryDirectory(prefix="cfbook-quarto-") as tmp:
            _stage(book, source_dir, Path(tmp))
            _run(quarto, Path(tmp), site_dir)
    return site_dir / "index.html"
