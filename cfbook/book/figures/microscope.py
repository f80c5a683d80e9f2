"""One search under the microscope (``cfbook.book.microscope``): a slider over the iterates of
the same digit's search on the baseline and on the CT model, and text written from them."""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots
from torch import Tensor

from cfbook.book.figures.evaluation import _CHANGE_SCALE, _IMAGE_SCALE, NAMES
from cfbook.book.figures.training import COLOURS, TEMPLATE
from cfbook.evaluation.protocol import decode_levels

__all__ = ["microscope_figure", "microscope_text"]

_ROWS = ("vanilla", "full")


def _levels(search: dict[str, Any], steps: int) -> Tensor:
    """``(steps, 28, 28)`` ink levels, one image per step; the path is frozen after the search
    stopped, so its last stored iterate repeats."""
    path = decode_levels(search["path"])
    return path[[min(t, path.shape[0] - 1) for t in range(steps)]].reshape(steps, 28, 28)


def _x_axis(n: int) -> str:
    """Plotly's name of the n-th x axis: the first has no number."""
    return "x" if n == 1 else f"x{n}"


def _frame_data(images: Tensor, search: dict[str, Any], t: int) -> list[go.BaseTraceType]:
    """The traces that move with the slider, at step ``t``: image, change, both curves' point."""
    return [
        go.Heatmap(z=images[t].tolist()),
        go.Heatmap(z=(images[t] - images[0]).tolist()),
        go.Scatter(x=[t], y=[search["target_prob"][t]]),
        go.Scatter(x=[t], y=[search["distance"][t]]),
    ]


def microscope_figure(result: dict[str, Any]) -> go.Figure:
    """Per model (rows): the iterate, its change from the factual (blue: ink added), the target
    probability with τ and the L-inf distance from the factual with ε, over the steps; a slider
    moves through the steps. Diamonds mark the adversarial example (the last iterate within ε),
    stars the counterfactual (where the search stopped)."""
    meta, searches = result["meta"], result["searches"]
    tau, eps = meta["search"]["tau"], meta["search"]["epsilon"]
    last = max(1, *(s["counterfactual_at"] for s in searches.values()))
    steps = min(last + 2, len(next(iter(searches.values()))["target_prob"]))
    images = {mode: _levels(searches[mode], steps) for mode in _ROWS}
    titles = []
    for mode in _ROWS:
        s = searches[mode]
        outcome = "valid" if s["valid"] else "not valid"
        titles += [
            f"{NAMES[mode]}: iterate",
            "change (blue: ink added)",
            f"p(target) ({outcome} at step {s['counterfactual_at']})",
            "L-inf distance from the factual",
        ]
    fig = make_subplots(
        rows=2,
        cols=4,
        subplot_titles=titles,
        column_widths=[0.2, 0.2, 0.3, 0.3],
        horizontal_spacing=0.06,
        vertical_spacing=0.16,
    )
    x = list(range(steps))
    moving = []  # the traces each frame replaces, in _frame_data's order per row
    for row, mode in enumerate(_ROWS, start=1):
        s, colour = searches[mode], COLOURS[mode]
        start = _frame_data(images[mode], s, steps - 1)
        start[0].update(coloraxis="coloraxis", hovertemplate="ink %{z} of 255<extra></extra>")
        start[1].update(coloraxis="coloraxis2", hovertemplate="change %{z} of 255<extra></extra>")
        for col, trace in enumerate(start[:2], start=1):
            moving.append(len(fig.data))
            fig.add_trace(trace, row=row, col=col)
        for col, key, line, line_name in (
            (3, "target_prob", tau, "τ"),
            (4, "distance", eps, "ε"),
        ):
            moving.append(len(fig.data))
            fig.add_trace(
                start[col - 1].update(
                    mode="markers",
                    marker={"size": 11, "color": "black"},
                    name="this step",
                    showlegend=row == 1 and col == 3,
                    hoverinfo="skip",
                ),
                row=row,
                col=col,
            )
            fig.add_scatter(
                x=x,
                y=s[key][:steps],
                mode="lines",
                line={"color": colour},
                showlegend=False,
                hovertemplate=f"step %{{x}}: %{{y:.3f}}<extra>{NAMES[mode]}</extra>",
                row=row,
                col=col,
            )
            for at, symbol, name in (
                ("adversarial_at", "diamond", "adversarial example"),
                ("counterfactual_at", "star", "counterfactual"),
            ):
                fig.add_scatter(
                    x=[s[at]],
                    y=[s[key][s[at]]],
                    mode="markers",
                    marker={"symbol": symbol, "size": 14, "color": colour, "line": {"width": 1}},
                    name=name,
                    legendgroup=name,
                    showlegend=row == 1 and col == 3,
                    hovertemplate=f"{name}: step %{{x}}<extra>{NAMES[mode]}</extra>",
                    row=row,
                    col=col,
                )
            fig.add_hline(
                y=line,
                line_dash="dash",
                annotation_text=f"{line_name} = {line:g}",
                annotation_position="top right",
                row=row,
                col=col,
            )
            fig.update_xaxes(title_text="search step", range=[-0.5, steps - 0.5], row=row, col=col)
        fig.update_yaxes(title_text="p(target)", range=[0, 1.05], row=row, col=3)
        fig.update_yaxes(title_text="max pixel change ([-1, 1] units)", row=row, col=4)
        for col in (1, 2):
            fig.update_xaxes(visible=False, constrain="domain", row=row, col=col)
            fig.update_yaxes(
                visible=False,
                autorange="reversed",
                constrain="domain",
                scaleanchor=_x_axis((row - 1) * 4 + col),
                row=row,
                col=col,
            )
    fig.frames = [
        go.Frame(
            name=str(t),
            data=[d for mode in _ROWS for d in _frame_data(images[mode], searches[mode], t)],
            traces=moving,
        )
        for t in range(steps)
    ]
    fig.update_layout(
        template=TEMPLATE,
        height=640,
        margin={"l": 10, "r": 10, "t": 70, "b": 10},
        coloraxis={"colorscale": _IMAGE_SCALE, "cmin": 0, "cmax": 255, "showscale": False},
        coloraxis2={"colorscale": _CHANGE_SCALE, "cmin": -255, "cmax": 255, "showscale": False},
        legend={"orientation": "h", "y": 1.1, "x": 0.45},
        title=f"Digit {meta['factual']} → {meta['target']}, searched step by step in both models",
        sliders=[
            {
                "active": steps - 1,
                "currentvalue": {"prefix": "search step "},
                "pad": {"t": 40},
                "steps": [
                    {
                        "label": str(t),
                        "method": "animate",
                        "args": [
                            [str(t)],
                            {"mode": "immediate", "frame": {"duration": 0, "redraw": True}},
                        ],
                    }
                    for t in range(steps)
                ],
            }
        ],
    )
    return fig


def microscope_text(result: dict[str, Any]) -> str:
    """What the two searches did, from their iterates: when each reached τ, where its adversarial
    example was taken and how far its counterfactual lies from the factual."""
    meta, searches = result["meta"], result["searches"]
    tau, eps = meta["search"]["tau"], meta["search"]["epsilon"]
    parts = []
    for mode in _ROWS:
        s = searches[mode]
        path = decode_levels(s["path"]).float()
        l1 = float((path[-1] - path[0]).abs().sum()) / 255 * (meta["domain"][1] - meta["domain"][0])
        stop, adv = s["counterfactual_at"], s["adversarial_at"]
        reached = (
            f"reached τ = {tau:g} after {stop} step{'s' * (stop != 1)} (p = "
            f"{s['target_prob'][stop]:.2f})"
            if s["valid"]
            else f"did not reach τ = {tau:g} in {stop} steps (p = {s['target_prob'][stop]:.2f})"
        )
        nascent = (
            "its adversarial example is the unchanged factual: the first step already left the "
            f"ε = {eps:g} box"
            if adv == 0
            else f"its adversarial example is step {adv}, the last within ε = {eps:g}"
        )
        parts.append(
            f"the {NAMES[mode]} search {reached}; {nascent}; its counterfactual lies at L-inf "
            f"{s['distance'][stop]:.2f} and L1 {l1:.1f} from the factual"
        )
    return (
        f"For this digit {meta['factual']} (held-out digit {meta['index']}, target "
        f"{meta['target']}), "
        + "; ".join(parts)
        + ". Distances are in the units of the [-1, 1] pixel domain; L1 sums over the 784 pixels."
    )
