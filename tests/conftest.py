"""Shared fixtures: the smoke-profile book is built once per session and reused by several tests.

Building it starts ten kernels (each imports torch), so test_pipeline and test_site share one
build instead of paying for it twice.
"""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class SmokeBook:
    """Where the session's smoke build put things, and what the pipeline printed."""

    data_dir: Path
    build_dir: Path
    site_dir: Path
    exit_code: int
    output: str

    def cli_args(self, *extra: str) -> list[str]:
        """Arguments that point the pipeline at this build's folders."""
        return [
            "--profile", "smoke", "--project-dir", str(REPO), "--data-dir", str(self.data_dir),
            "--build-dir", str(self.build_dir), "--site-dir", str(self.site_dir),
            # The tests know the nbconvert layout; the Quarto hand-off has its own test.
            "--site-builder", "nbconvert", "--threads", "1", *extra,
        ]


def make_data_dir(root: Path) -> Path:
    """A fresh data folder (so no real log is touched) that still sees the shipped MNIST files."""
    data_dir = root / "data"
    data_dir.mkdir()
    (data_dir / "MNIST").symlink_to(REPO / "data" / "MNIST", target_is_directory=True)
    return data_dir


@pytest.fixture(scope="session")
def smoke_book(tmp_path_factory: pytest.TempPathFactory) -> SmokeBook:
    """Run ``python -m cfbook.pipeline --profile smoke`` end to end into temporary folders."""
    from cfbook.pipeline import main

    root = tmp_path_factory.mktemp("smoke-book")
    book = SmokeBook(make_data_dir(root), root / "build", root / "site", -1, "")
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = main(book.cli_args())
    return SmokeBook(book.data_dir, book.build_dir, book.site_dir, code, out.getvalue())


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests that skip without CUDA carry the ``cuda`` marker, so ``pytest -m cuda`` (which
    scripts/gpu-check.sh runs) selects exactly them."""
    for item in items:
        reasons = [str(mark.kwargs.get("reason", "")) for mark in item.iter_markers("skipif")]
        if any("CUDA" in reason for reason in reasons):
            item.add_marker(pytest.mark.cuda)
