"""Run context, side-by-side timing and result tables shared by every benchmark.

The formatting helpers (``fmt``, ``fmt_seconds``, ``fmt_ratio``, ``fmt_bytes``) return a
:class:`Value`: the display text, a ``str``, that carries the number and its unit, so that
``benchmarks/results.json`` records the number a table shows. A plain string cell that reads as
one number with a unit ("0.102 s", "54%") is parsed by :func:`parse_value`.
"""

from __future__ import annotations

import math
import numbers
import re
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

import torch

from benchmarks.config import Sizes
from cfbook.book.benchmarks import table_markdown
from cfbook.device import format_bytes, synchronize


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


class Value(str):
    """A table cell's display text that keeps the number it was made from.

    ``value`` is in base units: seconds for ``unit="s"``, bytes for ``"B"``, the ratio itself for
    ``"x"``, percent points for ``"%"``; ``unit`` is None for a plain number.
    """

    value: float | int
    unit: str | None

    def __new__(cls, text: str, value: float | int, unit: str | None = None) -> Value:
        self = super().__new__(cls, text)
        self.value = value
        self.unit = unit
        return self


# Units a cell's text may end in, as (unit recorded, scale to it); "M" and "k" scale a count.
UNITS: dict[str, tuple[str | None, Decimal]] = {
    "ns": ("s", Decimal("1e-9")),
    "µs": ("s", Decimal("1e-6")),
    "us": ("s", Decimal("1e-6")),
    "ms": ("s", Decimal("1e-3")),
    "s": ("s", Decimal(1)),
    "min": ("s", Decimal(60)),
    "h": ("s", Decimal(3600)),
    "B": ("B", Decimal(1)),
    "KiB": ("B", Decimal(2**10)),
    "MiB": ("B", Decimal(2**20)),
    "GiB": ("B", Decimal(2**30)),
    "x": ("x", Decimal(1)),
    "%": ("%", Decimal(1)),
    "k": (None, Decimal(10**3)),
    "M": (None, Decimal(10**6)),
}
_NUMBER = re.compile(r"(?P<number>-?\d{1,3}(?:,\d{3})+(?:\.\d+)?|-?\d+(?:\.\d+)?)\s?(?P<unit>\S*)")


def parse_value(text: str) -> tuple[float | int | str, str | None]:
    """The number a cell's text shows, in base units, and its unit: ``"3,252.4"`` is
    (3252.4, None), ``"23.4 ms"`` (0.0234, "s"), ``"12.3 MiB"`` (12.3 * 2**20, "B"),
    ``"236x"`` (236.0, "x"); text that is not one number with an optional unit (``"0.0 / 0.0"``,
    ``"2.05x faster"``) is returned as it is, with no unit."""
    found = _NUMBER.fullmatch(text.strip())
    if found is None or found["unit"] not in ("", *UNITS):
        return text, None
    digits = found["number"].replace(",", "")
    if not found["unit"]:
        return (int(digits) if "." not in digits else float(digits)), None
    unit, scale = UNITS[found["unit"]]
    return float(Decimal(digits) * scale), unit


def cell(content: object) -> dict[str, Any]:
    """A table cell as recorded: its display text and its value (a number, else the text), with
    the value's unit where it has one."""
    text = str(content)
    if isinstance(content, Value):
        value, unit = content.value, content.unit
        if not isinstance(value, numbers.Real) and hasattr(value, "item"):
            value = value.item()  # a 0-d tensor or array
    elif isinstance(content, numbers.Integral) and not isinstance(content, bool):
        value, unit = int(content), None
    elif isinstance(content, numbers.Real) and not isinstance(content, bool):
        value, unit = float(content), None
    else:
        value, unit = parse_value(text)
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        value = int(value)
    elif isinstance(value, numbers.Real) and not isinstance(value, bool):
        value = float(value) if math.isfinite(value) else text  # JSON has no NaN or infinity
    else:
        value = text
    return {"text": text, "value": value} | ({"unit": unit} if unit else {})


def fmt_seconds(seconds: float) -> Value:
    """Seconds with a unit that keeps three significant digits readable."""
    if seconds < 1e-3:
        return Value(f"{seconds * 1e6:.0f} µs", seconds, "s")
    if seconds < 1.0:
        return Value(f"{seconds * 1e3:.1f} ms", seconds, "s")
    return Value(f"{seconds:.2f} s", seconds, "s")


def fmt(value: float, digits: int = 2) -> Value:
    """A number with thousands separators and ``digits`` decimals."""
    return Value(f"{value:,.{digits}f}", value)


def fmt_ratio(value: float) -> Value:
    return Value(f"{value:.2f}x" if value < 10 else f"{value:.0f}x", value, "x")


def fmt_bytes(n: int) -> Value:
    """Bytes as B/KiB/MiB/GiB (``cfbook.device.format_bytes``), keeping the byte count."""
    return Value(format_bytes(n), n, "B")


def check(ok: bool) -> str:
    return "met" if ok else "NOT met"


@dataclass
class Table:
    """A titled table with notes that say how to read it; each cell keeps its display text and
    its value (see :func:`cell`)."""

    title: str
    columns: Sequence[str]
    rows: list[list[dict[str, Any]]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        rows, self.rows = self.rows, []
        for row in rows:
            self.add(*row)

    def add(self, *cells: object) -> None:
        if len(cells) != len(self.columns):
            raise ValueError(f"{self.title}: {len(cells)} cells for {len(self.columns)} columns")
        self.rows.append([cell(c) for c in cells])

    def record(self) -> dict[str, Any]:
        """The table as ``benchmarks/results.json`` keeps it."""
        return {
            "title": self.title,
            "columns": list(self.columns),
            "rows": [[dict(c) for c in row] for row in self.rows],
            "notes": list(self.notes),
        }

    def markdown(self) -> str:
        return table_markdown(self.record())
