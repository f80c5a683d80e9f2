"""The chapter notebooks: structure the pipeline relies on, and nbval over the executed book.

nbval runs in a subprocess on ``book/`` only, so a plain ``pytest tests/`` never collects the
notebooks twice (``testpaths`` in pyproject.toml keeps the default run on ``tests/``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
CHAPTERS = (
    "index", "setup", "gpu", "memory", "mnist", "resnet", "training", "comparison", "scaling",
)
CHECK_MARK = "# NBVAL_CHECK_OUTPUT"
# Deterministic cells whose stored output nbval compares: (chapter, code that must be in one).
EXPECTED_CHECKS = {
    "setup": ("torch.equal(a, b)", "profile_table(PROFILES.values())"),
    "gpu": ("(x**2).sum()",),
    "mnist": ("data.x.shape[1]", "data.domain"),
    "scaling": ("DeviceLoader(x, y, 3", "slurm_dry_run(2, 4"),
    "resnet": (
        "print(model.net.conv1)",
        "count_parameters(model)",
        "count_parameters(mlp())",
        "tuple(logits.shape)",
        "except ValueError",
    ),
}


def read(chapter: str) -> nbformat.NotebookNode:
    return nbformat.read(BOOK / f"{chapter}.ipynb", as_version=4)


def code_cells(nb: nbformat.NotebookNode) -> list[nbformat.NotebookNode]:
    return [cell for cell in nb.cells if cell.cell_type == "code"]


def test_book_holds_exactly_the_chapters():
    assert sorted(p.stem for p in BOOK.glob("*.ipynb")) == sorted(CHAPTERS)


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_chapter_structure(chapter):
    nb = read(chapter)
    nbformat.validate(nb)
    assert nb.metadata.kernelspec.name == "python3"
    first = nb.cells[0]
    assert first.cell_type == "markdown" and first.source.startswith("# "), (
        f"{chapter}: Quarto takes the chapter title from a leading '# Title' cell"
    )
    cells = code_cells(nb)
    tags = [cell.metadata.get("tags", []) for cell in cells]
    params = [i for i, t in enumerate(tags) if "parameters" in t]
    assert len(params) == 1, f"{chapter}: needs exactly one cell tagged 'parameters'"
    resolves = cells[params[0] + 1].source
    assert "resolve_parameters(CT_MODE, profile, device)" in resolves or (
        "setup(CT_MODE, profile" in resolves
    ), f"{chapter}: the cell after the parameters must resolve them"
    assert not any("injected-parameters" in t for t in tags), (
        f"{chapter}: a papermill injected-parameters cell is committed; it would override the "
        "environment (CFBOOK_PROFILE) when CI runs the book"
    )


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_parameters_cell_defaults_to_none(chapter):
    (cell,) = [c for c in code_cells(read(chapter)) if "parameters" in c.metadata.get("tags", [])]
    namespace: dict = {}
    exec(cell.source, namespace)  # the cell is three assignments
    assert {k: namespace[k] for k in ("CT_MODE", "profile", "data_dir")} == dict.fromkeys(
        ("CT_MODE", "profile", "data_dir")
    )


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_stored_outputs_are_clean(chapter):
    for cell in code_cells(read(chapter)):
        for output in cell.get("outputs", []):
            assert output.output_type != "error", f"{chapter}: stored error output"
            html = output.get("data", {}).get("text/html", "")
            assert "plotly.js v" not in html and len(html) < 500_000, (
                f"{chapter}: plotly.js is inlined; display figures with cfbook.figures.show"
            )


@pytest.mark.parametrize("chapter", sorted(EXPECTED_CHECKS))
def test_expected_cells_are_checked_and_executed(chapter):
    checked = [c for c in code_cells(read(chapter)) if c.source.startswith(CHECK_MARK)]
    for snippet in EXPECTED_CHECKS[chapter]:
        matches = [c for c in checked if snippet in c.source]
        assert matches, f"{chapter}: no {CHECK_MARK} cell contains {snippet!r}"
        assert all(c.outputs for c in matches), (
            f"{chapter}: the {CHECK_MARK} cell with {snippet!r} has no stored output; "
            "execute the chapter (python -m cfbook.pipeline) before committing"
        )


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
            "book/",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    assert " passed" in result.stdout
