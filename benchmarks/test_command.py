"""The README's test command on a clean clone, timed whole: set-up, linters, every test.

A fresh ``git clone`` of the committed tree (``HEAD``; uncommitted changes are not in it) beside
the shared reference folder, as CI lays it out, runs ``bash scripts/test.sh`` from scratch: the
virtual environment and Quarto's offline install included, with inductor's cache cold (pip's
download cache and an installed Chromium are the machine's). The target is at most ten minutes on
two cores. Nothing else may run on the machine meanwhile.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
import time
from pathlib import Path

from benchmarks.common import Context, Skipped, Table, fmt_seconds

TITLE = "The test command on a clean clone"
ROOT = Path(__file__).resolve().parents[1]
TARGET_SECONDS = 600.0
# pytest's last line: "1,000 passed, 11 skipped, 3 warnings in 512.34s (0:08:32)"
SUMMARY = re.compile(r"^=*\s*(?P<counts>.*?) in (?P<seconds>[\d.]+)s")
# pytest --durations: "98.05s setup    tests/test_x.py::test_y"
DURATION = re.compile(r"^(?P<seconds>[\d.]+)s (?P<phase>call|setup|teardown)\s+(?P<test>\S+)$")
SLOWEST = 10


def _summary(output: str) -> tuple[str, float | None]:
    """pytest's counts and its own seconds, from the command's output."""
    for line in reversed(output.splitlines()):
        found = SUMMARY.match(line.strip())
        if found:
            return found["counts"], float(found["seconds"])
    return "no pytest summary", None


def run(ctx: Context) -> list[Table]:
    if ctx.quick:
        raise Skipped("the whole test command takes minutes; run it with --only test_command")
    if ctx.device.type != "cpu":
        raise Skipped("CI's machine has no GPU: time the test command with --device cpu")
    with tempfile.TemporaryDirectory() as tmp:
        clone = Path(tmp) / "cfbook"
        subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
        shared = ROOT.parent / "shared"
        if shared.is_dir():
            (Path(tmp) / "shared").symlink_to(shared)
        ctx.log("test_command: bash scripts/test.sh on a clean clone")
        start = time.perf_counter()
        done = subprocess.run(
            ["bash", "scripts/test.sh", "-q", "-p", "no:cacheprovider", f"--durations={SLOWEST}"],
            cwd=clone,
            capture_output=True,
            text=True,
            # inductor's cache starts cold, as on a fresh CI machine
            env={
                **os.environ,
                "CFBOOK_DEVICE": "cpu",
                "TORCHINDUCTOR_CACHE_DIR": f"{tmp}/inductor",
            },
        )
        seconds = time.perf_counter() - start
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=clone, capture_output=True, text=True
        ).stdout.strip()
    counts, pytest_seconds = _summary(done.stdout + done.stderr)
    table = Table(
        f"bash scripts/test.sh on a clean clone of {commit}",
        ["what", "seconds", "target", "met"],
    )
    table.add(
        "the whole command (set-up included)",
        fmt_seconds(seconds),
        fmt_seconds(TARGET_SECONDS),
        "yes" if seconds <= TARGET_SECONDS and done.returncode == 0 else "NOT met",
    )
    table.add(
        "pytest alone",
        "n/a" if pytest_seconds is None else fmt_seconds(pytest_seconds),
        "",
        "",
    )
    table.notes.append(f"exit status {done.returncode}; pytest: {counts}")
    slowest = [m for line in done.stdout.splitlines() if (m := DURATION.match(line.strip()))]
    if slowest:
        table.notes.append(
            "slowest: "
            + "; ".join(f"{m['test']} ({m['phase']}) {float(m['seconds']):.0f} s" for m in slowest)
        )
    return [table]
