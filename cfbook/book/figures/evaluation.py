"""Figures of the main example's chapter: the gallery of counterfactuals, the measures per
energy weight, and accuracy under attack; all drawn from two evaluation files (CT and baseline)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from cfbook.book.evaluation import decode_levels
from cfbook.book.figures.training import COLOURS, TEMPLATE
from cfbook.evaluation.attacks import ATTACKS
from cfbook.evaluation.metrics import VALIDITY_THRESHOLD
from cfbook.evaluation.protocol import PaperProtocol

NAMES = {"full": "CT", "vanilla": "baseline"}
_IMAGE_SCALE = [[0, "white"], [1, "black"]]
_CHANGE_SCALE = [[0, "#b2182b"], [0.5, "white"], [1, "#2166ac"]]


def _check_gallery(full: dict[str, Any], vanilla: dict[str, Any]) -> None:
    a, b = full["gallery"], vanilla["gallery"]
    if a["index"] != b["index"] or a["target"] != b["target"]:
        raise ValueError("the two galleries show different digits or targets; re-run both stages")


def gallery_figure(full: dict[str, Any], vanilla: dict[str, Any]) -> go.Figure:
    """One row per digit: the factual, the baseline's and CT's counterfactual, and each one's
    change from the factual. Images share one grey scale, changes one red-blue scale (blue: ink
    added); a check mark or a cross says whether the model reached the target. Pixels are the
    gallery's 8-bit levels, which keeps the figure small."""
    _check_gallery(full, vanilla)
    g_ct, g_base = full["gallery"], vanilla["gallery"]
    factual = decode_levels(g_ct["factual"])
    cf = {
        "vanilla": decode_levels(g_base["counterfactual"]),
        "full": decode_levels(g_ct["counterfactual"]),
    }
    n = factual.shape[0]
    titles = []
    for i in range(n):
        marks = {k: "✓" if g["valid"][i] else "✗" for k, g in (("vanilla", g_base), ("full", g_ct))}
        titles += [
            f"{g_ct['label'][i]} → {g_ct['target'][i]}",
            f"baseline {marks['vanilla']}",
            f"CT {marks['full']}",
            "Δ baseline",
            "Δ CT",
        ]
    fig = make_subplots(
        rows=n, cols=5, subplot_titles=titles, horizontal_spacing=0.01, vertical_spacing=0.3 / n
    )
    for i in range(n):
        images = [
            factual[i],
            cf["vanilla"][i],
            cf["full"][i],
            cf["vanilla"][i] - factual[i],
            cf["full"][i] - factual[i],
        ]
        for j, image in enumerate(images):
            change = j >= 3
            fig.add_trace(
                go.Heatmap(
                    z=image.reshape(28, 28).numpy(),  # int16: base64 in the JSON, not a list
                    coloraxis="coloraxis2" if change else "coloraxis",
                    hovertemplate=("change %{z} of 255" if change else "ink %{z} of 255")
                    + "<extra></extra>",
                ),
                row=i + 1,
                col=j + 1,
            )
    fig.update_xaxes(visible=False, constrain="domain")
    fig.update_yaxes(visible=False, autorange="reversed", constrain="domain")
    for k in range(n * 5):
        suffix = "" if k == 0 else str(k + 1)
        fig.layout[f"yaxis{suffix}"].scaleanchor = f"x{suffix}"
    # Short titles and the change scale below the images: five columns fit a phone's column
    # (the caption says what the columns are and which search made them).
    fig.update_annotations(font_size=10)
    fig.update_layout(
        template=TEMPLATE,
        height=110 * n + 70,
        margin={"l": 5, "r": 5, "t": 25, "b": 10},
        coloraxis={"colorscale": _IMAGE_SCALE, "cmin": 0, "cmax": 255, "showscale": False},
        coloraxis2={
            "colorscale": _CHANGE_SCALE,
            "cmin": -255,
            "cmax": 255,
            "colorbar": {
                "title": {"text": "change (Δ)", "side": "top"},
                "orientation": "h",
                "len": 0.5,
                "thickness": 10,
                "y": -0.01,
                "yanchor": "top",
            },
        },
    )
    return fig


def _errors(stats: list[dict[str, Any]]) -> dict[str, Any]:
    return {"type": "data", "array": [s["se"] or 0.0 for s in stats], "visible": True}


def robustness_figure(full: dict[str, Any], vanilla: dict[str, Any]) -> go.Figure:
    """Accuracy against the attack's epsilon (0: clean), FGSM and PGD, CT and baseline."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=["FGSM", "PGD"], shared_yaxes=True)
    for mode, result in (("full", full), ("vanilla", vanilla)):
        summary = result["robustness"]["summary"]
        for col, attack in enumerate(ATTACKS, start=1):
            stats = [summary["clean"], *summary[attack]]
            fig.add_trace(
                go.Scatter(
                    x=[0.0, *summary["epsilons"]],
                    y=[s["mean"] for s in stats],
                    error_y=_errors(stats),
                    name=NAMES[mode],
                    legendgroup=mode,
                    showlegend=col == 1,
                    mode="lines+markers",
                    line={"color": COLOURS[mode]},
                    hovertemplate=(
                        f"{NAMES[mode]}<br>eps %{{x}}: accuracy %{{y:.3f}}<extra></extra>"
                    ),
                ),
                row=1,
                col=col,
            )
    fig.update_xaxes(title_text="epsilon (L-inf, data in [-1, 1])")
    fig.update_yaxes(title_text="accuracy", row=1, col=1)
    fig.update_layout(template=TEMPLATE, height=380, margin={"t": 60, "b": 40})
    return fig


@dataclass(frozen=True)
class GalleryChange:
    """One model's gallery: how many searches reached their target, of how many digits; the
    pixels each search changed by more than the threshold, mean and median over the digits; and
    the mean L1 change in the units of the [-1, 1] domain."""

    valid: int
    digits: int
    changed_mean: float
    changed_median: float
    l1: float


def gallery_changes(
    full: dict[str, Any], vanilla: dict[str, Any], threshold: int = 26
) -> dict[str, GalleryChange]:
    """Each model's gallery (CT, then the baseline), from its pixels: a pixel counts as changed
    when it moved by more than ``threshold`` of 255 levels (a tenth of the ink range)."""
    _check_gallery(full, vanilla)
    out = {}
    for key, result in (("full", full), ("vanilla", vanilla)):
        g = result["gallery"]
        before = decode_levels(g["factual"]).float()
        after = decode_levels(g["counterfactual"]).float()
        change = (after - before).abs()
        changed = (change > threshold).sum(1).float()
        ink = change.sum(1) / 255 * 2  # L1 distance in the [-1, 1] units of the domain
        out[key] = GalleryChange(
            sum(g["valid"]),
            len(g["valid"]),
            float(changed.mean()),
            float(changed.median()),
            float(ink.mean()),
        )
    return out


def gallery_text(full: dict[str, Any], vanilla: dict[str, Any], threshold: int = 26) -> str:
    """What the gallery shows (``gallery_changes``): per model, how many of the ten
    counterfactuals are valid, how many pixels each search changed and by how much ink."""
    parts = [
        f"the {NAMES[key]} model's searches reached their target for {c.valid} of "
        f"{c.digits} digits, changing {c.changed_mean:.0f} pixels per digit on average "
        f"(median {c.changed_median:.0f}) for an L1 change of {c.l1:.1f}"
        for key, c in gallery_changes(full, vanilla, threshold).items()
    ]
    return (
        "In the gallery, "
        + "; ".join(parts)
        + f". A pixel counts as changed when it moved by more than {threshold} of 255 ink "
        "levels; L1 is in the units of the [-1, 1] domain, summed over the 784 pixels. "
        + gallery_search_text(full["gallery"])
    )


def off_protocol(gallery: dict[str, Any]) -> bool:
    """Whether a gallery was searched or judged otherwise than the paper's test-time search
    (the argmax rule, or another step size)."""
    return gallery["validity"] == "argmax" or gallery["search"]["step_size"] != (
        PaperProtocol().step_size
    )


def gallery_search_text(gallery: dict[str, Any]) -> str:
    """How the gallery was searched and what counted as valid, from its file."""
    s = gallery["search"]
    argmax = gallery["validity"] == "argmax"
    rule = (
        "the model's most likely class is its target"
        if argmax
        else f"the model gives its target at least probability {VALIDITY_THRESHOLD:g}"
    )
    text = (
        f"Both models' searches took steps of {s['step_size']:g}, up to {s['maxiter']} of them, "
        f"stopping at a target probability of {s['tau']:g}, with energy weight "
        f"{s['lambda_energy']:g} and distance weight {s['lambda_cost']:g}; a counterfactual "
        f"counts as valid when {rule}."
    )
    paper = PaperProtocol()
    if off_protocol(gallery):
        text += (
            " These are not the paper's test-time settings that the rest of this chapter uses "
            f"(steps of {paper.step_size:g}, valid at target probability "
            f"{VALIDITY_THRESHOLD:g}): the shipped gallery predates the book's adopting them, "
            "and the evaluation step remakes it with them once the profile's stages are "
            "trained again."
        )
    return text
