"""The package's architecture: the parts the tree shows, the layering that import-linter holds
them to (``pyproject.toml``'s contracts, relative imports included), and what ``import cfbook``
loads."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import fresh_python

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "cfbook"
LEAVES = {
    "amp",
    "atomic",
    "device",
    "errors",
    "inputs",
    "models",
    "objectives",
    "profiling",
    "progress",
}
PARTS = {"search", "training", "evaluation", "data", "paper", "book", "commands"}


def test_the_tree_shows_the_parts():
    folders = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert folders == PARTS
    assert {p.stem for p in PACKAGE.glob("*.py")} == LEAVES | {"__init__"}


def test_the_readme_layout_names_every_part():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    layout = readme[readme.index("## Layout") :]
    for part in PARTS:
        assert f"{part}/" in layout, f"the README's layout section does not name {part}/"


def _lint_imports() -> subprocess.CompletedProcess:
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.fail("lint-imports is missing: pip install -e '.[test]'")
    return subprocess.run([exe], cwd=ROOT, capture_output=True, text=True)


def test_the_import_contracts_hold():
    done = _lint_imports()
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Contracts: 2 kept, 0 broken." in done.stdout


def test_a_relative_import_upwards_breaks_a_contract(tmp_path):
    """The contracts resolve relative imports: ``from ..book import profiles`` in the search
    is caught (the old layering test read only absolute imports)."""
    copy = tmp_path / "repo"
    shutil.copytree(PACKAGE, copy / "cfbook", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", copy / "pyproject.toml")
    with (copy / "cfbook" / "search" / "targets.py").open("a") as f:
        f.write("\nfrom ..book import profiles  # noqa: E402, F401\n")
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    env = {"PYTHONPATH": str(copy), "PATH": str(Path(sys.executable).parent)}
    done = subprocess.run([exe], cwd=copy, capture_output=True, text=True, env=env)
    assert done.returncode != 0
    assert "cfbook.search is not allowed to import cfbook.book" in done.stdout


def test_importing_the_library_loads_no_book_machinery():
    code = (
        "import sys, cfbook, cfbook.data, cfbook.evaluation, cfbook.search, cfbook.training; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'cfbook' and "
        "m.split('.')[1:2] in (['book'], ['paper'], ['commands']) "
        "or m.split('.')[0] in ('plotly', 'nbconvert', 'papermill', 'yaml', 'captum')))"
    )
    assert fresh_python(code) == "[]"


def test_importing_the_library_leaves_torchvision_and_sklearn_unloaded():
    # Each takes about a second to import (torchvision pulls in torch._dynamo); only ResNet-18,
    # reading MNIST's files and the sklearn generators need them, so they load when used.
    code = (
        "import sys, cfbook, cfbook.data, cfbook.evaluation, cfbook.search, cfbook.training; "
        "print(sorted(m for m in ('torchvision', 'sklearn', 'torch._dynamo') if m in sys.modules))"
    )
    assert fresh_python(code) == "[]"
    code = "import sys, cfbook; cfbook.resnet18_mnist(); print('torchvision' in sys.modules)"
    assert fresh_python(code) == "True"


def test_the_named_mutants_still_apply():
    # scripts/named_mutants.py replaces exact text: a refactor that moves it must update the
    # edit (the script refuses to run otherwise), so the suite checks the texts are there.
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import named_mutants
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    for edit in named_mutants.EDITS:
        assert (ROOT / edit.path).read_text().count(edit.old) == 1, edit.name
        for test in edit.tests:
            path, _, name = test.partition("::")
            assert (ROOT / path).is_file(), test
            assert not name or f"def {name}(" in (ROOT / path).read_text(), test
