"""Where the data lives: the repository's ``data/`` folder (MNIST files, logs, evaluations), and
paths shown relative to it so that printed messages hold nothing machine-specific."""

from __future__ import annotations

import os
from pathlib import Path


def find_data_dir() -> Path:
    """Locate the data folder (MNIST/raw plus training logs) so notebooks in book/ find it too.

    Order: $CFBOOK_DATA_DIR, then the first ``data/`` holding ``MNIST/raw`` found walking up from
    the working directory, then the ``data/`` folder of the repository this package lives in.
    """
    env = os.environ.get("CFBOOK_DATA_DIR")
    if env:
        return Path(env).expanduser()
    cwd = Path.cwd().resolve()
    for folder in (cwd, *cwd.parents):
        if (folder / "data" / "MNIST" / "raw").is_dir():
            return folder / "data"
    return Path(__file__).resolve().parents[2] / "data"


def display_path(path: str | Path, data_dir: str | Path | None = None) -> str:
    """``path`` relative to the folder above the data folder (``data/cpu/full.json``), so printed
    messages, and the executed notebooks that keep them, hold no machine-specific paths."""
    path = Path(path).resolve()
    base = Path(data_dir if data_dir is not None else find_data_dir()).resolve().parent
    return str(path.relative_to(base)) if path.is_relative_to(base) else str(path)
