"""The command lines, one module each, run as ``python -m cfbook.commands.<name>`` (or the
``cfbook-<name>`` scripts that ``pip install`` puts on PATH):

- ``paper``: the CT paper's experiment grid (``cfbook.paper``), or part of it, then the merge;
- ``pipeline``: the book: the training stages, the evaluation step, the chapters, the website;
- ``train_profile``: one training stage of one of the book's profiles, alone or under torchrun;
- ``scaling``: the "Scaling up" chapter's measurements (one process against several).

The layer at the top: a command may import any part of cfbook, and nothing imports a command.
"""

from __future__ import annotations

import subprocess

from cfbook.errors import SetupError

#: What a command line reports as one line ``error: <type>: <message>`` (exit status 2): bad
#: parameters, missing files, a child process that failed, a device or launcher that is not
#: there. Anything else, torch's own ``RuntimeError`` included, keeps its traceback.
USER_ERRORS = (ValueError, OSError, subprocess.CalledProcessError, SetupError)
