"""cfbook's own exception, below every other module so that any of them may raise it.

``SetupError`` is a condition of the machine or the environment that stops what was asked, with
a message that says how to get past it: a device that is not there, a launcher's missing
settings, a download that failed, a Jupyter kernel that does not start this Python. It is a
``RuntimeError``, as these errors were before it existed, so that code catching those keeps
working; the command lines print it as one line, while any other ``RuntimeError`` (torch's,
say) keeps its traceback.
"""

from __future__ import annotations

__all__ = ["SetupError"]


class SetupError(RuntimeError):
    """What was asked cannot run here; the message names the cause and the way out."""
