"""Figures and run summaries for the book's chapters.

The chapters only call these functions, so every number a reader sees (in a figure or in the
text around it) is computed here from the training logs of the run that produced them.
Figures are displayed without an inlined copy of plotly.js: pages load one shared copy.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable
from dataclasses import fields
from typing import TYPE_CHECKING

import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

from cfbook.search.generators import SearchParameters

if TYPE_CHECKING:
    from cfbook.book.profiles import Profile

#: One colour per objective, shared by its curves, average lines and annotations.
COLOURS = {"full": "#1f6fb4", "vanilla": "#e8710a"}
BURNIN_COLOUR = "#444444"
TEMPLATE = "plotly_white"
#: How every figure is shown: it follows its container's width, and without a mode bar (drag to
#: zoom, double-click to reset), which on a phone would sit on the titles.
CONFIG = {"responsive": True, "displayModeBar": False}


def show(fig: go.Figure) -> None:
    """Display a figure as HTML that relies on the page's shared plotly.min.js.

    The plotly JSON travels alongside for front ends (JupyterLab, VS Code) that render it natively.
    The div id is derived from the figure so re-executing a notebook does not churn its outputs.
    On the site, cfbook/book/site/figures.js then fits the figure to the page column.
    """
    from IPython.display import display

    spec = fig.to_json()
    div_id = "cfbook-" + hashlib.sha1(spec.encode()).hexdigest()[:12]
    bundle = {
        "text/html": fig.to_html(
            full_html=False,
            include_plotlyjs=False,
            div_id=div_id,
            auto_play=False,
            config=CONFIG,
        ),
        "application/vnd.plotly.v1+json": json.loads(spec),
    }
    display(bundle, raw=True)


def sample_digits_figure(x: torch.Tensor, y: torch.Tensor, n: int = 16) -> go.Figure:
    """A grid of the first ``n`` digits of ``x`` (rows in [-1, 1]) titled with their labels.

    Pixels are stored as 8-bit ink (0 for -1, 255 for +1), which is exact for MNIST and keeps
    the figure a quarter of the size of float pixels in the notebook and the page.
    """
    if x.ndim != 2 or x.shape[1] != 784:
        raise ValueError(f"x must have shape (N, 784), got {tuple(x.shape)}")
    if y.ndim != 1 or y.shape[0] != x.shape[0]:
        raise ValueError(f"y must have shape ({x.shape[0]},), got {tuple(y.shape)}")
    if not 1 <= n <= x.shape[0]:
        raise ValueError(f"n must be between 1 and {x.shape[0]} (the number of samples), got {n}")
    # One small host copy for drawing; this is not a training loop.
    ink = ((x[:n].detach().float().clamp(-1.0, 1.0) + 1.0) * 127.5).round().to(torch.uint8)
    images = ink.cpu().reshape(n, 28, 28).numpy()
    labels = y[:n].detach().cpu().tolist()
    cols = min(8, n)
    rows = math.ceil(n / cols)
    fig = make_subplots(
        rows=rows,
        cols=cols,
        subplot_titles=[f"label {label}" for label in labels],
        horizontal_spacing=0.01,
        vertical_spacing=0.08,
    )
    for i, image in enumerate(images):
        fig.add_trace(
            go.Heatmap(
                z=image,
                coloraxis="coloraxis",
                hovertemplate="row %{y}, col %{x}: ink %{z} of 255<extra></extra>",
            ),
            row=i // cols + 1,
            col=i % cols + 1,
        )
    fig.update_xaxes(visible=False, constrain="domain")
    fig.update_yaxes(visible=False, autorange="reversed", constrain="domain")
    for i in range(n):  # square pixels: each y axis follows its own x axis
        suffix = "" if i == 0 else str(i + 1)
        fig.layout[f"yaxis{suffix}"].scaleanchor = f"x{suffix}"
    fig.update_annotations(font_size=11)
    fig.update_layout(
        template=TEMPLATE,
        coloraxis={
            "colorscale": [[0, "white"], [1, "black"]],
            "cmin": 0,
            "cmax": 255,
            "showscale": False,
        },
        height=130 * rows + 40,
        margin={"l": 10, "r": 10, "t": 30, "b": 10},
    )
    return fig


def profile_table(profiles: Iterable[Profile]) -> str:
    """A Markdown table with one column per profile, so the settings can be compared at a glance.

    The burn-in row also gives the number of epochs, ``round(burnin * nepochs)``, as training does.
    """
    profiles = list(profiles)
    if not profiles:
        raise ValueError("profiles is empty: pass at least one cfbook.book.profiles.Profile")
    names = [f.name for f in fields(profiles[0]) if f.name != "name"]
    lines = [
        "| setting | " + " | ".join(f"`{p.name}`" for p in profiles) + " |",
        "|---|" + "---:|" * len(profiles),
    ]
    for name in names:
        cells = [_setting(p, name) for p in profiles]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _setting(profile: Profile, name: str) -> str:
    """One profile setting as the table shows it."""
    value = getattr(profile, name)
    if name == "burnin":
        epochs = round(value * profile.nepochs)
        return f"{value:g} ({epochs} epoch{'' if epochs == 1 else 's'})"
    if name == "n" and value is None:
        return "all"
    if name == "evaluation":
        attacked = value.attack_samples or "all"
        eps = ", ".join(f"{e:g}" for e in value.epsilons)
        return f"FGSM and PGD at eps {eps} on {attacked} held-out digits; a gallery of 10"
    if name == "paired":
        return f"{value.rounds} rounds x {value.individuals} factuals per energy weight"
    if isinstance(value, tuple):
        return ", ".join(f"{v:g}" for v in value)
    return f"{value:g}" if isinstance(value, float) else str(value)


def energy_schedule_figure(searches: dict[str, SearchParameters]) -> go.Figure:
    """The energy weight lambda_energy * phi_t of each named search over its iterations: the pull
    towards typical target-class inputs is strongest at the first steps."""
    fig = go.Figure()
    for name, search in searches.items():
        steps = list(range(search.maxiter))
        fig.add_scatter(
            x=steps, y=[search.energy_weight(t) for t in steps], mode="lines+markers", name=name
        )
    fig.update_layout(
        template=TEMPLATE,
        height=320,
        xaxis_title="search iteration t",
        yaxis_title="λ_energy · φ_k",
        # Above the plot: on a narrow screen the legend wraps upwards, clear of the axis title.
        legend={"orientation": "h", "x": 0, "y": 1.02, "yanchor": "bottom"},
        margin={"t": 40},
    )
    return fig
