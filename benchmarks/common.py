"""Run context, side-by-side timing and result tables shared by every benchmark."""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from benchmarks.config import Sizes
from cfbook.device import synchronize


class Skipped(Exception):
    """Raised by a benchmark that does not apply to the run's device; the message says why."""


@dataclass
class Context:
    """What one benchmark run measures on, and its caches (data, trained weights)."""

    device: torch.device
    quick: bool
    sizes: Sizes
    note: str = ""  # free-text remark for the results file (e.g. "shared machine")
    started: float = field(default_factory=time.perf_counter)
    cache: dict[str, Any] = field(default_factory=dict)

    def log(self, message: str) -> None:
        """Progress line on stderr, so stdout keeps only the tables."""
        elapsed = time.perf_counter() - self.started
        print(f"[{elapsed:7.1f}s] {message}", file=sys.stderr, flush=True)

    def on(self, device: torch.device | str) -> Context:
        """The same run (sizes, caches, clock) measuring on another device."""
        return replace(self, device=torch.device(device))


@dataclass
class Case:
    """One side of a comparison: ``fn`` is timed; ``warmup`` (default ``fn``) runs first, once."""

    fn: Callable[[], Any]
    warmup: Callable[[], Any] | None = None
    device: torch.device | None = None  # defaults to the comparison's device


@dataclass
class Timing:
    """Wall-clock seconds of the timed repeats and the value the last repeat returned."""

    times: list[float]
    result: Any = None

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    @property
    def repeats(self) -> int:
        return len(self.times)


def timed(fn: Callable[[], Any], device: torch.device) -> tuple[float, Any]:
    """Wall-clock seconds of one ``fn()`` call, queued kernels on ``device`` included, and
    its return value."""
    synchronize(device)
    t0 = time.perf_counter()
    result = fn()
    synchronize(device)
    return time.perf_counter() - t0, result


def side_by_side(
    ctx: Context,
    cases: dict[str, Case],
    *,
    label: str,
    min_repeats: int | None = None,
    max_repeats: int | None = None,
    budget_s: float | None = None,
) -> dict[str, Timing]:
    """Time the cases in interleaved rounds (A B, B A, ...) after one warm-up call each.

    Interleaving makes a noisy neighbour slow both sides alike, so the ratio stays meaningful.
    Rounds continue past ``min_repeats`` while the next one still fits into ``budget_s``.
    """
    sizes = ctx.sizes
    min_repeats = sizes.min_repeats if min_repeats is None else min_repeats
    max_repeats = max(sizes.max_repeats if max_repeats is None else max_repeats, min_repeats)
    budget_s = sizes.budget_s if budget_s is None else budget_s
    for case in cases.values():
        dev = case.device or ctx.device
        synchronize(dev)
        (case.warmup or case.fn)()
        synchronize(dev)
    timings = {name: Timing([]) for name in cases}
    names = list(cases)
    t0 = time.perf_counter()
    for round_ in range(max_repeats):
        round_start = time.perf_counter()
        order = names if round_ % 2 == 0 else names[::-1]
        for name in order:
            seconds, result = timed(cases[name].fn, cases[name].device or ctx.device)
            timings[name].times.append(seconds)
            timings[name].result = result
        spent, last = time.perf_counter() - t0, time.perf_counter() - round_start
        if round_ + 1 >= min_repeats and spent + last > budget_s:
            break
    summary = ", ".join(f"{n} {fmt_seconds(t.median)}" for n, t in timings.items())
    ctx.log(f"{label}: {summary} (median of {timings[names[0]].repeats})")
    return timings


def fmt_seconds(seconds: float) -> str:
    """Seconds with a unit that keeps three significant digits readable."""
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} µs"
    if seconds < 1.0:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds:.2f} s"


def fmt(value: float, digits: int = 2) -> str:
    """A number with thousands separators and ``digits`` decimals."""
    return f"{value:,.{digits}f}"


def fmt_ratio(value: float) -> str:
    return f"{value:.2f}x" if value < 10 else f"{value:.0f}x"


def check(ok: bool) -> str:
    return "met" if ok else "NOT met"


@dataclass
class Table:
    """A titled markdown table with notes that say how to read it."""

    title: str
    columns: Sequence[str]
    rows: list[Sequence[str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(self, *cells: object) -> None:
        if len(cells) != len(self.columns):
            raise ValueError(f"{self.title}: {len(cells)} cells for {len(self.columns)} columns")
        self.rows.append([str(c) for c in cells])

    def markdown(self) -> str:
        lines = [f"#### {self.title}", ""]
        lines.append("| " + " | ".join(self.columns) + " |")
        lines.append("|" + "|".join(" --- " for _ in self.columns) + "|")
        lines += ["| " + " | ".join(row) + " |" for row in self.rows]
        if self.notes:
            lines.append("")
            lines += [f"- {note}" for note in self.notes]
        return "\n".join(lines) + "\n"
