"""cfbook.paper.published: the paper's numbers, as transcribed, against the reference's table.

The numbers are module constants, which mutation testing cannot reach (they are built at
import), so a mistyped one would change a verdict unnoticed: each is checked here against the
main table of ``../shared/reference/PAPER.md`` (itself copied from CT.jl's ``paper/tables``)."""

from __future__ import annotations

import re

import pytest
from conftest import REPO

from cfbook.paper.published import COST_UNCONSTRAINED, MAIN, VALIDITY

PAPER = REPO.parent / "shared" / "reference" / "PAPER.md"
ROWS = {
    "LS": "lin_sep",
    "Circ": "circles",
    "Moon": "moons",
    "OL": "over",
    "Adult": "adult",
    "CH": "cali",
    "Cred": "credit",
    "GMSC": "gmsc",
    "MNIST": "mnist",
}


def _paper() -> str:
    if not PAPER.is_file():
        pytest.skip(f"{PAPER} is not here (the reference folder beside the repository)")
    return PAPER.read_text(encoding="utf-8")


def _main_table() -> dict[str, list[str]]:
    table = _paper().split("## Main table", 1)[1].split("\n\n", 1)[0]
    rows = {}
    for line in table.splitlines()[3:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[ROWS[cells[0].split(" (")[0]]] = cells[1:]
    return rows


def _reduction(cell: str) -> tuple[float, float, bool]:
    value, se, star = re.fullmatch(r"(-?[\d.]+) \+- ([\d.]+)( \*)?", cell).groups()
    return float(value), float(se), star is not None


def test_every_main_table_reduction_is_transcribed() -> None:
    rows = _main_table()
    assert set(rows) == set(MAIN)
    for data, cells in rows.items():
        for measure, cell in zip(("ip", "ip_star", "cost"), cells[:3], strict=True):
            assert MAIN[data][measure] == _reduction(cell), (data, measure)


def test_every_validity_is_transcribed() -> None:
    for data, cells in _main_table().items():
        for kind, cell in zip(("unconstrained", "protected"), cells[3:5], strict=True):
            ct, baseline = (float(v) for v in cell.split(" / "))
            assert VALIDITY[data][kind] == (ct, baseline), (data, kind)


def test_every_unconstrained_cost_is_transcribed() -> None:
    text = _paper().split("Cost reduction **without** constraints", 1)[1]
    sentence = " ".join(text.split("The MNIST cost")[0].split())
    found = dict(
        re.findall(r"(LS|Circ|Moon|OL|Adult|CH|Cred|GMSC|MNIST) (-?\d+(?:\.\d+)?)", sentence)
    )
    assert {ROWS[k]: float(v) for k, v in found.items()} == COST_UNCONSTRAINED
