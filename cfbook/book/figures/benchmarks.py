"""Pictures of recorded benchmarks (``benchmarks/results.json``): the batched search against the
per-sample one (the ``throughput`` benchmark) and the search's peak memory against
``cf_batchsize`` and ``nce`` (the ``memory`` benchmark). Each returns None when its benchmark
was never recorded on that device kind."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from cfbook.book.benchmarks import benchmark_record, benchmark_table, run_label
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
    labels = [f"{r['model']}<br>{r['nce']}" for r in rows]
    fig = go.Figure()
    for column, name, colour in (
        ("Native cf/s", "batched (NativeGenerator)", COLOURS["full"]),
        ("Reference cf/s", "one at a time (ReferenceGenerator)", COLOURS["vanilla"]),
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
            text=r["Native / Reference"],
            showarrow=False,
            font={"size": 11},
        )
    fig.update_layout(
        template=TEMPLATE,
        barmode="group",
        height=380,
        yaxis={"type": "log", "title": "counterfactuals per second"},
        # Each group is labelled by its model and nce on two lines; no axis title under them.
        legend={"orientation": "h", "y": -0.3},
        margin={"t": 60},
    )
    return fig


def search_memory_figure(kinds: str | tuple[str, ...] = "cpu") -> go.Figure | None:
    """Peak memory of one search against ``cf_batchsize`` (nce fixed, top) and against ``nce``
    (``cf_batchsize`` fixed, bottom) on each device kind recorded, beside the size of the stored
    results (``kinds``: one device kind or several). On a GPU the peak is the allocator's, on a
    CPU the resident memory's."""
    kinds = (kinds,) if isinstance(kinds, str) else kinds
    recorded = {kind: benchmark_table("memory", kind) for kind in kinds}
    recorded = {kind: rows for kind, rows in recorded.items() if rows is not None}
    if not recorded:
        return None
    sweeps = {"chunk grows": ("cf_batchsize", 1), "nce grows": ("nce", 2)}
    fig = make_subplots(
        rows=2,
        cols=1,
        vertical_spacing=0.22,
        subplot_titles=["cf_batchsize grows (nce 512)", "nce grows (cf_batchsize 128)"],
    )
    colours = {"cpu": COLOURS["vanilla"], "cuda": COLOURS["full"]}
    for k, (kind, rows) in enumerate(recorded.items()):
        what = "allocator peak" if kind == "cuda" else "peak RSS"
        series = [
            (
                "search peak",
                f"{run_label(benchmark_record('memory', kind)['provenance'])}: {what}",
                colours.get(kind, "#333333"),
            )
        ]
        if k == 0:  # the same on every device
            results = next(c for c in rows[0] if c.startswith("results"))
            series.append((results, "stored results", "#777777"))
        for sweep, (key, row) in sweeps.items():
            part = [r for r in rows if r["sweep"] == sweep]
            for column, name, colour in series:
                fig.add_scatter(
                    x=[r[key] for r in part],
                    y=[r[column] / MIB for r in part],  # bytes
                    mode="lines+markers",
                    name=name,
                    line={"color": colour},
                    legendgroup=name,
                    showlegend=row == 1,
                    hovertemplate=f"{key} %{{x}}: %{{y:.1f}} MiB<extra>{name}</extra>",
                    row=row,
                    col=1,
                )
            fig.update_xaxes(type="log", dtick=0.30103, title_text=key, row=row, col=1)
            fig.update_yaxes(title_text="MiB above the start", row=row, col=1)
    fig.update_layout(
        template=TEMPLATE, height=560, legend={"orientation": "h", "y": -0.2}, margin={"t": 40}
    )
    return fig
