"""The API reference (``cfbook.book.reference``): the committed pages are what the docstrings
give, every page is in the book's navigation, and every object listed has its section."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import yaml

from cfbook.book.reference import write_reference

REPO = Path(__file__).resolve().parents[1]
CONFIG = yaml.safe_load((REPO / "_quarto.yml").read_text(encoding="utf-8"))
FOLDER = REPO / CONFIG["quartodoc"]["dir"]


def _listed() -> dict[str, list[str]]:
    """Each page of the quartodoc section and the objects it documents."""
    return {
        item["path"]: item["contents"]
        for section in CONFIG["quartodoc"]["sections"]
        for item in section["contents"]
    }


def test_the_committed_pages_are_what_the_docstrings_give(tmp_path: Path) -> None:
    shutil.copy(REPO / "_quarto.yml", tmp_path / "_quarto.yml")
    written = write_reference(tmp_path)
    committed = sorted(FOLDER.glob("*.qmd"))
    assert [p.name for p in written] == [p.name for p in committed]
    for fresh, page in zip(written, committed, strict=True):
        assert fresh.read_text() == page.read_text(), (
            f"{page.relative_to(REPO)} is stale: run "
            "python -c 'from cfbook.book.reference import write_reference; write_reference(\".\")'"
        )


def test_every_page_is_an_appendix_with_one_title_and_a_section_per_object() -> None:
    # The reference's pages, after the book's notebook appendices.
    appendices = [a for a in CONFIG["book"]["appendices"] if not a.endswith(".ipynb")]
    assert appendices == [f"{FOLDER.name}/index.qmd"] + [
        f"{FOLDER.name}/{path}.qmd" for path in _listed()
    ]
    for path, objects in _listed().items():
        text = (FOLDER / f"{path}.qmd").read_text(encoding="utf-8")
        assert len(re.findall(r"^# ", text, re.M)) == 1, path  # the page's title only
        for name in objects:
            anchor = name if name.startswith("cfbook.") else f"cfbook.{name}"
            assert re.search(rf"^## \S+ \{{ #{re.escape(anchor)} \}}$", text, re.M), (path, name)
        # Sphinx roles are not Markdown: the docstrings use plain code spans.
        assert not re.search(r":(func|class|meth|attr|mod):`", text), path
