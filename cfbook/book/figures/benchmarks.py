"""Pictures of recorded benchmarks (``benchmarks/results.json``): the batched search against the
per-sample one (the ``throughput`` benchmark) and the search's peak memory against
``cf_batchsize`` and ``nce`` (the ``memory`` benchmark). Each returns None when its benchmark
was never recorded on that device kind."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from cfbook.book.benchmarks import benchmark_table
from cfbook.book.figures.training import COLOURS, TEMPLATE

__all__ = ["search_memory_figure", "throughput_figure"]

MIB = 2**20


def throughput_figure(kind: str = "cpu") -> go.Figure | None:
    """Counterfactuals per second of ``NativeGenerator`` (all rows in one batch) and of
    ``ReferenceGenerator`` (one sample at a time), per model and ``nce``, on a log scale."""
    rows = benchmark_table("throughput", kind)
    if rows is None:
        return None
    shown = benchmark_table("throughput", kind, text=True)  # the ratios as the table rounds them
    labels = [f"{r['model']}, nce {r['nce']}" for r in rows]
    fig = go.Figure()
    for column, name, colour in (
        ("Native cf/s", "NativeGenerator (batched)", COLOURS["full"]),
        ("Reference cf/s", "ReferenceGenerator (one sample at a time)", COLOURS["vanilla"]),
    ):
        fig.add_bar(
            x=labels,
            y=[r[column] for r in rows],
            name=name,
            marker_color=colour,
            hovertemplate="%{x}: %{y:,.1f} counterfactuals/s<extra>" + name + "</extra>",
        )
    for label, r in zip(labels, shown, strict=True):
        fig.add_annotation(
            x=label,
            y=1.08,
            yref="paper",
            text=f"{r['Native / Reference']} faster",
            showarrow=False,
            font={"size": 13},
        )
    fig.update_layout(
        template=TEMPLATE,
        barmode="group",
        height=380,
        yaxis={"type": "log", "title": "counterfactuals per second"},
        xaxis_title="model and counterfactuals per search (nce)",
        legend={"orientation": "h", "y": -0.25},
        margin={"t": 60},
    )
    return fig


def search_memory_figure(kind: str = "cpu") -> go.Figure | None:
    """Peak memory of one search against ``cf_batchsize`` (nce fixed) and against ``nce``
    (``cf_batchsize`` fixed), beside the size of the stored results."""
    rows = benchmark_table("memory", kind)
    if rows is None:
        return None
    sweeps = {"chunk grows": ("cf_batchsize", 1), "nce grows": ("nce", 2)}
    fig = make_subplots(
        rows=1,
        cols=2,
        shared_yaxes=True,
        subplot_titles=["cf_batchsize grows (nce 512)", "nce grows (cf_batchsize 128)"],
    )
    for sweep, (key, col) in sweeps.items():
        part = [r for r in rows if r["sweep"] == sweep]
        x = [r[key] for r in part]
        for column, name, colour in (
            ("search peak", "peak of the search", COLOURS["full"]),
            (next(k for k in part[0] if k.startswith("results")), "stored results", "#777777"),
        ):
            fig.add_scatter(
                x=x,
                y=[r[column] / MIB for r in part],  # bytes
                mode="lines+markers",
                name=name,
                line={"color": colour},
                legendgroup=name,
                showlegend=col == 1,
                hovertemplate=f"{key} %{{x}}: %{{y:.1f}} MiB<extra>{name}</extra>",
                row=1,
                col=col,
            )
        fig.update_xaxes(type="log", dtick=0.30103, title_text=key, row=1, col=col)
    fig.update_yaxes(title_text="MiB (peak RSS above the start)", row=1, col=1)
    fig.update_layout(
        template=TEMPLATE, height=360, legend={"orientation": "h", "y": -0.3}, margin={"t": 50}
    )
    return fig
