"""The README's Python snippets run as written: a reader copies them."""

from __future__ import annotations

import re
import warnings

import pytest
from conftest import REPO

SNIPPETS = re.findall(
    r"```python\n(.*?)```", (REPO / "README.md").read_text(encoding="utf-8"), re.S
)


def test_the_readme_has_snippets():
    assert SNIPPETS


@pytest.mark.parametrize("source", SNIPPETS, ids=[f"snippet {i + 1}" for i in range(len(SNIPPETS))])
def test_a_readme_snippet_runs_as_written(source, capsys):
    # Without a warning: a reader's first run should not be told to change what they copied.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        exec(compile(source, "README.md", "exec"), {"__name__": "readme"})
    assert capsys.readouterr().out  # every snippet shows its result
