"""The comparison of both objectives over all their training seeds: a figure with each measure's
mean and spread, and text whose verdicts follow from statistics that answer the question.

Conventions, stated on every table and sentence: accuracy differences in percentage points,
changes of distances in relative %, positive = CT better. A difference is called a difference
only when every seed agrees on its sign and the mean exceeds twice its standard error over the
seeds; otherwise the two are "comparable".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from cfbook.book.figures.training import BURNIN_COLOUR, COLOURS, TEMPLATE
from cfbook.book.report import Difference, clear_difference, difference
from cfbook.evaluation.statistics import mean_of, mean_se
from cfbook.training.log import TrainingLog

LAST_EPOCHS = 3  # accuracy is compared over the last this many recorded epochs of each seed


def _burnin(logs: Sequence[TrainingLog]) -> int:
    return int(logs[0].meta.get("burnin_epochs", 0))


def _late(log: TrainingLog, field: str, last: int) -> float | None:
    values = [getattr(r, field) for r in log if getattr(r, field) is not None]
    return mean_of(values[-last:])


def seeds_summary(
    full: Sequence[TrainingLog], vanilla: Sequence[TrainingLog], last: int = LAST_EPOCHS
) -> dict[str, Any]:
    """The numbers the main example quotes of the ResNet runs, over every seed (run k of CT
    against run k of the baseline, which start from the same weights and see the same
    batches)."""
    if not full or len(full) != len(vanilla):
        raise ValueError(f"need as many CT as baseline runs, got {len(full)} and {len(vanilla)}")
    burnin = _burnin(full)
    post = {
        name: [mean_of([r.time_taken for r in log if r.epoch > burnin]) for log in logs]
        for name, logs in (("full", full), ("vanilla", vanilla))
    }
    acc = {
        name: [_late(log, "acc_val", last) for log in logs]
        for name, logs in (("full", full), ("vanilla", vanilla))
    }
    acc_diffs = [
        100 * (a - b)
        for a, b in zip(acc["full"], acc["vanilla"], strict=True)
        if None not in (a, b)
    ]
    cf = [[r for r in log if r.epoch > burnin and r.implaus is not None] for log in full]
    valid = [mean_of([r.percent_valid for r in epochs]) for epochs in cf]
    # The trend of the energy differential over the valid counterfactuals, first to last search
    # epoch, as a relative change (positive: it fell, i.e. CT better); and how much the average
    # over all counterfactuals fell, to show when that average tells another story.
    trends, trends_all, ends = [], [], []
    for epochs in cf:
        iv = [r.implaus_valid for r in epochs if r.implaus_valid is not None]
        if len(iv) >= 2 and iv[0] != 0:
            trends.append(100 * (iv[0] - iv[-1]) / abs(iv[0]))
            ends.append((iv[0], iv[-1]))
        ia = [r.implaus for r in epochs]
        if len(ia) >= 2:
            trends_all.append(ia[0] - ia[-1])  # absolute: it often starts at exactly 0
    return {
        "seeds": [log.meta.get("seed") for log in full],
        "mature": full[0].meta.get("mature"),
        "nepochs": len(full[0]),
        "burnin_epochs": burnin,
        "time_full": mean_of(post["full"]),
        "time_vanilla": mean_of(post["vanilla"]),
        "acc_diffs_pp": acc_diffs,
        "valid_per_seed": valid,
        "implaus_valid_trend_pct": trends,
        "implaus_valid_ends": ends,
        "implaus_fall": trends_all,
        "last_epochs": last,
    }


def _spread(values: Sequence[float], unit: str, digits: int = 1) -> str:
    stat = mean_se(values)
    mean, se = stat["mean"], stat["se"]
    text = f"{mean:+.{digits}f}{unit}"
    return text if se is None else f"{text} ± {se:.{digits}f}"


class Trend(Enum):
    """How the energy differential over the valid counterfactuals moved over the search
    epochs, over the seeds."""

    FELL = "fell"  # in every seed, clearly (CT better)
    ROSE = "rose"  # in every seed, clearly
    MIXED = "mixed"  # no consistent change
    NOT_MEASURED = "not measured"  # too few valid counterfactuals to follow it


@dataclass(frozen=True)
class ComparisonVerdict:
    """What ``seeds_summary`` says: accuracy (None: no seed to compare), the plausibility
    trend, and whether the average over all counterfactuals moved the other way."""

    accuracy: Difference | None
    plausibility: Trend
    other_way: bool


def seeds_verdict(s: dict[str, Any]) -> ComparisonVerdict:
    """The ResNet runs' verdicts, from ``seeds_summary``: a difference or a trend only
    where every seed agrees on its sign and the mean exceeds twice its standard error."""
    diffs, trends, all_trends = s["acc_diffs_pp"], s["implaus_valid_trend_pct"], s["implaus_fall"]
    if not trends:
        trend = Trend.NOT_MEASURED
    elif clear_difference(trends):
        trend = Trend.FELL if sum(trends) > 0 else Trend.ROSE
    else:
        trend = Trend.MIXED
    other_way = (
        trend in (Trend.FELL, Trend.ROSE)
        and bool(all_trends)
        and (sum(all_trends) > 0) != (sum(trends) > 0)
    )
    return ComparisonVerdict(difference(diffs) if diffs else None, trend, other_way)


_ACCURACY = {
    Difference.HIGHER: "higher with CT",
    Difference.LOWER: "lower with CT",
    Difference.ONE_SEED: "one seed: no spread between seeds to tell a difference from",
    Difference.COMPARABLE: "comparable: the difference is within the spread between seeds",
}
_TREND = {
    Trend.FELL: "it fell in every seed: the model gives the counterfactuals that reach their "
    "target less evidence relative to real target-class samples",
    Trend.ROSE: "it rose in every seed: the model gives the counterfactuals that reach their "
    "target more evidence relative to real target-class samples, the opposite of what the term "
    "asks",
    Trend.MIXED: "no consistent change across the seeds",
}


def seeds_markdown(s: dict[str, Any]) -> str:
    """The ResNet runs' verdicts (``seeds_verdict``), from ``seeds_summary``."""
    verdict = seeds_verdict(s)
    n, seeds = len(s["seeds"]), ", ".join(map(str, s["seeds"]))
    out = [
        f"**Runs:** {n} seed{'s' if n != 1 else ''} per objective ({seeds}), "
        f"{s['nepochs']} epochs, the first {s['burnin_epochs']} without counterfactuals; invalid "
        f"counterfactuals count as {'their neighbour' if s['mature'] == 'neighbour' else 'found'} "
        f'(mature="{s["mature"]}"). Accuracy differences are in percentage points, positive = '
        "CT better."
    ]
    if s["time_full"] and s["time_vanilla"]:
        out.append(
            f"**Cost:** after burn-in an epoch took {s['time_full']:.1f} s with CT against "
            f"{s['time_vanilla']:.1f} s for the baseline ({s['time_full'] / s['time_vanilla']:.1f} "
            "times as long), averaged over the seeds."
        )
    diffs = s["acc_diffs_pp"]
    if verdict.accuracy is not None:
        per_seed = ", ".join(f"{d:+.1f}" for d in diffs)
        out.append(
            f"**Accuracy:** held-out accuracy over the last {s['last_epochs']} recorded epochs, CT "
            f"minus baseline: {_spread(diffs, ' pp')} over the seeds ({per_seed} pp): "
            f"{_ACCURACY[verdict.accuracy]}."
        )
    valid = [v for v in s["valid_per_seed"] if v is not None]
    if valid:
        out.append(
            f"**Search:** after burn-in {100 * mean_of(valid):.0f} % of the training-time "
            f"counterfactuals were valid on average (per seed: "
            f"{', '.join(f'{100 * v:.0f} %' for v in valid)})."
        )
    if verdict.plausibility is Trend.NOT_MEASURED:
        out.append(
            "**Plausibility:** too few valid counterfactuals to follow the energy differential "
            "over the valid ones; this run says nothing about plausibility."
        )
    else:
        ends = s["implaus_valid_ends"]
        per_seed = ", ".join(f"{a:.1f} to {b:.1f}" for a, b in ends)
        text = (
            f"**Plausibility:** the energy differential over the valid counterfactuals went from "
            f"{mean_of([a for a, _ in ends]):.1f} to {mean_of([b for _, b in ends]):.1f} logits "
            f"from the first to the last search epoch, averaged over the seeds ({per_seed} per "
            f"seed; lower is what CT's loss asks for): {_TREND[verdict.plausibility]}."
        )
        if verdict.other_way:
            text += (
                " Over all counterfactuals (an invalid one counting 0) it moved the other way: "
                "that average follows the share of valid searches, not plausibility."
            )
        out.append(text)
    return "\n\n".join(out)


def _band(
    fig: go.Figure,
    logs: Sequence[TrainingLog],
    field: str,
    key: str,
    name: str,
    row: int,
    col: int,
    legend: bool,
) -> None:
    epochs = sorted({r.epoch for log in logs for r in log if getattr(r, field) is not None})
    rows = [
        [
            getattr(r, field)
            for log in logs
            for r in log
            if r.epoch == e and getattr(r, field) is not None
        ]
        for e in epochs
    ]
    mean = [sum(v) / len(v) for v in rows]
    colour = COLOURS[key]
    fig.add_trace(
        go.Scatter(
            x=epochs + epochs[::-1],
            y=[max(v) for v in rows] + [min(v) for v in rows][::-1],
            fill="toself",
            fillcolor=colour,
            opacity=0.2,
            line={"width": 0},
            hoverinfo="skip",
            showlegend=False,
            legendgroup=key,
        ),
        row,
        col,
    )
    fig.add_trace(
        go.Scatter(
            x=epochs,
            y=mean,
            name=name,
            legendgroup=key,
            showlegend=legend,
            mode="lines+markers",
            line={"color": colour, "width": 2},
            marker={"size": 5},
            hovertemplate=f"{name}<br>epoch %{{x}}: %{{y:.3f}}<extra></extra>",
        ),
        row,
        col,
    )


def seeds_figure(full: Sequence[TrainingLog], vanilla: Sequence[TrainingLog]) -> go.Figure:
    """Four panels over the epochs, each objective's mean over seeds with the min-max band:
    time per epoch, held-out accuracy, the share of valid counterfactuals and the energy
    differential over the valid ones (the last two: CT only)."""
    fig = make_subplots(
        rows=2,
        cols=2,
        # Short titles: two panels side by side still fit a phone's column.
        subplot_titles=(
            "Time per epoch",
            "Held-out accuracy",
            "Valid searches",
            "Energy differential",
        ),
        vertical_spacing=0.16,
    )
    for key, name, logs in (
        ("full", "CT (full objective)", full),
        ("vanilla", "baseline", vanilla),
    ):
        _band(fig, logs, "time_taken", key, name, 1, 1, True)
        _band(fig, logs, "acc_val", key, name, 1, 2, False)
    cf_logs = [TrainingLog([r for r in log if r.implaus is not None], log.meta) for log in full]
    if any(len(log) for log in cf_logs):
        _band(fig, cf_logs, "percent_valid", "full", "CT", 2, 1, False)
        if any(r.implaus_valid is not None for log in cf_logs for r in log):
            _band(fig, cf_logs, "implaus_valid", "full", "CT", 2, 2, False)
    burnin = _burnin(full)
    fig.add_vline(x=burnin + 0.5, line={"dash": "dash", "color": BURNIN_COLOUR, "width": 1})
    fig.update_xaxes(title_text="epoch")
    fig.update_yaxes(title_text="seconds", row=1, col=1)
    fig.update_yaxes(title_text="share", row=1, col=2)
    fig.update_yaxes(title_text="share", range=[0, 1.05], row=2, col=1)
    fig.update_yaxes(title_text="logits (valid ones)", row=2, col=2)
    fig.update_layout(
        template=TEMPLATE,
        height=640,
        legend={"orientation": "h", "y": -0.12},
        margin={"l": 60, "r": 20, "t": 50, "b": 60},
    )
    return fig
