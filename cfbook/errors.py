"""cfbook's own exception, below every other module so that any of them may raise it.

``SetupError`` is a condition of the machine or the environment that stops what was asked, with
a message that says how to get past it: a device that is not there, a launcher's missing
settings, a download that failed, a Jupyter kernel that does not start this Python. It is a
``RuntimeError``, as these errors were before it existed, so that code catching those keeps
working; the command lines print it as one line, while any other ``RuntimeError`` (torch's,
say) keeps its traceback.

``warn`` points a library warning at the line that called the library, however deep inside the
package it was raised.
"""

from __future__ import annotations

import inspect
import warnings

__all__ = ["SetupError", "warn"]

# cfbook's modules that use the library as its users do: their calls are the ones to name.
_APPLICATIONS = ("cfbook.book", "cfbook.commands", "cfbook.paper")


class SetupError(RuntimeError):
    """What was asked cannot run here; the message names the cause and the way out."""


def _in_library(module: str) -> bool:
    inside = module == "cfbook" or module.startswith("cfbook.")
    return inside and not module.startswith(_APPLICATIONS)


def warn(message: str, category: type[Warning] = UserWarning) -> None:
    """``warnings.warn`` at the line that called the outermost library frame: a fixed
    ``stacklevel`` names a line inside cfbook whenever another path leads to the warning (and
    Python 3.11 gives each comprehension a frame of its own), and a wrapper between two library
    frames (a decorator, a mutation tester's trampoline) does not end the library's part."""
    frame, level, outer = inspect.currentframe().f_back, 2, 2
    while frame is not None:
        if _in_library(frame.f_globals.get("__name__", "")):
            outer = level + 1
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=outer)
