"""The chapter list: ``_quarto.yml``'s ``book.chapters``, the one place that says which notebooks
make the book, read by :func:`cfbook.book.toc.read_book`."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from conftest import REPO

from cfbook.book.toc import CONFIG_FILE, HOME_PAGE, read_book


def _write_config(folder: Path, book: dict) -> None:
    (folder / CONFIG_FILE).write_text(yaml.safe_dump({"book": book}), encoding="utf-8")


def test_the_home_page_is_at_the_project_root_and_chapters_in_book() -> None:
    book = read_book(REPO)
    assert book.chapters[0] == HOME_PAGE == Path("index.ipynb")
    assert all(c.parent == Path("book") for c in book.chapters[1:])
    assert book.chapter("training.ipynb") == Path("book/training.ipynb")
    with pytest.raises(ValueError, match="lists no nothing.ipynb"):
        book.chapter("nothing.ipynb")


@pytest.mark.parametrize(
    ("chapters", "message"),
    [
        ([], "lists no chapters"),
        (["book/index.ipynb", "book/a.ipynb"], "home page index.ipynb at the project root"),
        (["index.qmd"], "home page index.ipynb"),
        (["index.ipynb", "../outside.ipynb"], "inside the project, got ../outside.ipynb$"),
        (["index.ipynb", "/abs/a.ipynb", "book/b.ipynb"], "inside the project, got /abs/a.ipynb$"),
        (["index.ipynb", "book/a.qmd"], "must be notebooks"),
        (["index.ipynb", "book/a.ipynb", "book/a.ipynb"], "listed twice"),
    ],
)
def test_read_book_rejects_a_bad_chapter_list(
    tmp_path: Path, chapters: list[str], message: str
) -> None:
    _write_config(tmp_path, {"chapters": chapters})
    with pytest.raises(ValueError, match=message):
        read_book(tmp_path)


def test_read_book_needs_the_config_and_flattens_parts(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=CONFIG_FILE):
        read_book(tmp_path)
    chapters = ["index.ipynb", {"part": "Two", "chapters": ["book/b.ipynb", "more/c.ipynb"]}]
    _write_config(tmp_path, {"chapters": chapters})
    assert [c.as_posix() for c in read_book(tmp_path).chapters] == [
        "index.ipynb",
        "book/b.ipynb",
        "more/c.ipynb",
    ]


def test_the_book_keeps_its_folder_and_title_and_names_a_default(tmp_path: Path) -> None:
    _write_config(tmp_path, {"title": "Tiny book", "chapters": ["index.ipynb"]})
    book = read_book(tmp_path)
    assert (book.project_dir, book.title, book.chapters) == (
        tmp_path,
        "Tiny book",
        (HOME_PAGE,),
    )
    _write_config(tmp_path, {"chapters": ["index.ipynb"]})
    assert read_book(tmp_path).title == "cfbook"
    assert (
        read_book(REPO).title == yaml.safe_load((REPO / CONFIG_FILE).read_text())["book"]["title"]
    )


def test_appendices_that_are_notebooks_follow_the_chapters(tmp_path: Path) -> None:
    # The API reference's .qmd pages are Quarto's alone; a notebook appendix is executed and
    # checked as a chapter is, after the chapters.
    appendices = ["book/details.ipynb", "reference/index.qmd"]
    _write_config(tmp_path, {"chapters": ["index.ipynb", "book/a.ipynb"], "appendices": appendices})
    assert read_book(tmp_path).chapters == tuple(
        map(Path, ("index.ipynb", "book/a.ipynb", "book/details.ipynb"))
    )
    # Quarto numbers the chapters from the home page on and letters the appendices, the
    # reference's pages included.
    assert read_book(tmp_path).numbers == {
        Path("index.ipynb"): "1",
        Path("book/a.ipynb"): "2",
        Path("book/details.ipynb"): "A",
    }
    _write_config(tmp_path, {"chapters": ["index.ipynb"], "appendices": appendices[::-1]})
    assert read_book(tmp_path).numbers[Path("book/details.ipynb")] == "B"
    book = read_book(REPO)
    appendices = [c for c in book.chapters if not book.numbers[c].isdigit()]
    assert Path("book/paper_details.ipynb") in appendices
    assert book.chapters[-len(appendices) :] == tuple(appendices)
