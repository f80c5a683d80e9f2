"""cfbook.errors: which modules count as the library when ``warn`` looks for the caller's line,
and a frame with no module name."""

from __future__ import annotations

import pytest

from cfbook.errors import _in_library, warn


def test_code_without_a_module_name_is_not_the_library() -> None:
    with pytest.warns(UserWarning, match="from exec"):
        exec("warn('from exec')", {"warn": warn})  # a frame whose globals hold no __name__


def test_the_package_itself_is_library_code_and_its_applications_are_not() -> None:
    assert _in_library("cfbook") and _in_library("cfbook.search.generators")
    assert not _in_library("cfbook.book.pipeline") and not _in_library("cfbookish")
