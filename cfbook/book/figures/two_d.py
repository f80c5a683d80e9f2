"""CT drawn in two dimensions: decision regions, training data and search paths of the
synthetic data sets (``two_d.json`` from ``python -m cfbook.commands.paper --two-d``), with a
menu to switch data sets, and text written from the paths."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from cfbook.book.figures.training import TEMPLATE

CLASS_COLOURS = ("#1f6fb4", "#e8710a")


def _traces(d: dict[str, Any]) -> list[tuple[go.BaseTraceType, int, int]]:
    """Every trace of one data set's four panels, with its subplot position."""
    out = []
    legend: set[str] = set()
    ax, ay = d["axes"]
    for i, panel in enumerate(d["panels"]):
        row, col = divmod(i, 2)
        pos = (row + 1, col + 1)
        out.append(
            (
                go.Contour(
                    x=ax,
                    y=ay,
                    # float32 numpy: stored base64 in the notebook instead of a long list
                    z=np.asarray(panel["prob"], dtype=np.float32),
                    colorscale="RdBu_r",
                    zmin=0,
                    zmax=1,
                    contours={"start": 0.0, "end": 1.0, "size": 0.1},
                    opacity=0.45,
                    showscale=i == 0,
                    # Below the panels, across the figure: a phone keeps the panels' width.
                    colorbar={
                        "title": {"text": "p(class 1)", "side": "top"},
                        "orientation": "h",
                        "y": -0.1,
                        "yanchor": "top",
                        "thickness": 10,
                        "len": 1.0,
                    },
                    hoverinfo="skip",
                ),
                *pos,
            )
        )
        for c in (0, 1):
            xs = [p for p, y in zip(d["train_x"], d["train_y"], strict=True) if y == c]
            out.append(
                (
                    go.Scatter(
                        x=[p[0] for p in xs],
                        y=[p[1] for p in xs],
                        mode="markers",
                        marker={"size": 3, "color": CLASS_COLOURS[c]},
                        name=f"class {c}",
                        showlegend=i == 0,
                        hoverinfo="skip",
                    ),
                    *pos,
                )
            )
        # All paths of a panel as one line trace (None separates them), then their ends.
        xs, ys = [], []
        for path in panel["paths"]:
            drawn = path[::3] + path[-1:]  # every third step is enough to see the path
            xs += [p[0] for p in drawn] + [None]
            ys += [p[1] for p in drawn] + [None]
        out.append(
            (
                go.Scatter(
                    x=xs,
                    y=ys,
                    mode="lines",
                    line={"color": "black", "width": 1},
                    name="search path",
                    showlegend=i == 0,
                    hoverinfo="skip",
                ),
                *pos,
            )
        )
        for valid, symbol, name in ((True, "star", "valid end"), (False, "x", "invalid end")):
            ends = [
                p[-1] for p, v in zip(panel["paths"], panel["valid"], strict=True) if v == valid
            ]
            # Each kind of end in the legend once per data set, from a panel that has one.
            first = bool(ends) and name not in legend
            if first:
                legend.add(name)
            out.append(
                (
                    go.Scatter(
                        x=[e[0] for e in ends],
                        y=[e[1] for e in ends],
                        mode="markers",
                        marker={"size": 10, "symbol": symbol, "color": "black"},
                        name=name,
                        showlegend=first,
                        hovertemplate=f"{name}: (%{{x:.2f}}, %{{y:.2f}})<extra></extra>",
                    ),
                    *pos,
                )
            )
    return out


#: Panel titles short enough for two panels side by side on a phone, in the order of the
#: data's panels; the last panel's model is CT trained with x1 protected.
SHORT_TITLES = ("baseline", "CT", "baseline, x1 fixed", "CT, x1 fixed")


def two_d_figure(result: dict[str, Any]) -> go.Figure:
    """Four panels per data set, two by two (baseline and CT, free and with x1 protected); a
    menu picks the data set. A path runs from its factual to a star (valid) or a cross (not
    valid). The colour bar and the legend sit below the panels, so the panels keep the width."""
    first = result["data"][0]
    titles = [*SHORT_TITLES[: len(first["panels"])]]
    fig = make_subplots(
        rows=2,
        cols=2,
        subplot_titles=titles,
        shared_xaxes=True,
        shared_yaxes=True,
        horizontal_spacing=0.06,
        vertical_spacing=0.1,
    )
    counts = []
    for k, d in enumerate(result["data"]):
        traces = _traces(d)
        counts.append(len(traces))
        for trace, row, col in traces:
            trace.visible = k == 0
            fig.add_trace(trace, row, col)
    buttons = []
    start = 0
    total = sum(counts)
    for d, n in zip(result["data"], counts, strict=True):
        visible = [start <= i < start + n for i in range(total)]
        buttons.append({"label": d["label"], "method": "update", "args": [{"visible": visible}]})
        start += n
    fig.update_layout(
        template=TEMPLATE,
        height=760,
        updatemenus=[
            {
                "buttons": buttons,
                "direction": "right",
                "x": 0.0,
                "xanchor": "left",
                "y": 1.07,
                "yanchor": "bottom",
                "type": "buttons",
            }
        ],
        legend={"orientation": "h", "y": -0.22, "yanchor": "top", "x": 0.0},
        margin={"t": 80, "b": 190, "l": 45, "r": 10},
    )
    fig.update_annotations(font_size=13)
    fig.update_xaxes(title_text="x1", row=2)
    fig.update_yaxes(title_text="x2", col=1)
    return fig


@dataclass(frozen=True)
class PanelReading:
    """One panel's searches: how many end valid, of how many; their mean path length (L1) and
    mean reach (L1 from start to end); whether they wander (a path ``WANDERING`` times as long as
    its reach); whether a protected search moved x1."""

    title: str
    valid: int
    searches: int
    length: float
    reach: float
    wanders: bool
    moved_x1: bool


@dataclass(frozen=True)
class TwoDReading:
    """One data set: its panels; whether CT's free searches (second panel) reach further than
    the baseline's (first); the share of grid columns crossable along x2 for the baseline and
    for CT trained with x1 protected (last panel), and whether that training left fewer."""

    label: str
    panels: list[PanelReading]
    ct_further: bool
    crossable: tuple[float, float]
    fewer_crossable: bool


def _panel(panel: dict[str, Any]) -> PanelReading:
    n = len(panel["valid"])
    length, reach = sum(panel["path_l1"]) / n, _mean_reach(panel["paths"])
    return PanelReading(
        panel["title"],
        sum(panel["valid"]),
        n,
        length,
        reach,
        length > WANDERING * reach,
        bool(panel["protected"] and panel["moved_x1"]),
    )


def two_d_readings(result: dict[str, Any]) -> list[TwoDReading]:
    """What the paths of each data set show."""
    out = []
    for d in result["data"]:
        first, last = d["panels"][0], d["panels"][-1]
        crossable = (_crossable(first), _crossable(last))
        out.append(
            TwoDReading(
                d["label"],
                [_panel(panel) for panel in {p["title"]: p for p in d["panels"]}.values()],
                _mean_reach(d["panels"][1]["paths"]) > _mean_reach(first["paths"]),
                crossable,
                crossable[1] < crossable[0],
            )
        )
    return out


def two_d_table(result: dict[str, Any]) -> str:
    """A Markdown table of every panel's searches (``two_d_readings``): how many end valid, their
    mean path length and reach (L1), and how many times its reach a wandering path runs."""
    lines = [
        "| data | panel | valid | path length | reach | wanders |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for r in two_d_readings(result):
        for p in r.panels:
            wanders = f"{p.length / p.reach:.0f}x" if p.wanders else ""
            lines.append(
                f"| {r.label} | {p.title} | {p.valid}/{p.searches} | {p.length:.2f} "
                f"| {p.reach:.2f} | {wanders} |"
            )
    return "\n".join(lines)


def _listed(labels: list[str]) -> str:
    return ", ".join(labels) or "none"


def two_d_text(result: dict[str, Any]) -> str:
    """What the paths show, in a few sentences written from ``two_d_readings``: on which data
    sets CT's free searches end further than the baseline's and on which they are valid more
    or less often, whether a protected search ever moved x1, and per data set the share of
    columns a search along x2 can cross, baseline against CT trained with x1 protected."""
    readings = two_d_readings(result)
    n = len(readings)
    further = [r.label for r in readings if r.ct_further]
    nearer = [r.label for r in readings if not r.ct_further]
    more = [r.label for r in readings if r.panels[1].valid > r.panels[0].valid]
    fewer_valid = [r.label for r in readings if r.panels[1].valid < r.panels[0].valid]
    moved = [f"{r.label} ({p.title})" for r in readings for p in r.panels if p.moved_x1]
    fewer = [r.label for r in readings if r.fewer_crossable]
    return (
        f"CT's free searches end further from their factuals than the baseline's on "
        f"{len(further)} of {n} data sets ({_listed(further)}) and nearer on {len(nearer)} "
        f"({_listed(nearer)}). More of them are valid than the baseline's on {len(more)} "
        f"({_listed(more)}), fewer on {len(fewer_valid)} ({_listed(fewer_valid)}). "
        + (f"x1 moved in {_listed(moved)}." if moved else "No protected search moved x1.")
        + "\n\nA search along x2 alone can cross the boundary in this share of the drawn "
        "columns (x1 fixed), baseline against CT trained with x1 protected: "
        + "; ".join(
            f"{r.label} {r.crossable[0]:.0%} against {r.crossable[1]:.0%}" for r in readings
        )
        + f". Training with x1 protected left fewer columns crossable on {len(fewer)} of {n} "
        f"({_listed(fewer)})."
    )


def _crossable(panel: dict[str, Any]) -> float:
    """The share of the grid's columns (x1 fixed) in which the predicted class changes along x2:
    where a search that may move only x2 can reach the other class within the drawn area."""
    grid = [[p >= 0.5 for p in row] for row in panel["prob"]]  # rows: x2, columns: x1
    columns = list(zip(*grid, strict=True))
    return sum(any(c) and not all(c) for c in columns) / len(columns)


# A path longer than this many times its reach goes back and forth rather than somewhere.
WANDERING = 3.0


def _mean_reach(paths: list[list[list[float]]]) -> float:
    """The mean L1 distance from a path's start to its end: how far the search got, however
    it went (a path's length also counts every step back)."""
    return sum(abs(p[-1][0] - p[0][0]) + abs(p[-1][1] - p[0][1]) for p in paths) / len(paths)
