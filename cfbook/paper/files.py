"""The grid's result files, read with errors that name the file and the fix, and written under a
lock, so that two grid processes started on the same cells (a resubmitted SLURM array, a second
shell) refuse each other instead of training into the same checkpoint."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from cfbook.errors import SetupError


class Busy(SetupError):
    """Another live process holds the lock of a cell or an evaluation."""


def read_json(path: Path, fix: str) -> dict[str, Any] | None:
    """The JSON object in ``path`` (None when there is no such file); a truncated or corrupt file
    is refused with ``fix``, what to rerun."""
    if not path.is_file():
        return None
    try:
        content = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{path} is truncated or corrupt ({err}): {fix}") from err
    if not isinstance(content, dict):
        raise ValueError(f"{path} holds a {type(content).__name__}, not a result: {fix}")
    return content


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def _holder(lock: Path) -> tuple[str, int] | None:
    """The (host, pid) written in a lock file; None if it cannot be read (being written)."""
    try:
        host, pid = lock.read_text(encoding="utf-8").split()
        return host, int(pid)
    except (OSError, ValueError):
        return None


@contextmanager
def locked(path: Path, what: str) -> Iterator[None]:
    """Hold ``<path>.lock`` while ``what`` (one cell or evaluation) runs.

    The lock file holds the host and pid of its holder: a lock left by a process that died on
    this host is taken over; one held by a live process, or by one on another host (which this
    process cannot check), is refused with an error that names both ways out."""
    lock = path.with_name(path.name + ".lock")
    lock.parent.mkdir(parents=True, exist_ok=True)
    me = f"{socket.gethostname()} {os.getpid()}"
    for _ in range(2):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            holder = _holder(lock)
            if holder and holder[0] == socket.gethostname() and not _alive(holder[1]):
                lock.unlink(missing_ok=True)  # its process died: a stale lock
                continue
            who = f"process {holder[1]} on {holder[0]}" if holder else "another process"
            raise Busy(
                f"{what} is being run by {who} ({lock} exists): wait for it to finish, or delete "
                "the lock file if that process is gone"
            ) from None
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(me)
        break
    try:
        yield
    finally:
        lock.unlink(missing_ok=True)
