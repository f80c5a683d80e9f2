"""What ``import cfbook`` loads (the library runs without the book's, the grid's and the tests'
extras), and the named mutants of scripts/named_mutants.py, which must still apply."""

from __future__ import annotations

import sys
from pathlib import Path

from conftest import fresh_python

ROOT = Path(__file__).resolve().parents[1]


def test_importing_the_library_loads_no_book_machinery_and_no_extra():
    # Nor torch's compiler stack, which would slow the start of every process that imports
    # cfbook: the compiled step loads it when it is first used.
    code = (
        "import sys, cfbook, cfbook.data, cfbook.evaluation, cfbook.search, cfbook.training; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'cfbook' and "
        "m.split('.')[1:2] in (['book'], ['paper'], ['commands']) "
        "or m.split('.')[0] in ('plotly', 'nbconvert', 'papermill', 'yaml', 'captum', 'sklearn') "
        "or m == 'torch._dynamo'))"
    )
    assert fresh_python(code) == "[]"


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
