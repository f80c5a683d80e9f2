"""Shared fixtures: the smoke-profile book (built once per session), Chromium and Quarto.

Building the smoke book starts ten kernels (each imports torch), so test_pipeline and the site
tests share one build instead of paying for it twice.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import torch
from torch import nn

if TYPE_CHECKING:  # playwright is the browser extra: only the browser tests need it.
    from playwright.sync_api import Browser

REPO = Path(__file__).resolve().parents[1]
# The offline Quarto installer that scripts/quarto.sh uses; CI has it beside the clone.
QUARTO_INSTALLER = REPO.parent / "shared" / "tools" / "quarto"
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def fresh_python(code: str) -> str:
    """What ``code`` prints in a fresh Python process (what a new session imports, say)."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return done.stdout.strip()


def scaled_mlp(n_features: int, n_classes: int, seed: int = 0, scale: float = 3.0) -> nn.Module:
    """A seeded random MLP (one hidden layer of 16) with its weights scaled up, so that most
    counterfactual searches on it converge."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(n_features, 16), nn.ReLU(), nn.Linear(16, n_classes))
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(scale)
    return model


@dataclass(frozen=True)
class SmokeBook:
    """Where the session's smoke build put things, and what the pipeline printed."""

    data_dir: Path
    build_dir: Path
    site_dir: Path
    exit_code: int
    output: str

    def cli_args(self, *extra: str) -> list[str]:
        """Arguments that point the pipeline at this build's folders (site: Quarto if on PATH)."""
        return [
            "--profile",
            "smoke",
            "--project-dir",
            str(REPO),
            "--data-dir",
            str(self.data_dir),
            "--build-dir",
            str(self.build_dir),
            "--site-dir",
            str(self.site_dir),
            "--threads",
            "1",
            *extra,
        ]


def make_data_dir(root: Path) -> Path:
    """A fresh data folder (so no real log is touched) that still sees the shipped data sets:
    MNIST, the tabular files ("CT on your own data" reads Adult), the shipped `tutorial` and
    `cpu` logs (the main example draws the GPU run beside the `cpu` profile), the grid's results
    and the main example's weights."""
    data_dir = root / "data"
    data_dir.mkdir()
    for shipped in ("MNIST", "tabular", "tutorial", "cpu", "reproduction", "main_example"):
        (data_dir / shipped).symlink_to(REPO / "data" / shipped, target_is_directory=True)
    return data_dir


@pytest.fixture(scope="session")
def smoke_book(tmp_path_factory: pytest.TempPathFactory) -> SmokeBook:
    """Run ``python -m cfbook.commands.pipeline --profile smoke`` end to end into temporary
    folders."""
    from cfbook.commands.pipeline import main

    root = tmp_path_factory.mktemp("smoke-book")
    book = SmokeBook(make_data_dir(root), root / "build", root / "site", -1, "")
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = main(book.cli_args())
    return SmokeBook(book.data_dir, book.build_dir, book.site_dir, code, out.getvalue())


def _required_on_ci(what: str, reason: str) -> None:
    """Fail on CI, where the tool must be there; skip elsewhere, saying how to get it."""
    if os.environ.get("CI"):
        pytest.fail(f"{what} is missing on CI: {reason}")
    pytest.skip(f"{what} not available: {reason}")


@pytest.fixture(scope="session")
def quarto() -> str:
    """The ``quarto`` on PATH; ``bash scripts/test.sh`` puts one there (scripts/quarto.sh)."""
    found = shutil.which("quarto")
    if found is None:
        how = "run `bash scripts/test.sh`, or `source scripts/quarto.sh` before pytest"
        if QUARTO_INSTALLER.is_dir():
            _required_on_ci("quarto", f"{QUARTO_INSTALLER} exists; {how}")
        pytest.skip(f"quarto is not on PATH and {QUARTO_INSTALLER} is missing; {how}")
    return found


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    """Debian's Chromium driven by playwright; never downloads a browser."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _required_on_ci("playwright", "install the browser extra: pip install '.[browser]'")
    if not CHROMIUM.exists():
        _required_on_ci(str(CHROMIUM), "install Debian's chromium package")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield browser
        browser.close()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests that skip without CUDA carry the ``cuda`` marker, so ``pytest -m cuda`` (which
    scripts/gpu-check.sh runs) selects exactly them; the cases of a test parametrized over
    ``compile`` that run the compiled executor carry ``compiles``."""
    for item in items:
        reasons = [str(mark.kwargs.get("reason", "")) for mark in item.iter_markers("skipif")]
        if any("CUDA" in reason for reason in reasons):
            item.add_marker(pytest.mark.cuda)
        callspec = getattr(item, "callspec", None)
        if callspec is not None and callspec.params.get("compile") is True:
            item.add_marker(pytest.mark.compiles)


def hand_made_microscope(first_level: int, prob: float, valid: bool) -> dict:
    """Two hand-made searches of an empty 28 x 28 image, as the microscope stores them: the
    baseline's jumps in one step from ``first_level`` to a target probability ``prob`` (its
    adversarial example is the factual), CT's takes three, leaving the epsilon box after one."""

    def images(*levels: int) -> list[str]:
        return [bytes([v] * 784).hex() for v in levels]

    return {
        "meta": {
            "factual": 4,
            "target": 9,
            "index": 7,
            "domain": [-1.0, 1.0],
            "search": {"tau": 0.75, "epsilon": 0.3, "maxiter": 4},
        },
        "searches": {
            "vanilla": {
                "path": images(first_level, 200),
                "target_prob": [0.1, prob, prob, prob, prob],
                "distance": [0.0, 1.57, 1.57, 1.57, 1.57],
                "counterfactual_at": 1,
                "adversarial_at": 0,
                "valid": valid,
            },
            "full": {
                "path": images(0, 20, 60, 100),
                "target_prob": [0.1, 0.2, 0.5, 0.8, 0.8],
                "distance": [0.0, 0.16, 0.47, 0.78, 0.78],
                "counterfactual_at": 3,
                "adversarial_at": 1,
                "valid": True,
            },
        },
    }
