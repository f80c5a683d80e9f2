"""Atomic file writes: a crash mid-write must never leave a half-written log or checkpoint."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import torch


def _atomic_write(path: str | Path, write: Callable[[IO[bytes]], None]) -> None:
    """Write through a temp file in the target folder, then rename it over the target."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp's 0600 would make shared logs unreadable
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_text(path: str | Path, text: str) -> None:
    """Replace ``path`` with ``text`` (UTF-8) in one step."""
    _atomic_write(path, lambda handle: handle.write(text.encode("utf-8")))


def atomic_torch_save(obj: Any, path: str | Path) -> None:
    """``torch.save`` that readers never see half-done."""
    _atomic_write(path, lambda handle: torch.save(obj, handle))
