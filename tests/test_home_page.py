"""The home page's chapter table: every chapter of ``_quarto.yml``, in order, under its own title.

The table is written by hand (each row says what the chapter teaches), so this test is what keeps
it in step with the chapter list and with the chapters' titles.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
import yaml
from conftest import REPO

from cfbook.book.site.nbconvert import chapter_title
from cfbook.book.toc import CONFIG_FILE, HOME_PAGE, read_book

# A table row that starts with a link: `| [Title](book/setup.ipynb) | what you learn |`.
_ROW_LINK = re.compile(r"^\|\s*\[(?P<title>[^\]]+)\]\((?P<target>[^)\s]+)\)\s*\|")


def table_links(home_page: nbformat.NotebookNode) -> list[tuple[str, str]]:
    """(text, target) of every table row that starts with a link, in the page's order."""
    return [
        (match["title"].strip(), match["target"])
        for cell in home_page.cells
        if cell.cell_type == "markdown"
        for line in cell.source.splitlines()
        if (match := _ROW_LINK.match(line.strip()))
    ]


def chapter_table_problems(project_dir: Path) -> list[str]:
    """How the home page's chapter table differs from the chapters ``_quarto.yml`` lists."""
    book = read_book(project_dir)
    expected = [
        (chapter_title(nbformat.read(project_dir / c, as_version=4), c.stem), c.as_posix())
        for c in book.chapters
        if c != HOME_PAGE
    ]
    found = table_links(nbformat.read(project_dir / HOME_PAGE, as_version=4))
    problems = []
    for i in range(max(len(expected), len(found))):
        want = expected[i] if i < len(expected) else None
        got = found[i] if i < len(found) else None
        if want != got:
            problems.append(f"row {i + 1}: expected {want}, found {got}")
    return problems


def test_home_page_table_lists_every_chapter_in_order_under_its_own_title() -> None:
    problems = chapter_table_problems(REPO)
    assert problems == [], (
        f"{HOME_PAGE}'s chapter table must link every chapter of {CONFIG_FILE} but the home "
        "page, in order, as [its own title](its notebook):\n" + "\n".join(problems)
    )


def test_table_links_are_notebook_paths_both_site_builders_resolve() -> None:
    # Quarto and the nbconvert fallback both turn a link to a chapter's .ipynb into its page.
    for title, target in table_links(nbformat.read(REPO / HOME_PAGE, as_version=4)):
        assert target.endswith(".ipynb") and "#" not in target, (title, target)
        assert (REPO / target).is_file(), f"{title}: {target} does not exist"


def _project(root: Path, table: list[str]) -> Path:
    """A home page with the given table rows and two chapters titled First and Second."""
    (root / "book").mkdir(parents=True)
    chapters = ["index.ipynb", "book/first.ipynb", "book/second.ipynb"]
    (root / CONFIG_FILE).write_text(yaml.safe_dump({"book": {"chapters": chapters}}))
    pages = {
        "index": "# Home\n\n| Chapter | What |\n|---|---|\n" + "\n".join(table),
        "book/first": "# First\n\nText.",
        "book/second": "# Second\n\n## Not the title",
    }
    for stem, source in pages.items():
        nb = nbformat.v4.new_notebook()
        nb.cells = [nbformat.v4.new_markdown_cell(source)]
        nbformat.write(nb, root / f"{stem}.ipynb")
    return root


FIRST = "| [First](book/first.ipynb) | a |"
SECOND = "| [Second](book/second.ipynb) | b |"


@pytest.mark.parametrize(
    ("table", "problem"),
    [
        ([FIRST, SECOND], None),
        ([FIRST], "row 2: expected ('Second', 'book/second.ipynb'), found None"),
        ([SECOND, FIRST], "row 1: expected ('First', 'book/first.ipynb'), found ('Second'"),
        ([FIRST, "| [Two](book/second.ipynb) | b |"], "found ('Two', 'book/second.ipynb')"),
        ([FIRST, "| [Second](book/second.html) | b |"], "found ('Second', 'book/second.html')"),
        ([FIRST, SECOND, "| [Third](book/third.ipynb) | c |"], "row 3: expected None"),
    ],
    ids=["complete", "missing", "out-of-order", "misnamed", "html-link", "extra"],
)
def test_the_check_catches_a_missing_misplaced_or_misnamed_chapter(
    tmp_path: Path, table: list[str], problem: str | None
) -> None:
    problems = chapter_table_problems(_project(tmp_path, table))
    if problem is None:
        assert problems == []
    else:
        assert any(problem in p for p in problems), problems
