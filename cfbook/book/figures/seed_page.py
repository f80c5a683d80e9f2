"""The figure of CT.jl's "Training on GPU" page, drawn as that page draws it, from one run of each
objective: time per epoch with the end of burn-in and each objective's post-burn-in average,
training accuracy, and CT's implausibility (the energy differential its loss minimises). The text
beside it is written from the same logs, so it says what this run measured, not what the page did.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from cfbook.book.figures.training import BURNIN_COLOUR, COLOURS, TEMPLATE
from cfbook.evaluation.statistics import mean_of
from cfbook.training.log import TrainingLog

NAMES = {"full": "Full objective", "vanilla": "Vanilla objective"}


def _burnin(log: TrainingLog) -> int:
    return int(log.meta.get("burnin_epochs", 0))


def post_burnin_seconds(log: TrainingLog) -> float | None:
    """The mean time per epoch after burn-in (the page's dotted lines)."""
    burnin = _burnin(log)
    return mean_of([r.time_taken for r in log if r.epoch > burnin])


def seed_page_summary(full: TrainingLog, vanilla: TrainingLog) -> dict[str, Any]:
    """The numbers the page's text quotes, from the first run of each objective."""
    burnin = _burnin(full)
    cf = [r for r in full if r.implaus is not None]
    last_acc = {
        key: next((r.acc for r in reversed(log) if r.acc is not None), None)
        for key, log in (("full", full), ("vanilla", vanilla))
    }
    last_val = {
        key: next((r.acc_val for r in reversed(log) if r.acc_val is not None), None)
        for key, log in (("full", full), ("vanilla", vanilla))
    }
    return {
        "device": full.meta.get("device_name", full.meta.get("device", "unknown device")),
        "threads": full.meta.get("threads"),
        "mature": full.meta.get("mature"),
        "nepochs": len(full),
        "burnin_epochs": burnin,
        "time_full": post_burnin_seconds(full),
        "time_vanilla": post_burnin_seconds(vanilla),
        "acc_full": last_acc["full"],
        "acc_vanilla": last_acc["vanilla"],
        "acc_val_full": last_val["full"],
        "acc_val_vanilla": last_val["vanilla"],
        "valid": mean_of([r.percent_valid for r in cf]),
        "implaus_first": cf[0].implaus if cf else None,
        "implaus_last": cf[-1].implaus if cf else None,
        "implaus_min": min((r.implaus for r in cf), default=None),
        "search_epochs": len(cf),
    }


class Movement(Enum):
    """How CT's implausibility moved from the first search epoch to the last."""

    FELL = "fell"
    ROSE = "rose"
    STAYED = "stayed"


@dataclass(frozen=True)
class SeedPageVerdict:
    """What ``seed_page_summary`` says: how the implausibility moved (None: no search epoch),
    and whether it averages mostly invalid counterfactuals (the raw semantics with fewer than
    half of the searches valid), so that it says nothing about plausible explanations."""

    implausibility: Movement | None
    mostly_invalid: bool


def seed_page_verdict(s: dict[str, Any]) -> SeedPageVerdict:
    """The verdicts of the page's text, from ``seed_page_summary``."""
    if s["valid"] is None or s["implaus_first"] is None:
        return SeedPageVerdict(None, False)
    first, last = s["implaus_first"], s["implaus_last"]
    moved = Movement.FELL if last < first else Movement.ROSE if last > first else Movement.STAYED
    return SeedPageVerdict(moved, s["mature"] == "raw" and s["valid"] < 0.5)


def seed_page_markdown(s: dict[str, Any], reference: dict[str, Any] | None = None) -> str:
    """What the run shows (``seed_page_verdict``), from ``seed_page_summary``; ``reference``
    (the same summary of another profile's first runs) adds its cost ratio for comparison."""
    threads = f", {s['threads']} threads" if s["threads"] else ""
    out = [
        f"**Run:** one seed per objective on {s['device']}{threads}, {s['nepochs']} epochs, the "
        f"first {s['burnin_epochs']} without counterfactuals; invalid counterfactuals count "
        f'{"as found" if s["mature"] == "raw" else "as their neighbour"} (mature="{s["mature"]}").'
    ]
    if s["time_full"] and s["time_vanilla"]:
        ratio = s["time_full"] / s["time_vanilla"]
        text = (
            f"**Cost:** after burn-in an epoch took {s['time_full']:.1f} s with the full "
            f"objective against {s['time_vanilla']:.1f} s for the vanilla one ({ratio:.1f} times "
            "as long)."
        )
        if reference and reference["time_full"] and reference["time_vanilla"]:
            ref = reference["time_full"] / reference["time_vanilla"]
            text += (
                f" The calibrated `cpu` profile's first seed, on {reference['device']}: "
                f"{reference['time_full']:.1f} s against {reference['time_vanilla']:.1f} s "
                f"({ref:.1f} times)."
            )
        out.append(text)
    if None not in (s["acc_full"], s["acc_vanilla"]):
        out.append(
            f"**Accuracy** at the last measured epoch: training {s['acc_full']:.3f} (full) and "
            f"{s['acc_vanilla']:.3f} (vanilla); held-out {s['acc_val_full']:.3f} and "
            f"{s['acc_val_vanilla']:.3f}. One seed each: this run alone cannot tell a difference "
            "due to the objective from one due to the seed (the `cpu` profile's three seeds "
            "measure that spread)."
        )
    verdict = seed_page_verdict(s)
    if verdict.implausibility is not None:
        first, last = s["implaus_first"], s["implaus_last"]
        text = (
            f"**Search and implausibility:** after burn-in {100 * s['valid']:.0f} % of the "
            f"training-time counterfactuals reached their target. CT's implausibility "
            f"{verdict.implausibility.value} from {first:.2f} to {last:.2f} logits over "
            f"{s['search_epochs']} search epochs (lowest {s['implaus_min']:.2f})."
        )
        if verdict.mostly_invalid:
            text += (
                " Under the raw semantics that average includes every counterfactual that never "
                "reached its target, most of them here: it is the term the loss minimises, not a "
                "measure of plausible explanations, which need valid counterfactuals first."
            )
        out.append(text)
    return "\n\n".join(out)


def _line(
    fig: go.Figure, x: list, y: list, key: str, row: int, legend: bool = False, marker: int = 4
) -> None:
    """One objective's line in panel ``row`` (its legend entry only where ``legend``)."""
    fig.add_scatter(
        x=x,
        y=y,
        name=NAMES[key],
        legendgroup=key,
        showlegend=legend,
        mode="lines+markers",
        line={"color": COLOURS[key], "width": 2},
        marker={"size": marker},
        row=row,
        col=1,
    )


def seed_page_figure(full: TrainingLog, vanilla: TrainingLog) -> go.Figure:
    """The Julia page's three panels, stacked so each keeps the page column's width."""
    fig = make_subplots(
        rows=3,
        cols=1,
        shared_xaxes=True,
        subplot_titles=(
            "Time per epoch; dotted: mean after burn-in",
            "Training accuracy",
            "CT's implausibility (energy differential)",
        ),
        vertical_spacing=0.09,
    )
    for key, log in (("full", full), ("vanilla", vanilla)):
        _line(fig, log.column("epoch"), log.column("time_taken"), key, 1, legend=True)
        mean = post_burnin_seconds(log)
        if mean is not None:
            fig.add_hline(
                y=mean,
                line={"dash": "dot", "color": COLOURS[key], "width": 2},
                annotation_text=f"{mean:.1f} s",
                annotation_position="top left",
                annotation_font_color=COLOURS[key],
                row=1,
                col=1,
            )
        acc = [(r.epoch, r.acc) for r in log if r.acc is not None]
        _line(fig, [e for e, _ in acc], [a for _, a in acc], key, 2, marker=5)
    cf = [r for r in full if r.implaus is not None]
    _line(fig, [r.epoch for r in cf], [r.implaus for r in cf], "full", 3)
    for row in (1, 2, 3):
        fig.add_vline(
            x=_burnin(full),
            line={"dash": "dash", "color": BURNIN_COLOUR, "width": 1},
            row=row,
            col=1,
        )
    fig.update_xaxes(title_text="epoch (dashed: burn-in ends)", row=3, col=1)
    fig.update_yaxes(title_text="seconds", rangemode="tozero", row=1, col=1)
    fig.update_yaxes(title_text="share", row=2, col=1)
    fig.update_yaxes(title_text="logits", row=3, col=1)
    fig.update_annotations(font_size=13)  # the titles fit a phone's column
    fig.update_layout(
        template=TEMPLATE,
        height=760,
        legend={"orientation": "h", "y": -0.08},
        margin={"l": 60, "r": 20, "t": 40, "b": 40},
    )
    return fig
