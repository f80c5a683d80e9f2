"""The chapter notebooks: the structure the pipeline relies on, and nbval over the chapters whose
stored outputs it compares.

nbval runs in a subprocess on the chapters only, so a plain ``pytest tests/`` never collects the
notebooks twice (``testpaths`` in pyproject.toml keeps the default run on ``tests/``).
"""

from __future__ import annotations

import ast
import builtins
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from cfbook.book.prose import PROSE_BUDGET, prose_words
from cfbook.book.site.nbconvert import cell_options
from cfbook.book.toc import HOME_PAGE, read_book

ROOT = Path(__file__).resolve().parents[1]
# Every chapter _quarto.yml lists, by name: a chapter added there is checked without edits here.
BOOK = read_book(ROOT)
CHAPTERS = {c.stem: c for c in BOOK.chapters}
# The chapters a reader works through (the numbered ones; not the appendices), each of which ends
# with a summary and exercises.
MAIN_CHAPTERS = {c.stem for c in BOOK.chapters if BOOK.numbers[c].isdigit()}
# nbval compares a cell's stored output when the cell carries this tag (a tag, not nbval's
# comment marker, so that no test machinery shows on the page).
CHECK_TAG = "nbval-check-output"
PARAMETERS = ("CT_MODE", "profile", "data_dir")
# Deterministic cells whose stored output nbval compares: (chapter, code that must be in one).
EXPECTED_CHECKS = {
    "setup": ("torch.equal(a, b)", "profile_table(PROFILES.values())"),
    "gpu": ("(x**2).sum()",),
    "data_model": (
        "data.x.shape[1]",
        "data.domain",
        "print(model.conv1)",
        "count_parameters(model)",
        "count_parameters(mlp())",
        "tuple(logits.shape)",
    ),
    "own_data": ('print(f"one-hot groups of {[len(g) for g in groups]} columns")',),
    "scaling": ("DeviceLoader(x, y, 3", "slurm_dry_run(2, 4"),
}


def read(chapter: str) -> nbformat.NotebookNode:
    return nbformat.read(ROOT / CHAPTERS[chapter], as_version=4)


def code_cells(nb: nbformat.NotebookNode) -> list[nbformat.NotebookNode]:
    return [cell for cell in nb.cells if cell.cell_type == "code"]


def _assigned(cell: nbformat.NotebookNode) -> dict[str, object]:
    """The names a parameters cell assigns and their values; anything else in it is an error."""
    values = {}
    for statement in ast.parse(cell.source).body:
        assert isinstance(statement, ast.Assign) and len(statement.targets) == 1, (
            f"a parameters cell holds only assignments, not {ast.unparse(statement)!r}"
        )
        values[statement.targets[0].id] = ast.literal_eval(statement.value)
    return values


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_chapter_starts_with_a_title_one_parameters_cell_and_setup(chapter):
    nb = read(chapter)
    nbformat.validate(nb)
    assert nb.metadata.kernelspec.name == "python3"
    first = nb.cells[0]
    assert first.cell_type == "markdown" and first.source.startswith("# "), (
        f"{chapter}: Quarto takes the chapter title from a leading '# Title' cell"
    )
    cells = code_cells(nb)
    tags = [cell.metadata.get("tags", []) for cell in cells]
    assert "parameters" in tags[0], f"{chapter}: the first code cell must be tagged 'parameters'"
    assert sum("parameters" in t for t in tags) == 1, f"{chapter}: one 'parameters' cell only"
    assert not any("injected-parameters" in t for t in tags), (
        f"{chapter}: a papermill injected-parameters cell is committed; it would override the "
        "environment (CFBOOK_PROFILE) when CI runs the book"
    )
    params = _assigned(cells[0])
    assert {"CT_MODE", "profile"} <= set(params) <= set(PARAMETERS), f"{chapter}: {params}"
    assert all(value is None for value in params.values()), f"{chapter}: {params}"
    # Then the one setup call, passing exactly the parameters the chapter has.
    call = ", ".join(
        ["CT_MODE", "profile"] + (["data_dir=data_dir"] if "data_dir" in params else [])
    )
    _, source = cell_options(cells[1].source)
    assert source == f"from cfbook.book.chapter import setup\n\nchapter = setup({call})"
    later = "\n".join(cell.source for cell in cells[2:])
    for machinery in ("resolve_parameters(", "= detect_device()"):
        assert machinery not in later, f"{chapter}: repeats the setup machinery ({machinery})"
    if "data_dir" in params:  # a parameter only where the chapter reads or writes logs
        assert "chapter.data_dir" in later, f"{chapter}: takes data_dir but never uses it"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_stored_outputs_are_clean(chapter):
    for cell in code_cells(read(chapter)):
        for output in cell.get("outputs", []):
            assert output.output_type != "error", f"{chapter}: stored error output"
            html = output.get("data", {}).get("text/html", "")
            assert "plotly.js v" not in html and len(html) < 500_000, (
                f"{chapter}: plotly.js is inlined; display figures with "
                "cfbook.book.figures.training.show"
            )


@pytest.mark.parametrize("chapter", sorted(EXPECTED_CHECKS))
def test_expected_cells_are_checked_and_executed(chapter):
    checked = [c for c in code_cells(read(chapter)) if CHECK_TAG in c.metadata.get("tags", [])]
    for snippet in EXPECTED_CHECKS[chapter]:
        matches = [c for c in checked if snippet in c.source]
        assert matches, f"{chapter}: no {CHECK_TAG} cell contains {snippet!r}"
        assert all(c.outputs for c in matches), (
            f"{chapter}: the {CHECK_TAG} cell with {snippet!r} has no stored output; "
            "execute the chapter (python -m cfbook.commands.pipeline) before committing"
        )


def checked_chapters() -> list[Path]:
    """The chapters with a cell whose stored output nbval compares, and the home page, whose
    quick start a reader runs first. The others would only be executed, which the pipeline's
    smoke build (test_pipeline.py) does already."""
    return [
        path
        for name, path in CHAPTERS.items()
        if path == HOME_PAGE
        or any(CHECK_TAG in c.metadata.get("tags", []) for c in code_cells(read(name)))
    ]


@pytest.mark.slow
def test_nbval_runs_the_book():
    env = {**os.environ, "CFBOOK_PROFILE": "smoke", "CFBOOK_DEVICE": "cpu", "CT_MODE": "plot"}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--nbval-lax",
            "--nbval-current-env",
            "-p",
            "no:cacheprovider",
            "-q",
            *(str(chapter) for chapter in checked_chapters()),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    assert " passed" in result.stdout


def _names(source: str) -> tuple[set[str], set[str]]:
    """The names a cell defines (imports, assignments, functions) and the names it reads."""
    lines = [line for line in source.splitlines() if not line.startswith(("#|", "%"))]
    tree = ast.parse("\n".join(lines))
    defined, used = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            defined |= {alias.asname or alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.FunctionDef):
            defined.add(node.name)
        elif isinstance(node, ast.Name):
            (defined if isinstance(node.ctx, ast.Store) else used).add(node.id)
    return defined, used


def test_the_training_stage_needs_no_demonstration_cell():
    """A training stage runs the training chapter without its ``demo`` cells, so no other cell may
    read a name that only a demonstration cell defines."""
    stage = set(dir(builtins)) | {"display", "get_ipython"}
    demo: set[str] = set()
    for cell in code_cells(read("training")):
        defined, used = _names(cell.source)
        if "demo" in cell.metadata.get("tags", []):
            demo |= defined
            continue
        missing = (used - defined - stage) & demo
        assert not missing, f"a stage cell reads {sorted(missing)}, set only by a demo cell"
        stage |= defined
    assert demo, "the training chapter has no demonstration cell any more"


def test_the_book_s_prose_fits_its_budget():
    """Counted from the executed notebooks, generated text included."""
    words = {name: prose_words(read(name)) for name in CHAPTERS}
    assert sum(words.values()) <= PROSE_BUDGET, sorted(words.items(), key=lambda kv: -kv[1])


def test_prose_words_counts_text_and_output_but_not_code_or_tables():
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell("# Two words\n\n```python\nx = 1 + 2\n```\n| a | b |"),
        nbformat.v4.new_code_cell("print('not counted')"),
    ]
    nb.cells[1].outputs = [
        nbformat.v4.new_output("stream", name="stdout", text="three more words\n"),
        nbformat.v4.new_output("stream", name="stderr", text="a warning, not prose\n"),
        nbformat.v4.new_output("display_data", data={"text/markdown": "**Bold** one\n|x|y|"}),
    ]
    assert prose_words(nb) == 2 + 3 + 2


@pytest.mark.parametrize("chapter", [c for c in CHAPTERS if c in MAIN_CHAPTERS])
def test_each_chapter_ends_with_a_summary_and_exercises_with_folded_hints(chapter):
    headings = [
        line
        for cell in read(chapter).cells
        if cell.cell_type == "markdown"
        for line in cell.source.splitlines()
        if line.startswith("## ")
    ]
    assert headings[-2:] == ["## Summary", "## Exercises"], f"{chapter}: {headings[-3:]}"
    exercises = read(chapter).cells[-1].source
    assert exercises.count("<details><summary>Hint</summary>") >= 2, chapter
