"""The ablation and sensitivity chapter's tables, figures and text, from the merged grid
(``results.json``: its ``ablation`` and ``ig`` parts) and the paper's IG medians.

Which term moves which measure is read seed by seed, as the paper's one model per objective: an
objective "reduces" a measure on a data set when, in every seed, its 99 % interval of per-round
differences against its baseline lies below zero. Pooling the seeds' rounds into one interval
would mix the spread between models into that of the rounds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from cfbook.book.figures.reproduction import FGSM_EPS
from cfbook.book.figures.training import COLOURS, TEMPLATE
from cfbook.book.report import seed_reductions
from cfbook.evaluation.attacks import accuracy_at
from cfbook.evaluation.measures import compared_measures
from cfbook.models import IMAGE_SHAPE
from cfbook.paper import published
from cfbook.paper.merge import mean_accuracies
from cfbook.paper.settings import EXPERIMENTS, MNIST_PROTECTED_ROWS, SEARCH

OBJECTIVES = {"full": "full (CT)", "energy": "energy only", "adversarial": "adversarial only"}
MEASURES = {m.key: m.label for m in compared_measures()}
OBJECTIVE_COLOURS = {"full": COLOURS["full"], "energy": "#2ca02c", "adversarial": "#9467bd"}


def interval_bars(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Plotly error bars from each row's reduction to its ``reduction_low`` / ``_high`` (none
    where a row has no reduction)."""
    mid = [r.get("reduction") for r in rows]
    return {
        "type": "data",
        "symmetric": False,
        "array": [
            None if m is None else r["reduction_high"] - m for r, m in zip(rows, mid, strict=True)
        ],
        "arrayminus": [
            None if m is None else m - r["reduction_low"] for r, m in zip(rows, mid, strict=True)
        ],
    }


def _robust(results: dict[str, Any], key: str, objective: str) -> dict[str, Any]:
    """Accuracy of one objective's models, averaged over the seeds: the main evaluation's for CT
    and the baseline, the ablation's for the two halves."""
    if objective in ("full", "vanilla"):
        return mean_accuracies(results["data"][key]["robustness"][objective])
    return results["ablation"][key][objective]["robustness"]


def _robust_per_seed(results: dict[str, Any], key: str, objective: str) -> list[dict[str, Any]]:
    """Each seed's accuracies of one objective's model, in the ablation's order of seeds."""
    ablation = results["ablation"][key]
    if objective not in ("full", "vanilla"):
        return ablation[objective]["robustness_per_seed"]
    data = results["data"][key]
    if data["seeds"] != ablation["seeds"]:
        raise ValueError(
            f"{key}: the ablation's seeds {ablation['seeds']} are not the main grid's "
            f"{data['seeds']}; run both parts of the grid with the same --seeds, then merge"
        )
    return data["robustness"][objective]


def ablation_table(results: dict[str, Any]) -> str:
    """Per data set and objective: each seed's reductions against its baseline (%, ✱ = 99 %
    interval excludes 0; positive = better), validity, clean and FGSM accuracy (means over the
    seeds)."""
    per_seed = " | ".join(f"{label}, per seed" for label in MEASURES.values())
    lines = [
        f"| data | objective | {per_seed} | validity | clean acc. | FGSM ε≈0.03 |",
        "|---" * (5 + len(MEASURES)) + "|",
    ]
    for key, rows in results.get("ablation", {}).items():
        label = EXPERIMENTS[key].label
        bl = _robust(results, key, "vanilla")
        lines.append(
            f"| {label} | baseline |{' |' * len(MEASURES)} {rows['vanilla']['validity']:.2f} | "
            f"{bl['clean']:.2f} | {accuracy_at(bl, 'fgsm', FGSM_EPS):.2f} |"
        )
        for objective, name in OBJECTIVES.items():
            seeds = rows[objective]["per_seed"]
            cells = " | ".join(seed_reductions(seeds[m]) for m in MEASURES)
            acc = _robust(results, key, objective)
            lines.append(
                f"| {label} | {name} | {cells} | {rows[objective]['validity']:.2f} | "
                f"{acc['clean']:.2f} | {accuracy_at(acc, 'fgsm', FGSM_EPS):.2f} |"
            )
    return "\n".join(lines)


def _reduces(seeds: list[dict[str, Any] | None]) -> bool:
    """Whether every seed's 99 % interval of CT - baseline lies below zero."""
    return bool(seeds) and all(r is not None and "ci_high" in r and r["ci_high"] < 0 for r in seeds)


def _raises(seeds: list[dict[str, Any] | None]) -> bool:
    """Whether some seed's 99 % interval of CT - baseline lies above zero."""
    return any(r is not None and "ci_low" in r and r["ci_low"] > 0 for r in seeds)


def _more_robust(results: dict[str, Any], key: str, objective: str, margin: float) -> bool:
    """Whether every seed's model is more accurate under FGSM than its baseline by ``margin``."""
    pairs = zip(
        _robust_per_seed(results, key, objective),
        _robust_per_seed(results, key, "vanilla"),
        strict=True,
    )
    return all(
        accuracy_at(a, "fgsm", FGSM_EPS) > accuracy_at(b, "fgsm", FGSM_EPS) + margin
        for a, b in pairs
    )


def _listed(labels: list[str]) -> str:
    return f"{len(labels)} ({', '.join(labels) or 'none'})"


class Half(Enum):
    """Which half of CT's objective lowers IP in every seed on more data sets."""

    ENERGY = "energy"
    ADVERSARIAL = "adversarial"
    NEITHER = "neither"


@dataclass(frozen=True)
class AblationVerdict:
    """Per measure and objective, the data sets (keys) where every seed's measure is
    significantly lower than its baseline's (``lower``) and where some seed's is significantly
    higher (``higher``); per objective, those where every seed is more accurate under FGSM by
    more than ``margin`` (``robust``); and which half lowers IP on more data sets."""

    data_sets: int
    margin: float
    lower: dict[str, dict[str, list[str]]]
    higher: dict[str, dict[str, list[str]]]
    robust: dict[str, list[str]]
    half: Half


def ablation_verdict(results: dict[str, Any], margin: float = 0.05) -> AblationVerdict | None:
    """Which term moves which measure in every seed, over the data sets (None: no ablation)."""
    ablation = results.get("ablation", {})
    if not ablation:
        return None

    def sets(objective: str, measure: str, test: Callable[[list], bool]) -> list[str]:
        return [k for k, rows in ablation.items() if test(rows[objective]["per_seed"][measure])]

    lower = {m: {o: sets(o, m, _reduces) for o in OBJECTIVES} for m in MEASURES}
    higher = {m: {o: sets(o, m, _raises) for o in OBJECTIVES} for m in MEASURES}
    robust = {o: [k for k in ablation if _more_robust(results, k, o, margin)] for o in OBJECTIVES}
    energy, adversarial = len(lower["ip"]["energy"]), len(lower["ip"]["adversarial"])
    half = (
        Half.ENERGY
        if energy > adversarial
        else Half.ADVERSARIAL
        if energy < adversarial
        else Half.NEITHER
    )
    return AblationVerdict(len(ablation), margin, lower, higher, robust, half)


_HALF = {
    Half.ENERGY: "the energy term buys more of the plausibility gain than the adversarial term",
    Half.ADVERSARIAL: "the adversarial term alone lowers IP on more data sets than the energy term",
    Half.NEITHER: "neither half alone lowers IP on more data sets than the other",
}


def ablation_text(results: dict[str, Any], margin: float = 0.05) -> str:
    """Which term moves which measure in every seed, counted over the data sets
    (``ablation_verdict``): a table, one row per measure and direction, then the verdict."""
    verdict = ablation_verdict(results, margin)
    if verdict is None:
        return (
            "No ablation results: run "
            "`python -m cfbook.commands.paper --objectives energy,adversarial`."
        )

    def listed(keys: list[str]) -> str:
        return _listed([EXPERIMENTS[k].label for k in keys])

    lines = [
        "| data sets where | " + " | ".join(OBJECTIVES.values()) + " |",
        "|---" * (1 + len(OBJECTIVES)) + "|",
    ]
    for m, label in MEASURES.items():
        for what, sets in (
            ("lower in every seed", verdict.lower[m]),
            ("higher in some seed", verdict.higher[m]),
        ):
            cells = " | ".join(listed(sets[o]) for o in OBJECTIVES)
            lines.append(f"| {label} {what} | {cells} |")
    cells = " | ".join(listed(verdict.robust[o]) for o in OBJECTIVES)
    lines.append(f"| FGSM accuracy {margin * 100:g} points higher in every seed | {cells} |")
    energy, adversarial = (
        len(verdict.lower["ip"]["energy"]),
        len(verdict.lower["ip"]["adversarial"]),
    )
    lines.append(
        f"\nOver the {verdict.data_sets} data sets, {_HALF[verdict.half]} (IP lower in every "
        f"seed on {energy} against {adversarial})."
    )
    return "\n".join(lines)


def ablation_figure(results: dict[str, Any]) -> go.Figure:
    """Each seed's IP reduction per data set and objective, with that seed's 99 % interval of
    per-round reductions: one dot per seed, the objectives side by side."""
    ablation = results.get("ablation", {})
    fig = go.Figure()
    for objective, name in OBJECTIVES.items():
        points = [
            (EXPERIMENTS[k].label, seed, r or {})
            for k, parts in ablation.items()
            for seed, r in zip(parts["seeds"], parts[objective]["per_seed"]["ip"], strict=True)
        ]
        rows = [r for _, _, r in points]
        fig.add_scatter(
            x=[label for label, _, _ in points],
            y=[r.get("reduction") for r in rows],
            customdata=[seed for _, seed, _ in points],
            hovertemplate=f"{name}, seed %{{customdata}}: %{{y:.1f}} %<extra></extra>",
            mode="markers",
            name=name,
            offsetgroup=objective,
            marker={"color": OBJECTIVE_COLOURS[objective], "size": 7},
            error_y=interval_bars(rows),
        )
    fig.update_layout(
        template=TEMPLATE,
        scattermode="group",
        height=420,
        yaxis_title="IP reduction (%)",
        margin={"l": 50, "r": 10, "t": 50, "b": 40},
        legend={"orientation": "h", "x": 0, "y": 1.02, "yanchor": "bottom"},
    )
    return fig


class Sensitivity(Enum):
    """One seed's IG sensitivity to the protected features, CT against the baseline, by its 99 %
    interval of CT - BL."""

    LESS = "less"
    MORE = "more"
    NOT_SIGNIFICANT = "not significant"


def sensitivity(r: dict[str, Any]) -> Sensitivity:
    """Less sensitive where the interval lies below zero, more where above, else neither."""
    if r["diff_high"] < 0:
        return Sensitivity.LESS
    return Sensitivity.MORE if r["diff_low"] > 0 else Sensitivity.NOT_SIGNIFICANT


_SENSITIVITY = {
    Sensitivity.LESS: "yes",
    Sensitivity.MORE: "no",
    Sensitivity.NOT_SIGNIFICANT: "n.s.",
}


def _sensitivity(r: dict[str, Any]) -> str:
    """The table's answer to "CT less sensitive?" for one seed."""
    return _SENSITIVITY[sensitivity(r)]


def ig_table(results: dict[str, Any]) -> str:
    """IG sensitivity to the protected features: the paper's medians beside ours (the seeds'
    rounds pooled), with each seed's 99 % interval of the per-round differences CT - BL."""
    lines = [
        "| data | paper CT / BL (median) | ours CT / BL (median, seeds pooled) | our 99 % "
        "interval of CT − BL, per seed | CT less sensitive? paper | ours, per seed |",
        "|---|---|---|---|---|---|",
    ]
    for key, r in results.get("ig", {}).items():
        p_ct, p_bl = published.IG[key]
        seeds = r["per_seed"]
        intervals = " / ".join(f"[{s['diff_low']:.3f}, {s['diff_high']:.3f}]" for s in seeds)
        lines.append(
            f"| {EXPERIMENTS[key].label} | {p_ct:.2f} / {p_bl:.2f} | {r['ct_median']:.3f} / "
            f"{r['bl_median']:.3f} | {intervals} | {'yes' if p_ct < p_bl else 'no'} | "
            f"{' / '.join(_sensitivity(s) for s in seeds)} |"
        )
    return "\n".join(lines)


@dataclass(frozen=True)
class IgVerdict:
    """The data sets (keys) where CT is less sensitive than the baseline in every seed
    (``lower``), in some but not all (``some``), more sensitive in every seed (``higher``), and
    where the paper's medians are lower for CT (``paper_lower``)."""

    data_sets: int
    lower: list[str]
    some: list[str]
    higher: list[str]
    paper_lower: list[str]


def ig_verdict(results: dict[str, Any]) -> IgVerdict | None:
    """Where CT is less (or more) sensitive to the protected features in every seed (None: no IG
    results)."""
    ig = results.get("ig", {})
    if not ig:
        return None
    seeds = {k: {sensitivity(s) for s in r["per_seed"]} for k, r in ig.items()}
    lower = [k for k, v in seeds.items() if v == {Sensitivity.LESS}]
    return IgVerdict(
        data_sets=len(ig),
        lower=lower,
        some=[k for k, v in seeds.items() if Sensitivity.LESS in v and k not in lower],
        higher=[k for k, v in seeds.items() if v == {Sensitivity.MORE}],
        paper_lower=[k for k in ig if published.IG[k][0] < published.IG[k][1]],
    )


def ig_text(results: dict[str, Any]) -> str:
    """Where CT is less (or more) sensitive to the protected features in every seed
    (``ig_verdict``)."""
    verdict = ig_verdict(results)
    if verdict is None:
        return "No IG results: run `python -m cfbook.commands.paper --ig`."

    def labels(keys: list[str]) -> list[str]:
        return [EXPERIMENTS[k].label for k in keys]

    lower = labels(verdict.lower)
    return (
        "CT trained with the protected feature immutable is significantly less sensitive to it "
        f"than the baseline in every seed on {len(lower)} of {verdict.data_sets} data sets "
        f"({', '.join(lower) or 'none'}), in some seeds but not all on "
        f"{_listed(labels(verdict.some))}, and more sensitive in every seed on "
        f"{_listed(labels(verdict.higher))}; the paper's medians are lower for CT on "
        f"{_listed(labels(verdict.paper_lower))}. The scales differ: the paper's text does not say "
        "how its table's medians were scaled, so compare directions, not values."
    )


IG_MAP_COLUMNS = 5  # maps per row: square maps that still read on a 390 px phone column


def ig_maps_figure(results_ig_file: dict[str, Any]) -> go.Figure:
    """Class-conditional IG maps of MNIST (standardised to [0, 1]), square, five classes a row:
    each row of baseline maps sits over the CT row of the same classes, with the protected top
    and bottom five pixel rows marked."""
    maps = results_ig_file["maps"]
    rows, width = IMAGE_SHAPE[1], IMAGE_SHAPE[2]
    models = (("vanilla", "BL"), ("full_protected", "CT"))
    n = len(maps["vanilla"])
    cols = min(IG_MAP_COLUMNS, n)
    bands = -(-n // cols)  # rows of classes, each drawn once per model
    titles = [
        f"{name} {c}" if c < n else ""
        for band in range(bands)
        for _, name in models
        for c in range(band * cols, (band + 1) * cols)
    ]
    fig = make_subplots(
        rows=2 * bands,
        cols=cols,
        subplot_titles=titles,
        horizontal_spacing=0.02,
        vertical_spacing=0.05,
    )
    for m, (model, _) in enumerate(models):
        for c, flat in enumerate(maps[model]):
            z = [flat[i * width : (i + 1) * width] for i in range(rows)]
            hover = f"{model} class {c}: row %{{y}}, col %{{x}}, IG %{{z:.2f}}<extra></extra>"
            trace = go.Heatmap(z=z, coloraxis="coloraxis", hovertemplate=hover)
            fig.add_trace(trace, 2 * (c // cols) + m + 1, c % cols + 1)
    for row in (min(MNIST_PROTECTED_ROWS) + 4.5, max(MNIST_PROTECTED_ROWS) - 4.5):
        fig.add_hline(y=row, row="all", col="all", line={"color": "red", "width": 1, "dash": "dot"})
    fig.update_xaxes(visible=False, constrain="domain")
    fig.update_yaxes(visible=False, autorange="reversed", constrain="domain")
    for k in range(2 * bands * cols):  # square maps: each y axis follows its own x axis
        suffix = "" if k == 0 else str(k + 1)
        fig.layout[f"yaxis{suffix}"].scaleanchor = f"x{suffix}"
    fig.update_annotations(font_size=11)
    fig.update_layout(
        template=TEMPLATE,
        coloraxis={
            "colorscale": "Viridis",
            "cmin": 0,
            "cmax": 1,
            "colorbar": {
                "title": {"text": "|IG|, scaled to [0, 1]", "side": "top"},
                "orientation": "h",
                "y": -0.02,
                "yanchor": "top",
                "len": 0.8,
                "thickness": 12,
            },
        },
        height=130 * 2 * bands + 110,
        margin={"l": 10, "r": 10, "t": 30, "b": 70},
    )
    return fig


KNOB_LABELS = {
    "lambda_div": "λ_div",
    "lambda_adv": "λ_adv",
    "nce": "nce (share of the paper's)",
    "step_size": "search step",
}
KNOB_MEASURES = {"validity": "validity", "ip": "IP (L1)", "accuracy": "test accuracy"}
# The figure's short names: a column title holds a phone's third of 390 px, an axis title less.
_KNOB_COLUMNS = {"validity": "validity", "ip": "IP change (%)", "accuracy": "test accuracy"}
_KNOB_SHORT = {**KNOB_LABELS, "nce": "nce (share)"}
DATA_COLOURS = {"moons": "#2ca02c", "mnist": "#1f6fb4"}


def _knob_series(points: list[dict[str, Any]], measure: str) -> tuple[list, list, list]:
    """Mean over the seeds at each setting and the distances to the lowest and highest seed;
    IP as the percentage change from the mean at the knob's first setting (an L1 distance over 2
    features on Moons and 784 pixels on MNIST: only relative changes share an axis)."""
    seeds = [[v for v in r[measure] if v is not None] for r in points]
    if measure == "ip" and seeds[0]:
        base = sum(seeds[0]) / len(seeds[0])
        seeds = [[100 * (v / base - 1) for v in s] for s in seeds]
    mean = [sum(s) / len(s) if s else None for s in seeds]
    up = [max(s) - m if s else 0 for s, m in zip(seeds, mean, strict=True)]
    down = [m - min(s) if s else 0 for s, m in zip(seeds, mean, strict=True)]
    return mean, up, down


def knobs_figure(knobs: dict[str, Any]) -> go.Figure:
    """Validity, IP and accuracy (columns) against each knob (rows), one line per data set: the
    mean over seeds, with the range between them as error bars. Each column has one y range that
    holds every line and bar, so the rows compare at a glance; shares never run past 1."""
    names = list(knobs["knobs"])
    fig = make_subplots(
        rows=len(names),
        cols=len(KNOB_MEASURES),
        column_titles=list(_KNOB_COLUMNS.values()),
        horizontal_spacing=0.1,
        vertical_spacing=0.09,
    )
    extent = {m: [1.0, 1.0] if m != "ip" else [0.0, 0.0] for m in KNOB_MEASURES}
    for key, table in knobs["data"].items():
        for row, knob in enumerate(names, start=1):
            points = sorted(table[knob], key=lambda r: r["value"])
            for col, measure in enumerate(KNOB_MEASURES, start=1):
                mean, up, down = _knob_series(points, measure)
                pairs = [
                    (m - d, m + u) for m, u, d in zip(mean, up, down, strict=True) if m is not None
                ]
                extent[measure][0] = min([extent[measure][0], *(lo for lo, _ in pairs)])
                extent[measure][1] = max([extent[measure][1], *(hi for _, hi in pairs)])
                fig.add_scatter(
                    x=[f"{r['value']:g}" for r in points],
                    y=mean,
                    mode="lines+markers",
                    name=EXPERIMENTS[key].label,
                    legendgroup=key,
                    showlegend=row == col == 1,
                    line={"color": DATA_COLOURS.get(key)},
                    error_y={"type": "data", "symmetric": False, "array": up, "arrayminus": down},
                    row=row,
                    col=col,
                )
    # Three or four settings per knob, λ_adv's first one 0: evenly spaced categories, not a log
    # axis.
    fig.update_xaxes(type="category")
    for row, knob in enumerate(names, start=1):
        for col in range(1, len(KNOB_MEASURES) + 1):
            fig.update_xaxes(
                title_text=_KNOB_SHORT[knob], title_standoff=4, title_font_size=11, row=row, col=col
            )
    for col, measure in enumerate(KNOB_MEASURES, start=1):
        low, high = extent[measure]
        if measure == "ip":  # every line and bar, with a margin
            pad = 0.05 * (high - low or 1.0)
            fig.update_yaxes(range=[low - pad, high + pad], col=col)
        else:  # shares: from just below the lowest seed to 1
            fig.update_yaxes(range=[min(low, 0.95) - 0.02, 1.01], col=col)
    fig.update_annotations(font_size=12)
    fig.update_layout(
        template=TEMPLATE,
        height=190 * len(names) + 90,
        margin={"l": 40, "r": 10, "t": 40, "b": 60},
        legend={"orientation": "h", "y": -0.08},
    )
    return fig


def knobs_text(knobs: dict[str, Any]) -> str:
    """For each knob and data set, how each measure moves from its lowest to its highest value
    (means over the seeds)."""
    lines = []
    for knob in knobs["knobs"]:
        parts = []
        for key, table in knobs["data"].items():
            points = sorted(table[knob], key=lambda r: r["value"])
            lo, hi = points[0], points[-1]
            moves = []
            for measure, label in KNOB_MEASURES.items():
                a = [v for v in lo[measure] if v is not None]
                b = [v for v in hi[measure] if v is not None]
                if a and b:
                    moves.append(f"{label} {sum(a) / len(a):.3g} → {sum(b) / len(b):.3g}")
            parts.append(f"{EXPERIMENTS[key].label}: " + ", ".join(moves))
        lines.append(
            f"- **{KNOB_LABELS[knob]}** from {lo['value']:g} to {hi['value']:g}: "
            + "; ".join(parts)
            + "."
        )
    return "\n".join(lines)


def adversarial_text(results: dict[str, Any]) -> str:
    """Whether CT's adversarial term was active in training: the mean adversarial loss over the
    epochs of each data set's CT models (per seed), read from the training logs."""
    parts = []
    for key, d in results["data"].items():
        losses = [v for v in d.get("adv_loss_at_training", []) if v is not None]
        if losses:
            parts.append(f"{EXPERIMENTS[key].label} {' / '.join(f'{v:.3f}' for v in losses)}")
    if not parts:
        return "The training logs hold no adversarial loss."
    return (
        "CT's adversarial loss in training (the cross-entropy of the nascent points against "
        "their factual labels, mean over the epochs), per seed: " + "; ".join(parts) + "."
    )


def knobs_setup_text(knobs: dict[str, Any]) -> str:
    """Whether the knob study was made with the grid's present paper setup: its step values
    include the paper's step only if it was."""
    if SEARCH["step_size"] in knobs["knobs"].get("step_size", []):
        return ""
    return (
        "**This knob study predates the present paper setup:** its models were trained with the "
        f"paper's value of the search step taken as {knobs['knobs']['step_size'][1]:g} (the "
        f"configurations' unread `lr`; the code runs {SEARCH['step_size']:g}), sklearn's moons "
        "and reshuffled batches, so its starting point is not the reproduction chapter's CT "
        "model. `python -m cfbook.commands.paper --knobs` remakes it."
    )
