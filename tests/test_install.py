"""``pip install .`` without extras gives a library that trains, searches and evaluates, with
none of the book's, the grid's or the tests' dependencies installed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Run inside the fresh environment: what a researcher's training script does.
SCRIPT = r"""
import importlib.util, sys
absent = ("papermill", "plotly", "nbformat", "nbconvert", "yaml", "captum", "sklearn", "pytest")
found = [m for m in absent if importlib.util.find_spec(m) is not None]
assert not found, f"installed without being asked for: {found}"
import torch
from cfbook import (
    DeviceLoader, FullObjective, NativeGenerator, PaperProtocol, VanillaObjective,
    counterfactual_training, mlp, paper_evaluate,
)
from cfbook.data import load_moons
try:
    load_moons(generator="sklearn")
    raise AssertionError("sklearn's generator ran without sklearn")
except ImportError as err:
    assert "cfbook[paper]" in str(err), err
data = load_moons(device="cpu")
x, y = data.x[:300], data.y[:300]
models = {}
for objective in (FullObjective(), VanillaObjective()):
    torch.manual_seed(0)
    model = mlp(2, (16,), 2)
    model, log = counterfactual_training(
        objective, model, NativeGenerator(step_size=0.5, lambda_cost=0.001),
        DeviceLoader(x, y, 50), torch.optim.Adam(model.parameters(), 1e-2), device="cpu",
        nepochs=3, domain=data.domain, nce=30, verbose=0,
    )
    models[objective.name] = model
search = NativeGenerator().generate(models["FullObjective"], x[:5], 1 - y[:5], domain=data.domain)
assert search.counterfactual.shape == (5, 2)
result = paper_evaluate(
    models, data.x_test, data.y_test, PaperProtocol(rounds=3, individuals=4), domain=data.domain
)
assert len(result["per_round"]["FullObjective"]["ip"]) == 3
print("trained, searched and evaluated with", sys.prefix)
"""


def _copy_project(to: Path) -> Path:
    """The files ``pip install .`` builds from, away from the checkout (no build/ left in it)."""
    to.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, to / name)
    shutil.copytree(ROOT / "cfbook", to / "cfbook", ignore=shutil.ignore_patterns("__pycache__"))
    return to


@pytest.mark.slow
def test_the_library_installs_and_runs_without_extras(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    pip = [str(python), "-m", "pip", "install", "--quiet", "--no-input"]
    try:
        # The torch this checkout tests with (a quick install from the package cache or mirror),
        # then the package alone.
        subprocess.run(
            [*pip, f"torch=={version('torch')}", f"torchvision=={version('torchvision')}"],
            check=True,
        )
        subprocess.run([*pip, str(_copy_project(tmp_path / "project"))], check=True)
        done = subprocess.run(
            [str(python), "-c", SCRIPT], capture_output=True, text=True, cwd=tmp_path
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert "trained, searched and evaluated" in done.stdout
    finally:
        shutil.rmtree(venv, ignore_errors=True)  # gigabytes of torch


def test_the_tests_are_collected_without_the_browser_extra(tmp_path: Path) -> None:
    """Only the browser tests need playwright: with it unimportable, every test module still
    imports (the browser fixture then skips off CI and fails on it)."""
    blocked = tmp_path / "playwright"
    blocked.mkdir()
    (blocked / "__init__.py").write_text('raise ImportError("the browser extra is not installed")')
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "error" not in run.stdout.lower().splitlines()[-1]
    assert "tests collected" in run.stdout
