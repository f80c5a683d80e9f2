"""CT with protected features, trained without and with the energy ridge: what the training logs
of the shipped cells say about protected validity on the synthetic sets.

The grid trains them with the main grid's weights (``cfbook.paper.settings`` says why); the
``zero_lambdas_protected`` variant without the ridge and the adversarial term, as the mutability
grids were once committed; ``default_lambdas_protected`` with CTExperiments' bare defaults. Every
number here is read from the cells' per-epoch logs and the merged results, and the sentences
follow from them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from statistics import pstdev
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from cfbook.book.figures.reproduction import NAMES
from cfbook.book.figures.training import COLOURS, TEMPLATE
from cfbook.paper import published
from cfbook.paper.merge import read_cell_logs
from cfbook.paper.settings import SEARCH

Logs = dict[str, dict[int, dict[str, Any]]]  # data set -> seed -> {"meta", "log"}
# A weighting with a ridge: its name -> (its cells' logs, its merged results).
Ridged = dict[str, tuple[Logs, dict[str, Any]]]
RIDGED_COLOURS = (COLOURS["full"], "#2e8b57", "#7b3fa0")
# The variant without the ridge, and those with one besides the grid's, by the name the page
# gives them.
WITHOUT = "zero_lambdas_protected"
RIDGED_VARIANTS = {"CTExperiments' defaults": "default_lambdas_protected"}
GRID = "the main grid's weights (the grid)"
LATE = 50  # the last epochs over which the training-time validity's spread is measured
REACHED = 0.95  # a training-time validity at the paper's level of 1.00
CLOSE = 0.1  # the validity tolerance of the reproduction chapter


def read_ridged(
    data_dir: str | Path, results: dict[str, Any], variants: dict[str, dict[str, Any]]
) -> tuple[Logs, dict[str, Any], Ridged] | None:
    """The protected cells' logs and merged results without the ridge (``WITHOUT``), and with
    each weighting that has one: the grid's (``results``) and the shipped ``RIDGED_VARIANTS``;
    None when the variant without the ridge is not shipped with its cells."""
    without = read_cell_logs(data_dir, "full_protected", WITHOUT)
    if WITHOUT not in variants or not without:
        return None
    found = {GRID: (read_cell_logs(data_dir, "full_protected"), results)}
    for name, variant in RIDGED_VARIANTS.items():
        logs = read_cell_logs(data_dir, "full_protected", variant)
        if variant in variants and logs:
            found[name] = (logs, variants[variant])
    return without, variants[WITHOUT], found


def _late(cell: dict[str, Any]) -> list[float]:
    return [e["percent_valid"] for e in cell["log"][-LATE:]]


def _weights(cell: dict[str, Any]) -> str:
    _, _, reg, adv = cell["meta"]["lambdas"]
    return f"{reg:g}, {adv:g}"


def _test_validity(results: dict[str, Any], key: str) -> list[float | None]:
    return [s["mean"] for s in results["data"][key]["validity"]["protected"]["full"]]


def _keys(configured: Logs, results: dict[str, Any], ridged: Ridged) -> list[str]:
    """The data sets with cells and merged results for every weighting."""
    return [
        k
        for k in results["data"]
        if k in configured and all(k in logs and k in r["data"] for logs, r in ridged.values())
    ]


def _last_epoch(*logs: Logs) -> str:
    """ "epoch N" where every cell's log ends at epoch N (the paper trains 100), else "the last
    epoch"."""
    ends = {c["log"][-1]["epoch"] for g in logs for cells in g.values() for c in cells.values()}
    return f"epoch {ends.pop()}" if len(ends) == 1 else "the last epoch"


def _number(x: float) -> str:
    return f"{x:,.0f}" if x >= 10 else f"{x:.1f}"


def _listed(items: list[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def stability_table(configured: Logs, results: dict[str, Any], ridged: Ridged) -> str:
    """Per data set and weights, per seed: the largest logged ridge term, the training-time
    validity's range over the last ``LATE`` epochs and at the last one, and the test-time
    protected validity."""
    last_epoch = _last_epoch(configured, *(logs for logs, _ in ridged.values()))
    lines = [
        "| data | λ_reg, λ_adv | largest ridge term | training validity, last "
        f"{LATE} epochs | at {last_epoch} | test validity (paper) |",
        "|---|---|---|---|---|---|",
    ]
    for key in _keys(configured, results, ridged):
        for logs, merged in ((configured, results), *ridged.values()):
            cells = [logs[key][s] for s in sorted(logs[key])]
            ridge = " / ".join(_number(max(e["reg_loss"] for e in c["log"])) for c in cells)
            spread = " / ".join(f"{min(_late(c)):.2f}–{max(_late(c)):.2f}" for c in cells)
            last = " / ".join(f"{c['log'][-1]['percent_valid']:.2f}" for c in cells)
            test = " / ".join("–" if v is None else f"{v:.2f}" for v in _test_validity(merged, key))
            paper = published.VALIDITY[key]["protected"][0]
            lines.append(
                f"| {NAMES[key]} | {_weights(cells[0])} | {ridge} | {spread} | {last} | "
                f"{test} ({paper:.2f}) |"
            )
    return "\n".join(lines)


@dataclass(frozen=True)
class Reached:
    """On a data set where the paper's protected validity is ``REACHED`` or more: how many of the
    last ``LATE`` epochs reach it, per seed without the ridge, and how many seeds end there."""

    key: str
    visits: list[int]
    ended: int


@dataclass(frozen=True)
class StabilityReading:
    """What the logs say. Per data set (key), each seed's standard deviation of the
    training-time validity over the last ``LATE`` epochs, without the ridge and with any
    ridged weighting; the largest ridge term per seed without and with; the data sets where
    every seed without the ridge moves more than every seed with it (``unsteady``), those of
    them whose last epoch's training-time validity lies within ``CLOSE`` of the test-time one in
    every seed (``tracked``), and how often they reach the paper's level (``reached``)."""

    without: dict[str, list[float]]
    with_: dict[str, list[float]]
    ridge_without: list[float]
    ridge_with: list[float]
    unsteady: list[str]
    tracked: list[str]
    reached: list[Reached]


def stability_reading(
    configured: Logs, results: dict[str, Any], ridged: Ridged
) -> StabilityReading | None:
    """The spread of the training-time validity and the ridge terms, without the ridge and with
    it, and what follows (None: no data set with logs and results of every weighting)."""
    keys = _keys(configured, results, ridged)
    if not keys or not ridged:
        return None
    with_logs = [logs for logs, _ in ridged.values()]

    def spreads(key: str, *logs: Logs) -> list[float]:
        return [pstdev(_late(c)) for g in logs for c in g[key].values()]

    def ridges(*logs: Logs) -> list[float]:
        return [
            max(e["reg_loss"] for e in c["log"]) for g in logs for k in keys for c in g[k].values()
        ]

    without = {k: spreads(k, configured) for k in keys}
    with_ = {k: spreads(k, *with_logs) for k in keys}
    unsteady = [k for k in keys if min(without[k]) > max(with_[k])]
    tracked = [
        k
        for k in unsteady
        if all(
            v is not None and abs(c["log"][-1]["percent_valid"] - v) <= CLOSE
            for c, v in zip(
                (configured[k][s] for s in sorted(configured[k])),
                _test_validity(results, k),
                strict=True,
            )
        )
    ]
    reached = []
    for k in unsteady:
        if published.VALIDITY[k]["protected"][0] < REACHED:
            continue
        seeds = [configured[k][s] for s in sorted(configured[k])]
        reached.append(
            Reached(
                k,
                [sum(v >= REACHED for v in _late(c)) for c in seeds],
                sum(c["log"][-1]["percent_valid"] >= REACHED for c in seeds),
            )
        )
    return StabilityReading(
        without, with_, ridges(configured), ridges(*with_logs), unsteady, tracked, reached
    )


def stability_text(configured: Logs, results: dict[str, Any], ridged: Ridged) -> str:
    """What the logs say (``stability_reading``): how far the logits grow and how much the
    training-time validity moves without the ridge and with it; on the data sets where every
    seed without it moves more than every seed with it, whether the last epoch's validity tracks
    the test-time validity and whether the runs ever reach the paper's level."""
    r = stability_reading(configured, results, ridged)
    if r is None:
        return ""
    without, with_ = r.without, r.with_
    low, high = min(map(min, without.values())), max(map(max, without.values()))
    r_without = r.ridge_without
    text = (
        f"Without the ridge, the ridge term (logged, weighed 0: the mean of z_t² over the "
        f"counterfactuals and their neighbours) reaches {_number(min(r_without))} to "
        f"{_number(max(r_without))} at its largest, a root-mean-square target logit of "
        f"{(min(r_without) / 2) ** 0.5:,.0f} to {(max(r_without) / 2) ** 0.5:,.0f}; with "
        f"{_listed(list(ridged))} it stays at or below {_number(max(r.ridge_with))}. Over the "
        f"last {LATE} epochs the training-time validity ({SEARCH['maxiter']} search steps, to the "
        f"training τ) moves with a standard deviation of {low:.2f} to {high:.2f} per seed "
        f"without the ridge and {min(map(min, with_.values())):.2f} to "
        f"{max(map(max, with_.values())):.2f} with it. "
    )
    if not r.unsteady:
        return text + (
            "On every data set the two ranges overlap: the logs do not show a less steady "
            "training without the ridge, so they do not explain the difference in protected "
            "validity."
        )
    overlap = [NAMES[k] for k in without if k not in r.unsteady]
    text += (
        f"On {_listed([NAMES[k] for k in r.unsteady])} every seed trained without the ridge moves "
        "more than every seed trained with it"
        + (f"; on {_listed(overlap)} the ranges overlap. " if overlap else ". ")
    )
    last_epoch = _last_epoch(configured)
    text += f"There the model left at {last_epoch} depends on where the oscillation stands"
    text += (
        f": on {_listed([NAMES[k] for k in r.tracked])} the last epoch's training-time validity "
        f"lies within {CLOSE:g} of the test-time protected validity in every seed. "
        if r.tracked
        else ", yet on none of them does the last epoch's training-time validity lie within "
        f"{CLOSE:g} of the test-time protected validity in every seed. "
    )
    reached = [
        f"{NAMES[x.key]} (paper {published.VALIDITY[x.key]['protected'][0]:.2f}) in "
        f"{' / '.join(map(str, x.visits))} of the last {LATE} epochs per seed, at {last_epoch} in "
        f"{x.ended} of {len(x.visits)}"
        for x in r.reached
    ]
    if reached:
        text += (
            f"Where the paper reports a protected validity of {REACHED:g} or more, our runs "
            f"without the ridge reach {REACHED:g} or more in training on {'; '.join(reached)}. "
            "The paper's one model may have stopped where such an oscillation happened to be, or "
            "CT.jl's training without the ridge may be steady where ours is not: the shipped "
            "results cannot tell the two apart, so the cause stays open."
        )
    return text


def stability_figure(configured: Logs, ridged: Ridged) -> go.Figure:
    """CT's training-time validity per epoch, one panel per data set, one line per seed, without
    the ridge and with each weighting in ``ridged``."""
    keys = [k for k in NAMES if k in configured and all(k in logs for logs, _ in ridged.values())]
    weightings = [
        (configured, COLOURS["vanilla"], "λ_reg = λ_adv = 0 (the mutability grids as committed)"),
        *((logs, RIDGED_COLOURS[i], name) for i, (name, (logs, _)) in enumerate(ridged.items())),
    ]
    columns = 2
    rows = -(-len(keys) // columns)
    fig = make_subplots(
        rows=rows,
        cols=columns,
        shared_xaxes=True,
        shared_yaxes=True,
        subplot_titles=[NAMES[k] for k in keys],
        vertical_spacing=0.12,
        horizontal_spacing=0.06,
    )
    for i, key in enumerate(keys):
        row, col = i // columns + 1, i % columns + 1
        for logs, colour, name in weightings:
            for j, seed in enumerate(sorted(logs[key])):
                log = logs[key][seed]["log"]
                fig.add_scatter(
                    x=[e["epoch"] for e in log],
                    y=[e["percent_valid"] for e in log],
                    mode="lines",
                    line={"color": colour, "width": 1.2},
                    opacity=0.8,
                    name=name,
                    legendgroup=name,
                    showlegend=i == 0 and j == 0,
                    hovertemplate=f"seed {seed}, epoch %{{x}}: %{{y:.2f}}<extra></extra>",
                    row=row,
                    col=col,
                )
        fig.update_yaxes(range=[0, 1.02], row=row, col=col)
    for col in range(1, columns + 1):
        fig.update_xaxes(title_text="epoch", row=rows, col=col)
    for row in range(1, rows + 1):
        fig.update_yaxes(title_text="valid share", row=row, col=1)
    fig.update_layout(
        template=TEMPLATE,
        height=260 * rows + 120,
        margin={"l": 60, "r": 20, "t": 80, "b": 90},
        legend={"orientation": "h", "y": -0.12 if rows > 1 else -0.3},
        title={"text": "CT's training-time validity, protected x1, one line per seed", "x": 0},
    )
    return fig
