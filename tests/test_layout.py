"""The package's architecture, checked from its source: which part may import which.

Each sub-package's ``__init__`` says what it may import; this test holds the code to it, so a
new import that points the wrong way (evaluation reaching into training, the library loading the
book) fails here instead of growing into an import cycle.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "cfbook"

# Top-level modules that import nothing of cfbook: every layer may use them.
LEAVES = {"amp", "atomic", "device", "models", "objectives", "profiling", "progress"}
# The command lines, the only modules outside cfbook.book that may import it.
COMMANDS = {"train", "pipeline"}
# What each part may import besides itself and the leaves ("core": the training loop).
ALLOWED = {
    "search": set(),
    "data": set(),
    "evaluation": {"search"},
    "core": {"search", "evaluation", "data"},
    # The paper's experiment grid: a command layer beside the book, which shows its results.
    "paper": {"search", "evaluation", "data", "core"},
    "book": {"search", "evaluation", "data", "core", "paper"},
    "commands": {"search", "evaluation", "data", "core", "book"},
}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def part(module: str) -> str:
    """The part of the package a module belongs to: a sub-package, a leaf, a command or core."""
    names = module.split(".")
    if len(names) == 1:
        return "root"
    if module in MODULES and MODULES[module].parent == PACKAGE:
        top = names[1]
        return "leaf" if top in LEAVES else "commands" if top in COMMANDS else "core"
    return names[1]


def imports(module: str) -> set[str]:
    """The cfbook modules ``module`` imports, at its top or inside functions."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(MODULES[module].read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            sub = [f"{node.module}.{alias.name}" for alias in node.names]
            targets = [name for name in sub if name in MODULES] or [node.module]
        else:
            continue
        found.update(t for t in targets if t.split(".")[0] == "cfbook")
    return found


GRAPH = {module: imports(module) for module in MODULES}


def test_the_tree_shows_the_parts():
    tops = {p.stem for p in PACKAGE.glob("*.py")}
    folders = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert folders == {"search", "evaluation", "data", "paper", "book"}
    assert len(tops) <= 16
    assert tops >= LEAVES | COMMANDS


@pytest.mark.parametrize("leaf", sorted(LEAVES))
def test_leaves_import_nothing_of_cfbook(leaf):
    assert GRAPH[f"cfbook.{leaf}"] == set()


@pytest.mark.parametrize("module", sorted(m for m in MODULES if part(m) != "root"))
def test_imports_point_downwards(module):
    allowed = ALLOWED.get(part(module), set()) | {part(module), "leaf"}
    wrong = sorted(t for t in GRAPH[module] if part(t) not in allowed)
    assert not wrong, f"{module} ({part(module)}) may not import {wrong}"


def test_no_import_cycles():
    graph = {m: {t for t in targets if t in MODULES} for m, targets in GRAPH.items()}
    for module in graph:  # a package's __init__ may re-export its own modules
        graph[module] = {t for t in graph[module] if not module.startswith(t + ".")}
    try:
        tuple(TopologicalSorter(graph).static_order())
    except CycleError as err:
        pytest.fail(f"import cycle: {' -> '.join(err.args[1])}")


def test_importing_the_library_loads_no_book_machinery():
    code = (
        "import sys, cfbook, cfbook.data, cfbook.evaluation, cfbook.search; "
        "print(sorted(m for m in sys.modules if m.startswith('cfbook.book') "
        "or m.split('.')[0] in ('plotly', 'nbconvert', 'papermill', 'yaml')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
