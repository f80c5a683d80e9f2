"""``pip install .`` without extras gives a library that trains, searches and evaluates, with
none of the book's, the grid's or the tests' dependencies installed."""

from __future__ import annotations

import shutil
import subprocess
import sys
from importlib.metadata import distribution
from pathlib import Path

import pytest
from packaging.requirements import Requirement

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


def _link_dependencies(site: Path) -> None:
    """Link into ``site`` the distributions of the library's declared dependencies, and theirs,
    as this environment has them: an environment that reads ``site`` has them installed (pip
    sees them there), and nothing else."""
    declared = [Requirement(r) for r in distribution("cfbook").requires or []]
    todo = [r.name for r in declared if r.marker is None or r.marker.evaluate({"extra": ""})]
    done = set()
    site.mkdir()
    while todo:
        dist = distribution(todo.pop())
        if dist.metadata["Name"] in done:
            continue
        done.add(dist.metadata["Name"])
        for requirement in map(Requirement, dist.requires or []):
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
        for top in {f.parts[0] for f in dist.files or []} - {"..", "__pycache__"}:
            if not top.endswith(".pth") and not (site / top).exists():
                (site / top).symlink_to(dist.locate_file(top))


@pytest.mark.slow
def test_the_library_installs_and_runs_without_extras(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    # The dependencies this checkout tests with, torch's included, instead of gigabytes installed
    # again; then the package alone, which pip finds them for.
    _link_dependencies(tmp_path / "dependencies")
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(purelib) / "dependencies.pth").write_text(f"{tmp_path / 'dependencies'}\n")
    pip = [str(python), "-m", "pip", "install", "--quiet", "--no-input"]
    subprocess.run([*pip, str(_copy_project(tmp_path / "project"))], check=True)
    done = subprocess.run([str(python), "-c", SCRIPT], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "trained, searched and evaluated" in done.stdout
