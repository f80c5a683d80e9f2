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
                    colorbar={"title": "p(class 1)"},
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
                        name=f"training data, class {c}",
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


def two_d_figure(result: dict[str, Any]) -> go.Figure:
    """Four panels per data set (baseline, CT, each searched with x1 protected); a menu picks
    the data set. A path runs from its factual to a star (valid) or a cross (not valid)."""
    first = result["data"][0]
    fig = make_subplots(
        rows=2, cols=2, subplot_titles=[p["title"] for p in first["panels"]], shared_xaxes=True
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
        height=720,
        updatemenus=[
            {"buttons": buttons, "direction": "right", "x": 0.0, "y": 1.12, "type": "buttons"}
        ],
        legend={"orientation": "h", "y": -0.08},
        margin={"t": 90},
    )
    fig.update_xaxes(title_text="x1")
    fig.update_yaxes(title_text="x2")
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


def two_d_text(result: dict[str, Any]) -> str:
    """Per data set, what the paths show (``two_d_readings``): how far the searches travel (L1)
    for the baseline and for CT, how many end valid, and whether a protected search ever moved
    along x1."""
    readings = two_d_readings(result)
    lines = []
    for r in readings:
        parts = []
        for p in r.panels:
            part = (
                f"{p.title}: {p.valid}/{p.searches} valid, mean path length {p.length:.2f}, "
                f"reach {p.reach:.2f}"
            )
            if p.wanders:
                part += (
                    f" (the paths wander: {p.length / p.reach:.0f} times as long as their reach)"
                )
            parts.append(part)
        moved = [p.title for p in r.panels if p.moved_x1]
        frozen = "x1 moved in " + ", ".join(moved) if moved else "no protected search moved x1"
        lines.append(f"- **{r.label}**: " + "; ".join(parts) + f"; {frozen}.")
    further = [r.label for r in readings if r.ct_further]
    lines.append(
        f"\nCT's free searches end further from their factuals than the baseline's on "
        f"{len(further)} of {len(readings)} data sets ({', '.join(further) or 'none'})."
    )
    fewer = [r.label for r in readings if r.fewer_crossable]
    lines.append(
        "\nA search with x1 protected can reach the other class only where the class changes "
        "along x2. In the drawn grid it does so in this share of the columns (x1 fixed), "
        "baseline against CT trained with x1 protected: "
        + "; ".join(
            f"{r.label} {r.crossable[0]:.0%} against {r.crossable[1]:.0%}" for r in readings
        )
        + f". Training with x1 protected left fewer columns crossable on {len(fewer)} of "
        f"{len(readings)} data sets ({', '.join(fewer) or 'none'}). One seed's models: the "
        "reproduction chapter's validity table counts the protected searches of three seeds "
        "beside the paper's."
    )
    return "\n".join(lines)


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
