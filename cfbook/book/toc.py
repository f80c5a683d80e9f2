"""The chapter list of ``_quarto.yml``: the one place that says which notebooks make the book."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

__all__ = ["CONFIG_FILE", "HOME_PAGE", "Book", "read_book"]

CONFIG_FILE = "_quarto.yml"
# Quarto takes a book's home page only from an ``index.*`` file at the project root. A notebook
# rather than index.qmd: the pipeline executes it like every chapter (it prints what the book was
# built with), nbval checks it, and the nbconvert fallback, which reads notebooks, needs no more.
HOME_PAGE = Path("index.ipynb")


@dataclass(frozen=True)
class Book:
    """What ``_quarto.yml`` says about the book: its title and notebooks, in reading order: the
    chapters, then the appendices that are notebooks (the API reference's pages are not)."""

    project_dir: Path
    title: str
    chapters: tuple[Path, ...]  # relative to project_dir: index.ipynb, book/setup.ipynb, ...
    # Each notebook's number as Quarto gives it: the chapters 1, 2, ... (the home page is 1), an
    # appendix its letter among all appendices, the API reference's pages included.
    numbers: dict[Path, str] = field(default_factory=dict)

    def chapter(self, name: str) -> Path:
        """The chapter whose file is called ``name`` (e.g. ``training.ipynb``)."""
        for chapter in self.chapters:
            if chapter.name == name:
                return chapter
        raise ValueError(f"{self.project_dir / CONFIG_FILE} lists no {name} chapter")


def _flatten_chapters(entries: list[Any]) -> list[str]:
    # Quarto allows `- part: ...` entries with their own `chapters:` list.
    files: list[str] = []
    for entry in entries:
        if isinstance(entry, dict):
            files.extend(_flatten_chapters(entry.get("chapters") or []))
        else:
            files.append(str(entry))
    return files


def read_book(project_dir: str | Path) -> Book:
    """Parse ``<project_dir>/_quarto.yml``; errors say what is wrong with the chapter list."""
    project_dir = Path(project_dir)
    config_path = project_dir / CONFIG_FILE
    if not config_path.is_file():
        raise FileNotFoundError(f"{config_path} not found: pass the folder holding {CONFIG_FILE}")
    config = yaml.safe_load(config_path.read_text(encoding="utf-8")) or {}
    book = config.get("book") or {}
    chapters = [Path(c) for c in _flatten_chapters(book.get("chapters") or [])]
    if not chapters:
        raise ValueError(f"{config_path}: book.chapters lists no chapters")
    appendices = [Path(a) for a in _flatten_chapters(book.get("appendices") or [])]
    numbers = {c: str(i) for i, c in enumerate(chapters, start=1)}
    numbers |= {a: chr(ord("A") + i) for i, a in enumerate(appendices) if a.suffix == ".ipynb"}
    chapters += [a for a in appendices if a.suffix == ".ipynb"]
    if chapters[0] != HOME_PAGE:
        raise ValueError(
            f"{config_path}: the first chapter must be the home page {HOME_PAGE} at the project "
            f"root (Quarto accepts no other place), not {chapters[0]}"
        )
    outside = [c for c in chapters if c.is_absolute() or ".." in c.parts]
    if outside or any(c.suffix != ".ipynb" for c in chapters):
        raise ValueError(
            f"{config_path}: chapters must be notebooks inside the project, got "
            + ", ".join(map(str, outside or chapters))
        )
    if len(set(chapters)) != len(chapters):
        raise ValueError(f"{config_path}: a chapter is listed twice")
    return Book(project_dir, str(book.get("title") or "cfbook"), tuple(chapters), numbers)
