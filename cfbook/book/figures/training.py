"""Figures and run summaries for the book's chapters.

The chapters only call these functions, so every number a reader sees (in a figure or in the
text around it) is computed here from the training logs of the run that produced them.
Figures are displayed without an inlined copy of plotly.js: pages load one shared copy.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import fields
from statistics import fmean
from typing import TYPE_CHECKING, Any

import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

if TYPE_CHECKING:
    from cfbook.book.profiles import Profile
    from cfbook.log import EpochRecord, TrainingLog

#: One colour per objective, shared by its curves, average lines and annotations.
COLOURS = {"full": "#1f6fb4", "vanilla": "#e8710a"}
BURNIN_COLOUR = "#444444"
TEMPLATE = "plotly_white"


def _check_log(log: TrainingLog, name: str) -> int:
    """Validate one log; return its number of burn-in epochs."""
    if not isinstance(log, list) or not hasattr(log, "meta"):
        raise TypeError(f"{name} must be a cfbook.log.TrainingLog, got {type(log).__name__}")
    if len(log) == 0:
        raise ValueError(f"{name} is empty: the training stage recorded no epochs")
    burnin = log.meta.get("burnin_epochs")
    if not isinstance(burnin, int) or burnin < 0:
        raise ValueError(
            f"{name}.meta['burnin_epochs'] must be a non-negative int, got {burnin!r}; "
            "re-run the training stage so the log records its configuration"
        )
    return burnin


def _check_pair(log_full: TrainingLog, log_vanilla: TrainingLog) -> int:
    """Refuse logs that cannot be compared epoch by epoch; return the shared burn-in."""
    burnin_full = _check_log(log_full, "log_full")
    burnin_vanilla = _check_log(log_vanilla, "log_vanilla")
    if len(log_full) != len(log_vanilla):
        raise ValueError(
            f"log_full has {len(log_full)} epochs but log_vanilla has {len(log_vanilla)}: "
            "both stages must be run with the same profile"
        )
    if burnin_full != burnin_vanilla:
        raise ValueError(
            f"log_full has {burnin_full} burn-in epochs but log_vanilla has {burnin_vanilla}: "
            "both stages must be run with the same profile"
        )
    epochs_full = [r.epoch for r in log_full]
    if epochs_full != [r.epoch for r in log_vanilla]:
        raise ValueError("log_full and log_vanilla record different epoch numbers")
    objective_full = log_full.meta.get("objective")
    if objective_full is not None and objective_full == log_vanilla.meta.get("objective"):
        raise ValueError(
            f"log_full and log_vanilla both come from objective {objective_full!r}; "
            "pass the full-objective log first and the vanilla log second"
        )
    return burnin_full


def _series(log: Sequence[EpochRecord], field: str) -> tuple[list[int], list[float]]:
    """Epochs and values of one logged field, skipping epochs where it was not computed."""
    pairs = [(r.epoch, getattr(r, field)) for r in log if getattr(r, field) is not None]
    return [e for e, _ in pairs], [float(v) for _, v in pairs]


def _mean_or_none(values: Sequence[float]) -> float | None:
    return fmean(values) if values else None


def _last_or_none(values: Sequence[float]) -> float | None:
    return values[-1] if values else None


def _first_or_none(values: Sequence[float]) -> float | None:
    return values[0] if values else None


def comparison_summary(log_full: TrainingLog, log_vanilla: TrainingLog) -> dict[str, Any]:
    """The numbers the comparison chapter quotes, so its text always matches the plotted run.

    Times are per-epoch wall-clock seconds; "post" means after burn-in (the epochs in which the
    full objective generates counterfactuals). Values that a run did not record are None.
    """
    burnin = _check_pair(log_full, log_vanilla)
    post_full = [r.time_taken for r in log_full if r.epoch > burnin]
    post_vanilla = [r.time_taken for r in log_vanilla if r.epoch > burnin]
    pre_full = [r.time_taken for r in log_full if r.epoch <= burnin]
    pre_vanilla = [r.time_taken for r in log_vanilla if r.epoch <= burnin]
    mean_full = _mean_or_none(post_full)
    mean_vanilla = _mean_or_none(post_vanilla)
    ratio = mean_full / mean_vanilla if mean_full is not None and mean_vanilla else None

    impl_epochs, impl = _series(log_full, "implaus")
    _, acc_full = _series(log_full, "acc")
    _, acc_vanilla = _series(log_vanilla, "acc")
    _, acc_val_full = _series(log_full, "acc_val")
    _, acc_val_vanilla = _series(log_vanilla, "acc_val")
    cf_epochs = [r for r in log_full if r.epoch > burnin and r.implaus is not None]

    implaus_change = impl[-1] - impl[0] if len(impl) > 1 else None
    implaus_change_pct = (
        100.0 * implaus_change / abs(impl[0])
        if implaus_change is not None and abs(impl[0]) > 1e-12
        else None
    )
    # The first counterfactual epoch searches a model not yet trained on counterfactuals: most
    # searches succeed there, so its average (invalid ones count as 0) often stands apart.
    later = cf_epochs[1:]
    slope = _slope([r.epoch for r in later], [r.implaus for r in later]) if len(later) > 2 else None
    return {
        "profile": log_full.meta.get("profile"),
        "device": log_full.meta.get("device_name") or log_full.meta.get("device"),
        "objective_full": log_full.meta.get("objective"),
        "objective_vanilla": log_vanilla.meta.get("objective"),
        "nepochs": len(log_full),
        "burnin_epochs": burnin,
        "post_epochs": len(post_full),
        "time_full_mean": mean_full,
        "time_vanilla_mean": mean_vanilla,
        "time_ratio": ratio,
        "time_overhead_s": (
            mean_full - mean_vanilla if mean_full is not None and mean_vanilla is not None else None
        ),
        "time_full_burnin_mean": _mean_or_none(pre_full),
        "time_vanilla_burnin_mean": _mean_or_none(pre_vanilla),
        "time_full_total": sum(r.time_taken for r in log_full),
        "time_vanilla_total": sum(r.time_taken for r in log_vanilla),
        "acc_full_final": _last_or_none(acc_full),
        "acc_vanilla_final": _last_or_none(acc_vanilla),
        "acc_val_full_final": _last_or_none(acc_val_full),
        "acc_val_vanilla_final": _last_or_none(acc_val_vanilla),
        "implaus_first": impl[0] if impl else None,
        "implaus_last": impl[-1] if impl else None,
        "implaus_first_epoch": impl_epochs[0] if impl else None,
        "implaus_last_epoch": impl_epochs[-1] if impl else None,
        "implaus_change": implaus_change,
        "implaus_change_pct": implaus_change_pct,
        "percent_valid_mean": _mean_or_none([r.percent_valid for r in cf_epochs]),
        "avg_iter_mean": _mean_or_none([r.avg_iter for r in cf_epochs]),
        "percent_valid_first": cf_epochs[0].percent_valid if cf_epochs else None,
        "percent_valid_later_mean": _mean_or_none([r.percent_valid for r in later]),
        "implaus_later_first": later[0].implaus if later else None,
        "implaus_later_first_epoch": later[0].epoch if later else None,
        "implaus_later_slope": slope,
        "implaus_valid_first": _first_or_none(_series(log_full, "implaus_valid")[1]),
        "implaus_valid_last": _last_or_none(_series(log_full, "implaus_valid")[1]),
    }


def _slope(x: list[int], y: list[float]) -> float:
    """Least-squares slope of y over x: the trend per epoch, less sensitive to one odd epoch."""
    mx, my = sum(x) / len(x), sum(y) / len(y)
    return sum((a - mx) * (b - my) for a, b in zip(x, y, strict=True)) / sum(
        (a - mx) ** 2 for a in x
    )


def _line(
    name: str, key: str, x: list[int], y: list[float], *, show: bool, unit: str, dash: str = "solid"
):
    return go.Scatter(
        x=x,
        y=y,
        name=name,
        legendgroup=key if dash == "solid" else f"{key}-{dash}",
        showlegend=show,
        mode="lines+markers",
        line={"color": COLOURS[key], "width": 2, "dash": dash},
        marker={"size": 5},
        hovertemplate=f"{name}<br>epoch %{{x}}: %{{y:.3f}}{unit}<extra></extra>",
    )


def _seconds(value: float) -> str:
    """One decimal like "12.3 s", two below a second so short epochs stay distinguishable."""
    return f"{value:.1f} s" if value >= 1.0 else f"{value:.2f} s"


def comparison_figure(
    log_full: TrainingLog, log_vanilla: TrainingLog, *, title: str | None = None
) -> go.Figure:
    """One interactive figure, three panels: time per epoch, training accuracy, implausibility.

    The dashed vertical line marks the end of burn-in on every panel; the dotted horizontal lines
    in the first panel are each objective's mean epoch time after burn-in.
    """
    summary = comparison_summary(log_full, log_vanilla)
    burnin = summary["burnin_epochs"]
    fig = make_subplots(
        rows=1,
        cols=3,
        subplot_titles=(
            "Wall-clock time per epoch",
            "Training accuracy",
            "Implausibility (full objective)",
        ),
        horizontal_spacing=0.08,
    )
    for key, name, log in (("full", "Full", log_full), ("vanilla", "Vanilla", log_vanilla)):
        label = f"{name} objective"
        fig.add_trace(_line(label, key, *_series(log, "time_taken"), show=True, unit=" s"), 1, 1)
        fig.add_trace(_line(label, key, *_series(log, "acc"), show=False, unit=""), 1, 2)
    impl_x, impl_y = _series(log_full, "implaus")
    fig.add_trace(_line("Full objective", "full", impl_x, impl_y, show=False, unit=""), 1, 3)
    fig.add_trace(
        _line(
            "Full objective, valid counterfactuals only",
            "full",
            *_series(log_full, "implaus_valid"),
            show=True,
            unit="",
            dash="dot",
        ),
        1,
        3,
    )
    if not impl_x:
        fig.add_annotation(
            text="no counterfactual epochs in this run",
            xref="x3 domain",
            yref="y3 domain",
            x=0.5,
            y=0.5,
            showarrow=False,
        )

    fig.add_vline(
        x=burnin + 0.5,
        row="all",
        col="all",
        line={"dash": "dash", "color": BURNIN_COLOUR, "width": 1},
    )
    fig.add_annotation(
        text="burn-in ends",
        x=burnin + 0.5,
        y=1.0,
        xref="x",
        yref="y domain",
        showarrow=False,
        xanchor="left",
        yanchor="top",
        font={"size": 10, "color": BURNIN_COLOUR},
    )
    for key, name, position in (
        ("full", "Full", "top left"),
        ("vanilla", "Vanilla", "bottom right"),
    ):
        mean = summary[f"time_{key}_mean"]
        if mean is None:
            continue
        fig.add_hline(
            y=mean,
            row=1,
            col=1,
            line={"dash": "dot", "color": COLOURS[key], "width": 2},
            annotation_text=f"{name} avg: {_seconds(mean)}",
            annotation_position=position,
            annotation_font={"color": COLOURS[key], "size": 11},
        )

    fig.update_xaxes(title_text="Epoch", range=[0.5, summary["nepochs"] + 0.5])
    fig.update_yaxes(title_text="Seconds", row=1, col=1)
    fig.update_yaxes(title_text="Accuracy", row=1, col=2)
    fig.update_yaxes(title_text="Energy differential", row=1, col=3)
    fig.update_layout(
        template=TEMPLATE,
        title=title,
        height=420,
        margin={"l": 60, "r": 20, "t": 80 if title else 50, "b": 60},
        legend={"orientation": "h", "x": 0.0, "y": -0.2},
        hovermode="closest",
    )
    return fig


def _pct(value: float) -> str:
    return f"{100.0 * value:.1f}%"


def _run_text(s: dict[str, Any]) -> str:
    where = f"profile `{s['profile']}`" if s["profile"] else "this run"
    if s["device"]:
        where += f" on `{s['device']}`"
    burnin = s["burnin_epochs"]
    if burnin == 0:
        phases = "no burn-in"
    elif burnin == 1:
        phases = "the first of them burn-in (no counterfactuals)"
    else:
        phases = f"the first {burnin} of them burn-in (no counterfactuals)"
    return (
        f"**Run:** {where}, {s['nepochs']} epochs, {phases}, then {s['post_epochs']} "
        f"epoch{'' if s['post_epochs'] == 1 else 's'} of counterfactual training."
    )


def _cost_text(s: dict[str, Any]) -> str | None:
    if s["time_ratio"] is None:
        return None
    slower = s["time_ratio"] >= 1.0
    text = (
        f"**Cost:** after burn-in an epoch of the full objective took "
        f"{s['time_full_mean']:.2f} s on average against {s['time_vanilla_mean']:.2f} s for the "
        f"vanilla objective, {s['time_ratio']:.1f} times as long "
        f"({abs(s['time_overhead_s']):.2f} s {'more' if slower else 'less'} per epoch). "
    )
    if slower:
        text += (
            "The extra time is the counterfactual search plus the forward and backward passes "
            "through counterfactuals, neighbours and adversarial examples."
        )
    else:
        text += (
            "The search did not make epochs slower here: in so small a run it is lost in the "
            "noise of the timings."
        )
    if s["time_full_burnin_mean"] is not None and s["time_vanilla_burnin_mean"] is not None:
        text += (
            f" During burn-in, when both do the same work, an epoch took "
            f"{s['time_full_burnin_mean']:.2f} s (full) and {s['time_vanilla_burnin_mean']:.2f} s "
            "(vanilla)."
        )
    return text


def _accuracy_text(s: dict[str, Any]) -> str | None:
    if s["acc_full_final"] is None or s["acc_vanilla_final"] is None:
        return None
    gap = s["acc_full_final"] - s["acc_vanilla_final"]
    if abs(gap) < 0.02:
        verdict = "comparable: the extra loss terms did not cost training accuracy"
    elif gap > 0:
        verdict = "higher with counterfactual training"
    else:
        verdict = "lower with counterfactual training, the price of its extra loss terms here"
    text = (
        f"**Accuracy:** the last recorded training accuracy is {_pct(s['acc_full_final'])} "
        f"(full) against {_pct(s['acc_vanilla_final'])} (vanilla), "
        f"{100.0 * gap:+.1f} percentage points: {verdict}."
    )
    if s["acc_val_full_final"] is not None and s["acc_val_vanilla_final"] is not None:
        text += (
            f" On held-out data: {_pct(s['acc_val_full_final'])} against "
            f"{_pct(s['acc_val_vanilla_final'])}."
        )
    return text


def _plausibility_text(s: dict[str, Any]) -> str | None:
    if s["implaus_first"] is None:
        return None
    if s["percent_valid_mean"] == 0.0:
        return (
            "**Plausibility:** no counterfactual reached its target class in this run, so each was "
            "replaced by its neighbour and the energy differential is zero by construction; the "
            "run is too short or the search too limited to say anything about plausibility."
        )
    if s["implaus_change"] is None:
        return (
            f"**Plausibility:** only one counterfactual epoch was recorded (energy differential "
            f"{s['implaus_first']:.3f}), too few to see a trend."
        )
    change = s["implaus_change"]
    if change == 0:
        return (
            f"**Plausibility:** the full objective's energy differential stayed at "
            f"{s['implaus_first']:.3f} from epoch {s['implaus_first_epoch']} to epoch "
            f"{s['implaus_last_epoch']}; this run shows no effect on plausibility."
        )
    pct = s["implaus_change_pct"]
    pct_text = f" ({pct:+.0f}%)" if pct is not None else ""
    text = (
        f"**Plausibility:** the full objective's energy differential "
        f"{'fell' if change < 0 else 'rose'} from {s['implaus_first']:.3f} (epoch "
        f"{s['implaus_first_epoch']}) to {s['implaus_last']:.3f} (epoch "
        f"{s['implaus_last_epoch']}){pct_text}. "
    )
    if change < 0:
        return text + (
            "Lower means the model no longer gives its counterfactuals more target-class evidence "
            "than real samples of that class, so a counterfactual has to look more like the real "
            "thing to convince it, which is what counterfactual training is for."
        )
    slope = s["implaus_later_slope"]
    if slope is not None and slope < 0:
        return text + (
            f"The first counterfactual epoch stands apart: the model had not yet been trained on "
            f"counterfactuals, so {_pct(s['percent_valid_first'])} of the searches reached their "
            f"target, against {_pct(s['percent_valid_later_mean'])} on average afterwards, and an "
            f"invalid counterfactual counts as zero in this average. From epoch "
            f"{s['implaus_later_first_epoch']} on, the differential fell from "
            f"{s['implaus_later_first']:.3f} to {s['implaus_last']:.3f} ({slope:+.3f} per epoch "
            "on a least-squares line): the model keeps giving real samples of the target class "
            "more evidence than the counterfactuals that reach it, which is what counterfactual "
            "training is for."
        )
    return text + (
        "It did not decrease in this run; a short run can end before the counterfactual terms "
        "take effect."
    )


def _search_text(s: dict[str, Any]) -> str | None:
    if s["percent_valid_mean"] is None:
        return None
    text = (
        f"**Search:** on average {_pct(s['percent_valid_mean'])} of the counterfactuals reached "
        f"their target class with the required confidence; a search took "
        f"{s['avg_iter_mean']:.1f} iterations on average."
    )
    if s["implaus_valid_first"] is not None and s["implaus_valid_last"] is not None:
        text += (
            f" Over the valid counterfactuals alone (the dotted line), the energy differential "
            f"went from {s['implaus_valid_first']:.3f} to {s['implaus_valid_last']:.3f}: that "
            "curve does not move when only the share of valid searches changes."
        )
    return text


def summary_markdown(summary: dict[str, Any]) -> str:
    """Turn comparison_summary() into the paragraphs the comparison chapter displays.

    The wording follows the numbers (more or less time, higher or lower accuracy, a falling or
    rising energy differential), so the text stays true for whichever run produced the logs.
    """
    paragraphs = [_run_text(summary)]
    for build in (_cost_text, _accuracy_text, _plausibility_text, _search_text):
        text = build(summary)
        if text is not None:
            paragraphs.append(text)
    return "\n\n".join(paragraphs)


def show(fig: go.Figure) -> None:
    """Display a figure as HTML that relies on the page's shared plotly.min.js.

    The plotly JSON travels alongside for front ends (JupyterLab, VS Code) that render it natively.
    The div id is derived from the figure so re-executing a notebook does not churn its outputs.
    """
    from IPython.display import display

    spec = fig.to_json()
    div_id = "cfbook-" + hashlib.sha1(spec.encode()).hexdigest()[:12]
    bundle = {
        "text/html": fig.to_html(full_html=False, include_plotlyjs=False, div_id=div_id),
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
        return f"{value.n_factuals} factuals x {value.runs} runs; attacks on {attacked} held-out"
    if isinstance(value, tuple):
        return ", ".join(f"{v:g}" for v in value)
    return f"{value:g}" if isinstance(value, float) else str(value)
