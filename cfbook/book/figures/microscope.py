"""One search under the microscope (``cfbook.book.microscope``): a slider over the iterates of
the same digit's search on the baseline and on the CT model, and text written from them."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots
from torch import Tensor

from cfbook.book.evaluation import decode_levels
from cfbook.book.figures.evaluation import _CHANGE_SCALE, _IMAGE_SCALE, NAMES
from cfbook.book.figures.training import COLOURS, TEMPLATE

__all__ = ["microscope_figure", "microscope_searches", "microscope_text"]

_ROWS = ("vanilla", "full")


def _levels(search: dict[str, Any], steps: int) -> Tensor:
    """``(steps, 28, 28)`` ink levels, one image per step; the path is frozen after the search
    stopped, so its last stored iterate repeats."""
    path = decode_levels(search["path"])
    return path[[min(t, path.shape[0] - 1) for t in range(steps)]].reshape(steps, 28, 28)


_CURVES = (("target_prob", "tau", "τ"), ("distance", "epsilon", "ε"))


def _frame_data(images: dict[str, Tensor], searches: dict[str, Any], t: int) -> list:
    """The traces that move with the slider, at step ``t``: each model's iterate and change,
    then each curve's point of each model (the order in which the figure adds them)."""
    data: list[go.BaseTraceType] = []
    for mode in _ROWS:
        data += [
            go.Heatmap(z=images[mode][t].to(torch.uint8).numpy()),
            go.Heatmap(z=(images[mode][t] - images[mode][0]).numpy()),
        ]
    for key, _, _ in _CURVES:
        data += [go.Scatter(x=[t], y=[searches[mode][key][t]]) for mode in _ROWS]
    return data


def microscope_figure(result: dict[str, Any]) -> go.Figure:
    """Top: each model's iterate and its change from the factual (blue: ink added). Below: the
    target probability with τ and the L-inf distance from the factual with ε over the steps, one
    line per model. A slider moves through the steps; diamonds mark the adversarial example (the
    last iterate within ε), stars the counterfactual (where the search stopped)."""
    meta, searches = result["meta"], result["searches"]
    search = meta["search"]
    last = max(1, *(s["counterfactual_at"] for s in searches.values()))
    steps = min(last + 2, len(next(iter(searches.values()))["target_prob"]))
    images = {mode: _levels(searches[mode], steps) for mode in _ROWS}
    # Short titles, so that the four images of the top row fit a phone's column.
    titles = [t for mode in _ROWS for t in (NAMES[mode], "Δ")]
    titles += ["target probability", "L-inf from the factual"]
    # The two curves stacked under the images: each gets the column's full width on a phone.
    wide = [{"colspan": 4}, None, None, None]
    fig = make_subplots(
        rows=3,
        cols=4,
        specs=[[{}] * 4, wide, wide],
        subplot_titles=titles,
        row_heights=[0.3, 0.35, 0.35],
        horizontal_spacing=0.04,
        vertical_spacing=0.09,
    )
    start = _frame_data(images, searches, steps - 1)
    for i in range(len(_ROWS)):
        image, change = start[2 * i : 2 * i + 2]
        image.update(coloraxis="coloraxis", hovertemplate="ink %{z} of 255<extra></extra>")
        change.update(coloraxis="coloraxis2", hovertemplate="change %{z} of 255<extra></extra>")
        fig.add_trace(image, row=1, col=2 * i + 1)
        fig.add_trace(change, row=1, col=2 * i + 2)
    x = list(range(steps))
    for c, (key, setting, symbol) in enumerate(_CURVES):
        row, col = 2 + c, 1
        for i, mode in enumerate(_ROWS):
            s, colour = searches[mode], COLOURS[mode]
            fig.add_trace(
                start[4 + 2 * c + i].update(
                    mode="markers",
                    marker={"size": 11, "color": "black"},
                    name="this step",
                    legendgroup="this step",
                    showlegend=c == i == 0,
                    hoverinfo="skip",
                ),
                row=row,
                col=col,
            )
            outcome = "valid" if s["valid"] else "not valid"
            fig.add_scatter(
                x=x,
                y=s[key][:steps],
                mode="lines",
                line={"color": colour},
                name=f"{NAMES[mode]} ({outcome} at step {s['counterfactual_at']})",
                legendgroup=mode,
                showlegend=c == 0,
                hovertemplate=f"step %{{x}}: %{{y:.3f}}<extra>{NAMES[mode]}</extra>",
                row=row,
                col=col,
            )
            for at, marker, name in (
                ("adversarial_at", "diamond", "adversarial example"),
                ("counterfactual_at", "star", "counterfactual"),
            ):
                fig.add_scatter(
                    x=[s[at]],
                    y=[s[key][s[at]]],
                    mode="markers",
                    marker={"symbol": marker, "size": 14, "color": colour, "line": {"width": 1}},
                    name=name,
                    legendgroup=name,
                    showlegend=c == i == 0,
                    hovertemplate=f"{name}: step %{{x}}<extra>{NAMES[mode]}</extra>",
                    row=row,
                    col=col,
                )
        fig.add_hline(
            y=search[setting],
            line_dash="dash",
            annotation_text=f"{symbol} = {search[setting]:g}",
            annotation_position="bottom right",
            row=row,
            col=col,
        )
        fig.update_xaxes(range=[-0.5, steps - 0.5], row=row, col=col)
    fig.update_xaxes(title_text="search step", row=3, col=1)
    fig.update_yaxes(title_text="p(target)", range=[0, 1.05], row=2, col=1)
    fig.update_yaxes(title_text="L-inf", row=3, col=1)
    for col in range(1, 5):
        fig.update_xaxes(visible=False, constrain="domain", row=1, col=col)
        fig.update_yaxes(
            visible=False,
            autorange="reversed",
            constrain="domain",
            scaleanchor=_x_axis(col),
            row=1,
            col=col,
        )
    moving = [i for i, trace in enumerate(fig.data) if trace.type == "heatmap"]
    moving += [i for i, trace in enumerate(fig.data) if trace.name == "this step"]
    fig.frames = [
        go.Frame(name=str(t), data=_frame_data(images, searches, t), traces=moving)
        for t in range(steps)
    ]
    fig.update_layout(
        template=TEMPLATE,
        height=820,
        margin={"l": 10, "r": 10, "t": 60, "b": 10},
        coloraxis={"colorscale": _IMAGE_SCALE, "cmin": 0, "cmax": 255, "showscale": False},
        coloraxis2={"colorscale": _CHANGE_SCALE, "cmin": -255, "cmax": 255, "showscale": False},
        legend={"orientation": "h", "y": -0.3},
        title=f"Digit {meta['factual']} → {meta['target']}, step by step",
        sliders=[
            {
                "active": steps - 1,
                "currentvalue": {"prefix": "search step "},
                "pad": {"t": 10},
                "y": -0.08,
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


def _x_axis(n: int) -> str:
    """Plotly's name of the n-th x axis: the first has no number."""
    return "x" if n == 1 else f"x{n}"


class Adversarial(Enum):
    """Where a search's adversarial example (its last iterate within ε) was taken."""

    STEP = "step"  # at a step of the search
    FACTUAL = "factual"  # the factual: the first step already left the ε box
    NEVER_MOVED = "never moved"  # the factual: the search took no step


@dataclass(frozen=True)
class SearchReading:
    """One search under the microscope: whether it reached τ, where it stopped and its target
    probability there, where its adversarial example was taken, and how far its counterfactual
    lies from the factual (L-inf and L1, in the domain's units)."""

    valid: bool
    stop: int
    target_prob: float
    adversarial: Adversarial
    adversarial_at: int
    linf: float
    l1: float


def microscope_searches(result: dict[str, Any]) -> dict[str, SearchReading]:
    """Each model's search (baseline first), read from its recorded iterates."""
    meta, searches = result["meta"], result["searches"]
    out = {}
    for mode in _ROWS:
        s = searches[mode]
        path = decode_levels(s["path"]).float()
        l1 = float((path[-1] - path[0]).abs().sum()) / 255 * (meta["domain"][1] - meta["domain"][0])
        stop, adv = s["counterfactual_at"], s["adversarial_at"]
        where = (
            Adversarial.STEP
            if adv > 0
            else Adversarial.FACTUAL
            if stop > 0
            else Adversarial.NEVER_MOVED
        )
        out[mode] = SearchReading(
            s["valid"], stop, s["target_prob"][stop], where, adv, s["distance"][stop], l1
        )
    return out


def microscope_text(result: dict[str, Any]) -> str:
    """What the two searches did (``microscope_searches``): when each reached τ, where its
    adversarial example was taken and how far its counterfactual lies from the factual."""
    meta = result["meta"]
    tau, eps = meta["search"]["tau"], meta["search"]["epsilon"]
    parts = []
    for mode, r in microscope_searches(result).items():
        steps = f"{r.stop} step{'s' * (r.stop != 1)} (p = {r.target_prob:.2f})"
        reached = (
            f"reached τ = {tau:g} after {steps}"
            if r.valid
            else f"did not reach τ = {tau:g} in {steps}"
        )
        nascent = {
            Adversarial.STEP: f"its adversarial example is step {r.adversarial_at}, the last "
            f"within ε = {eps:g}",
            Adversarial.FACTUAL: "its adversarial example is the unchanged factual: the first "
            f"step already left the ε = {eps:g} box",
            Adversarial.NEVER_MOVED: "it never moved, so its adversarial example is the factual "
            "itself",
        }[r.adversarial]
        parts.append(
            f"the {NAMES[mode]} search {reached}; {nascent}; its counterfactual lies at L-inf "
            f"{r.linf:.2f} and L1 {r.l1:.1f} from the factual"
        )
    return (
        f"For this digit {meta['factual']} (held-out digit {meta['index']}, target "
        f"{meta['target']}), "
        + "; ".join(parts)
        + ". Distances are in the units of the [-1, 1] pixel domain; L1 sums over the 784 pixels."
    )
