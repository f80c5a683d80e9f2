"""The reproduction chapter's tables, figure and text, from the merged grid (``results.json``)
and the paper's published numbers (``cfbook.paper.published``).

Every verdict comes from one rule (``cfbook.paper.agreement``) applied to each seed's model on its
own, as the paper measured its one model: a number "agrees in k of 3 seeds". A disagreement is
named with what the shipped results measure (training-time validity, seeds of opposite sign,
validity gaps) and otherwise listed as open.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from enum import Enum
from statistics import mean, stdev
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from cfbook.book.figures.training import COLOURS, TEMPLATE
from cfbook.evaluation.attacks import accuracy_at
from cfbook.evaluation.measures import ip_star_key
from cfbook.paper import published
from cfbook.paper.agreement import (
    ROUNDING,
    Z,
    binomial_se,
    chance_of_majority,
    count,
    level_agrees,
    pairs_agreeing,
    reduction_agrees,
)
from cfbook.paper.settings import DEFAULT_LAMBDAS, EXPERIMENTS, PAPER_SETUP, VARIANTS

# As Markdown: IP*'s asterisk escaped, so that the page shows it and a later asterisk does not
# turn the text between them italic. ``_plain`` takes the escape off for figures.
LABELS = {"ip": "IP", "ip_star": "IP\\*", "cost": "cost (protected)"}
NAMES = {
    "lin_sep": "Linearly separable",
    "circles": "Circles",
    "moons": "Moons",
    "over": "Overlapping",
    "adult": "Adult",
    "cali": "California housing",
    "credit": "Credit default",
    "gmsc": "Give me some credit",
    "mnist": "MNIST",
}
FGSM_EPS = 3 / 90  # the grid's epsilon nearest the paper's FGSM 0.03
SCALE = "5"  # IP*'s length scale, CT.jl's 5.0, fixed before any result was seen
MAJORITY = 2  # "agrees" in the summary: in at least this many of the seeds


def _plain(label: str) -> str:
    """A label of ``LABELS`` as plain text (figures)."""
    return label.replace("\\*", "*")


def _labels(keys: list[str]) -> str:
    return ", ".join(EXPERIMENTS[k].label for k in keys)


def _sentence(text: str) -> str:
    return text[0].upper() + text[1:] + "."


def _f(x: float | None, digits: int = 1) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def seeds_of(d: dict[str, Any], measure: str, scale: str = SCALE) -> list[dict[str, Any] | None]:
    """Each seed's CT-against-baseline comparison on one measure (None: nothing valid)."""
    key = {"ip": "ip", "ip_star": ip_star_key(float(scale)), "cost": "cost"}.get(measure, measure)
    return d["main"][key]["per_seed"]


def verdicts(d: dict[str, Any], key: str, measure: str, scale: str = SCALE) -> list[bool | None]:
    """Per seed, whether it agrees with the paper's reduction on ``measure``."""
    value, se, sig = published.MAIN[key][measure]
    return [reduction_agrees(s, value, se, sig) for s in seeds_of(d, measure, scale)]


def rule_text() -> str:
    """The rule that decides agreement, stated before any table."""
    return (
        "Each seed, one model like the paper's, is compared with the paper's number on its own. "
        "A **reduction** (IP, IP\\*, cost) "
        f"agrees when |ours − paper| ≤ {Z} × √(SE_ours² + SE_paper²), each SE being 100 × the "
        "standard deviation of the per-run ratio CT / baseline, as the paper computes it, *and* "
        "both are significant (the 99 % interval of per-run differences excludes 0) or neither "
        "is. Where the paper publishes no SE, its SE counts as 0 and significance is not "
        "compared. A **level** (validity, accuracy), published to two digits, agrees when "
        f"|ours − paper| ≤ {Z} × SE_ours + {ROUNDING}, with SE_ours the standard deviation over "
        "runs (validity) or the binomial SE (accuracy). A number *agrees* when it agrees in at "
        f"least {MAJORITY} of the 3 seeds. ✱ marks a significant reduction."
    )


def _reduction(s: dict[str, Any] | None) -> str:
    if s is None or s.get("reduction") is None:
        return "n/a"
    return f"{s['reduction']:.1f} ± {s['se']:.1f}" + (" ✱" if s["significant"] else "")


def main_table(results: dict[str, Any], scale: str = SCALE) -> str:
    """The main table: the paper's reduction, each seed's, and in how many seeds they agree."""
    lines = [
        "| data | measure | paper (% ± SE) | ours, per seed (% ± SE) | agrees in |",
        "|---|---|---|---|---|",
    ]
    for key, d in results["data"].items():
        for measure in LABELS:
            value, se, sig = published.MAIN[key][measure]
            seeds = " / ".join(_reduction(s) for s in seeds_of(d, measure, scale))
            k, n = count(verdicts(d, key, measure, scale))
            lines.append(
                f"| {NAMES[key]} | {LABELS[measure]} | {value:.2f} ± {se:.2f}"
                f"{' ✱' if sig else ''} | {seeds} | {k} of {n} |"
            )
    return "\n".join(lines)


def summary(results: dict[str, Any], scale: str = SCALE) -> dict[str, int]:
    """How many published reductions agree in at least ``MAJORITY`` seeds, of how many."""
    agreed = total = 0
    for key, d in results["data"].items():
        for measure in LABELS:
            total += 1
            agreed += count(verdicts(d, key, measure, scale))[0] >= MAJORITY
    return {"agree": agreed, "total": total}


def summary_text(results: dict[str, Any], scale: str = SCALE) -> str:
    s = summary(results, scale)
    return (
        f"**{s['agree']} of the {s['total']} published reductions agree in at least "
        f"{MAJORITY} of 3 seeds** under the rule above."
    )


@dataclass(frozen=True)
class Ceiling:
    """What the rule lets a perfect reproduction reach: our seeds judged against each other by
    the rule (``agreeing`` of ``pairs`` pairs), and the count expected of ``numbers`` numbers if
    the paper's model were one more seed like ours (``expected``: per number, the chance that
    at least ``MAJORITY`` of 3 seeds agree with a fourth, at that number's own pair rate)."""

    agreeing: int
    pairs: int
    expected: float
    numbers: int


def ceiling(results: dict[str, Any], scale: str = SCALE) -> Ceiling:
    """Seed-against-seed agreement under the chapter's rule, and the count it implies."""
    agreeing = pairs = 0
    expected = 0.0
    numbers = 0
    for d in results["data"].values():
        for measure in LABELS:
            seeds = seeds_of(d, measure, scale)
            a, n = pairs_agreeing(seeds)
            agreeing, pairs, numbers = agreeing + a, pairs + n, numbers + 1
            if n:
                expected += chance_of_majority(a / n, len(seeds), MAJORITY)
    return Ceiling(agreeing, pairs, expected, numbers)


@dataclass(frozen=True)
class Edge:
    """A published number with seeds whose significance one run decides (``fragile``: seed
    indices); ``decides``: whether turning one of them around changes the number's verdict."""

    key: str
    measure: str
    fragile: tuple[int, ...]
    decides: bool


def edges(results: dict[str, Any], scale: str = SCALE) -> list[Edge]:
    """The numbers on the edge of significance: in some seed, leaving out a single run of the
    100 turns its significance around (``fragile`` in the merged results)."""
    out = []
    for key, d in results["data"].items():
        for measure in LABELS:
            seeds = seeds_of(d, measure, scale)
            fragile = tuple(i for i, s in enumerate(seeds) if s is not None and s.get("fragile"))
            if not fragile:
                continue
            value, se, sig = published.MAIN[key][measure]
            now = count(verdicts(d, key, measure, scale))[0] >= MAJORITY
            decides = False
            for i in fragile:
                turned = [
                    {**s, "significant": not s["significant"]} if j == i else s
                    for j, s in enumerate(seeds)
                ]
                verdict = count([reduction_agrees(s, value, se, sig) for s in turned])[0]
                decides |= (verdict >= MAJORITY) != now
            out.append(Edge(key, measure, fragile, decides))
    return out


def wide_published(threshold: float = 100.0) -> list[tuple[str, str, float]]:
    """The published reductions whose own ``Z`` SE interval is wider than ``threshold`` points
    each way: (key, measure, half-width). Almost any seed agrees with them."""
    return [
        (key, measure, Z * se)
        for key, row in published.MAIN.items()
        for measure, (_, se, _) in row.items()
        if Z * se > threshold
    ]


def ceiling_text(results: dict[str, Any], scale: str = SCALE) -> str:
    """The count beside its ceiling, the numbers on the edge of significance, and those that
    agree only through the width of the paper's interval."""
    s, c = summary(results, scale), ceiling(results, scale)
    rate = c.agreeing / c.pairs
    pooled = c.numbers * chance_of_majority(rate, 3, MAJORITY)
    low, high = sorted((round(c.expected), round(pooled)))
    where = "below" if s["agree"] < low else "above" if s["agree"] > high else "within"
    text = (
        "How many could agree? The rule's tolerance is one model's spread between runs, not the "
        "spread between models: judged by it, our own seeds agree with each other in "
        f"{c.agreeing} of {c.pairs} pairs ({rate:.0%}). If the paper's model were one more seed "
        f"like ours, a perfect reproduction would agree on about {low} to {high} of "
        f"{c.numbers} numbers (at each number's own pair rate, {c.expected:.1f}; at the pooled "
        f"{rate:.0%}, {pooled:.1f}). The count of {s['agree']} is {where} that range."
    )
    found = edges(results, scale)
    if found:
        listed = [
            f"{NAMES[e.key]} {LABELS[e.measure]} (seed {', '.join(map(str, e.fragile))})"
            + (", which would change its verdict" if e.decides else "")
            for e in found
        ]
        text += (
            " On the edge of significance, where leaving out one of the 100 runs turns it "
            f"around: {'; '.join(listed)}."
        )
    for key, measure, width in wide_published():
        k, n = count(verdicts(results["data"][key], key, measure, scale))
        text += (
            f" {NAMES[key]}'s {LABELS[measure]} agrees in {k} of {n} seeds only because the "
            f"paper's SE of {published.MAIN[key][measure][1]:g} admits about ±{width:.0f} points."
        )
    return text


@dataclass(frozen=True)
class AverageRow:
    """Ours beside the paper's average row, per seed: each measure's reduction averaged over the
    data sets with a value (None: none), the largest IP or IP* reduction, and on how many data
    sets CT's FGSM accuracy lies above (``above``) or below (``below``) the baseline's by more
    than the sampling error (``_fgsm_sign``)."""

    data_sets: int
    averages: dict[str, list[float | None]]
    largest: list[float | None]
    above: list[int]
    below: list[int]


def average_row(results: dict[str, Any], scale: str = SCALE) -> AverageRow:
    """The paper's "Avg." row and its headline claims, computed from ours per seed."""
    data = results["data"]
    n_seeds = len(next(iter(data.values()))["seeds"])

    def avg(measure: str, seed: int) -> float | None:
        values = [seeds_of(d, measure, scale)[seed] for d in data.values()]
        kept = [v["reduction"] for v in values if v is not None]
        return mean(kept) if kept else None

    largest = [
        max(
            (
                s["reduction"]
                for d in data.values()
                for m in ("ip", "ip_star")
                for s in [seeds_of(d, m, scale)[i]]
                if s is not None
            ),
            default=None,
        )
        for i in range(n_seeds)
    ]
    signs = [
        [
            _fgsm_sign(d["robustness"]["full"][i], d["robustness"]["vanilla"][i])
            for d in data.values()
        ]
        for i in range(n_seeds)
    ]
    return AverageRow(
        data_sets=len(data),
        averages={m: [avg(m, i) for i in range(n_seeds)] for m in LABELS},
        largest=largest,
        above=[s.count(1) for s in signs],
        below=[s.count(-1) for s in signs],
    )


def average_text(results: dict[str, Any], scale: str = SCALE) -> str:
    """The paper's "Avg." row and its headline claims beside ours per seed (``average_row``)."""
    row = average_row(results, scale)

    def per_seed(values: list[float | None]) -> str:
        return " / ".join(_f(v) for v in values)

    rows = [
        f"{LABELS[m]}: paper {published.AVERAGE[m]:.2f}, ours {per_seed(row.averages[m])}"
        for m in LABELS
    ]
    paper_above = sum(a["fgsm"][0] > a["fgsm"][1] for a in published.ACCURACY.values())
    return (
        "The paper's average row over the nine data sets (%), beside ours per seed: "
        + "; ".join(rows)
        + f'. Its headline claims: (1) "implausibility decreases by up to 90 %": our largest '
        f'IP or IP\\* reduction per seed is {per_seed(row.largest)} %; (2) "the cost '
        "of reaching valid counterfactuals with protected features decreases by 19 % on "
        f'average": ours {per_seed(row.averages["cost"])} %; (3) '
        '"adversarial robustness improves across the board": under FGSM at ε≈0.03 CT is more '
        f"accurate than the baseline by more than {Z} standard errors of the difference on "
        f"{' / '.join(map(str, row.above))} of {row.data_sets} data sets, and less "
        f"accurate by as much on {' / '.join(map(str, row.below))} (binomial errors, "
        "the models taken as independent, which overstates the error); the paper's preprint has CT "
        f"above the baseline on {paper_above} of the {len(published.ACCURACY)} data sets it "
        "publishes."
    )


def _fgsm_sign(ct: dict[str, Any], baseline: dict[str, Any]) -> int:
    """1 where CT's FGSM accuracy at ε≈0.03 lies above the baseline's by more than ``Z``
    standard errors of the difference, -1 where below by as much, 0 within: one seed's test set
    cannot tell a smaller difference from sampling error."""
    ((a, sa),), ((b, sb),) = _accuracies([ct], "fgsm"), _accuracies([baseline], "fgsm")
    margin = Z * math.hypot(sa, sb)
    return int(a - b > margin) - int(b - a > margin)


def _levels(seeds: list[dict[str, Any]], value: float) -> tuple[str, list[bool | None]]:
    shown = " / ".join(_f(s["mean"], 2) for s in seeds)
    return shown, [level_agrees(s["mean"], s["se"], value) for s in seeds]


def validity_table(results: dict[str, Any]) -> str:
    """Validity per seed beside the paper's, CT and baseline, without and with constraints."""
    lines = [
        "| data | setting | paper CT / BL | ours CT, per seed | ours BL, per seed | agrees in |",
        "|---|---|---|---|---|---|",
    ]
    for key, d in results["data"].items():
        for experiment, name in (("unconstrained", "no constraints"), ("protected", "protected")):
            paper = published.VALIDITY[key][experiment]
            ct, ct_ok = _levels(d["validity"][experiment]["full"], paper[0])
            bl, bl_ok = _levels(d["validity"][experiment]["vanilla"], paper[1])
            both = [a and b for a, b in zip(ct_ok, bl_ok, strict=True)]
            k, n = count(both)
            lines.append(
                f"| {NAMES[key]} | {name} | {paper[0]:.2f} / {paper[1]:.2f} | {ct} | {bl} | "
                f"{k} of {n} |"
            )
    return "\n".join(lines)


def validity_close(
    results: dict[str, Any], experiment: str, tolerance: float
) -> tuple[int, list[str]]:
    """The data sets where CT's and the baseline's validity are both within ``tolerance`` of
    the paper's in at least ``MAJORITY`` seeds: how many, and the others (keys)."""
    close, far = 0, []
    for key, d in results["data"].items():
        paper = published.VALIDITY[key][experiment]
        seeds = zip(*(d["validity"][experiment][m] for m in ("full", "vanilla")), strict=True)
        near = sum(
            all(
                s["mean"] is not None and abs(s["mean"] - p) <= tolerance
                for s, p in zip(pair, paper, strict=True)
            )
            for pair in seeds
        )
        if near >= MAJORITY:
            close += 1
        else:
            far.append(key)
    return close, far


def validity_text(results: dict[str, Any], tolerance: float = 0.1) -> str:
    """On how many data sets both models' validity is within ``tolerance`` of the paper's in at
    least ``MAJORITY`` seeds, and where it is not."""
    parts = []
    for experiment, name in (("unconstrained", "without constraints"), ("protected", "with them")):
        close, far = validity_close(results, experiment, tolerance)
        parts.append(
            f"{name}, CT's and the baseline's validity are both within {tolerance:g} of the "
            f"paper's in at least {MAJORITY} seeds on {close} of {len(results['data'])} data sets"
            + (f" (not on {_labels(far)})" if far else "")
        )
    return _sentence("; ".join(parts))


def _only(results: dict[str, Any], keys: list[str]) -> dict[str, Any]:
    return {"data": {k: results["data"][k] for k in keys}}


# The variants that train CT with protected features with other loss weights than the grid's
# (the main grid's), by what they give it.
WEIGHT_VARIANTS = {
    "zero_lambdas_protected": "without the ridge and the adversarial term",
    "default_lambdas_protected": "with the bare defaults (λ_reg = {reg:g}, λ_adv = {adv:g})",
}


def protected_weights_text(
    results: dict[str, Any], variants: dict[str, dict[str, Any]], tolerance: float = 0.1
) -> str:
    """CT's protected validity per data set and seed with the grid's loss weights, beside each
    shipped ``WEIGHT_VARIANTS`` variant's and the paper's; empty when none is shipped."""
    shipped = {name: variants[name] for name in WEIGHT_VARIANTS if name in variants}
    if not shipped:
        return ""
    keys = [k for k in results["data"] if all(k in v["data"] for v in shipped.values())]
    _, _, reg, adv = DEFAULT_LAMBDAS
    rows = [("with the main grid's weights", results)]
    rows += [
        (f"{WEIGHT_VARIANTS[name].format(reg=reg, adv=adv)} (`{name}`)", v)
        for name, v in shipped.items()
    ]
    parts = []
    for what, merged in rows:
        close, _ = validity_close(_only(merged, keys), "protected", tolerance)
        parts.append(f"{what} on {close}")
    return _sentence(
        f"CT's and the baseline's protected validity lie within {tolerance:g} of the paper's in "
        f"at least {MAJORITY} seeds, of the {len(keys)} synthetic sets, "
        + "; ".join(parts)
        + " (each seed's value: the table's last column)"
    )


def flipped(results: dict[str, Any], rerun: dict[str, Any]) -> list[tuple[str, str]]:
    """The numbers of the main and validity tables (data set, number) whose verdict, agreement
    in at least ``MAJORITY`` seeds, differs between two runs of the grid."""
    out = []
    for key, d in results["data"].items():
        ours, theirs = _all_verdicts(d, key), _all_verdicts(rerun["data"][key], key)
        for number, verdict in ours.items():
            if (count(verdict)[0] >= MAJORITY) != (count(theirs[number])[0] >= MAJORITY):
                out.append((key, number))
    return out


def rerun_text(
    results: dict[str, Any], rerun: dict[str, Any], run: dict[str, Any], tolerance: float = 0.1
) -> str:
    """The shipped results against the same command run again, same code and seeds, on another
    processor (``run``: its ``cpu``, ``date`` and ``wall_seconds``): how far the counts of
    this chapter move with the processor's float rounding alone (``flipped``)."""
    here, there = summary(results), summary(rerun)
    moved = [f"{NAMES[key]} {number}" for key, number in flipped(results, rerun)]
    n_numbers = sum(len(_all_verdicts(d, k)) for k, d in results["data"].items())
    close = {
        e: (validity_close(results, e, tolerance)[0], validity_close(rerun, e, tolerance)[0])
        for e in ("unconstrained", "protected")
    }
    text = (
        f"Run again with the same settings and seeds on another 2-core CPU ({run['cpu']}, "
        f"{run['date']}; {run['wall_seconds'] / 60:.0f} minutes for everything), "
        f"{there['agree']} of the {there['total']} published reductions agree in at least "
        f"{MAJORITY} seeds (here {here['agree']}); CT's and the baseline's validity are both "
        f"within {tolerance:g} of the paper's in at least {MAJORITY} seeds on "
        f"{close['unconstrained'][1]} data sets without constraints (here "
        f"{close['unconstrained'][0]}) and on {close['protected'][1]} with them (here "
        f"{close['protected'][0]}). "
    )
    if not moved:
        return text + (
            f"None of the {n_numbers} numbers of the main and validity tables changes its verdict."
        )
    verb = "changes its" if len(moved) == 1 else "change their"
    return text + (
        f"{len(moved)} of the {n_numbers} numbers of the main and validity tables {verb} verdict "
        f"({', '.join(moved)}): the processors round floats differently, training carries that "
        "into slightly different models, and numbers near the rule's edge move. No count is "
        "sharper than that."
    )


def cost_table(results: dict[str, Any]) -> str:
    """Cost reductions with and without constraints, per seed, beside the paper's."""
    lines = [
        "| data | paper, protected | ours, protected | agrees in | paper, no constraints | "
        "ours, no constraints | agrees in |",
        "|---|---|---|---|---|---|---|",
    ]
    for key, d in results["data"].items():
        value, se, sig = published.MAIN[key]["cost"]
        free = published.COST_UNCONSTRAINED[key]
        with_c, without = seeds_of(d, "cost"), seeds_of(d, "cost_unconstrained")
        k1, n1 = count(verdicts(d, key, "cost"))
        k2, n2 = count([reduction_agrees(s, free) for s in without])
        lines.append(
            f"| {NAMES[key]} | {value:.2f}{' ✱' if sig else ''} | "
            f"{' / '.join(_reduction(s) for s in with_c)} | {k1} of {n1} | {free:.2f} | "
            f"{' / '.join(_reduction(s) for s in without)} | {k2} of {n2} |"
        )
    return "\n".join(lines)


def cost_signs(results: dict[str, Any]) -> dict[str, tuple[int, int]]:
    """With the protected features (``cost``) and without constraints
    (``cost_unconstrained``): how many seed reductions share the sign of the paper's, of how
    many seeds had one."""
    out = {}
    for key, paper_of in (
        ("cost", lambda k: published.MAIN[k]["cost"][0]),
        ("cost_unconstrained", published.COST_UNCONSTRAINED.get),
    ):
        pairs = [
            (paper_of(k), s["reduction"])
            for k, d in results["data"].items()
            for s in seeds_of(d, key)
            if s is not None
        ]
        out[key] = (sum((p > 0) == (o > 0) for p, o in pairs), len(pairs))
    return out


def cost_text(results: dict[str, Any]) -> str:
    """How often our seeds' cost reductions share the paper's sign, with and without
    constraints (``cost_signs``)."""
    signs = cost_signs(results)
    parts = [
        f"{name}, {signs[key][0]} of {signs[key][1]} seed reductions have the paper's sign"
        for key, name in (
            ("cost", "with the protected features"),
            ("cost_unconstrained", "without constraints"),
        )
    ]
    return _sentence("; ".join(parts))


def _accuracies(runs: list[dict[str, Any]], attack: str | None) -> list[tuple[float, float]]:
    out = []
    for r in runs:
        a = r["clean"] if attack is None else accuracy_at(r, attack, FGSM_EPS)
        out.append((a, binomial_se(a, r["rows"])))
    return out


def accuracy_verdicts(d: dict[str, Any], key: str) -> dict[str, list[bool | None]] | None:
    """Per seed, whether CT's and the baseline's accuracy, ``clean`` and under ``fgsm`` at
    ε≈0.03, both agree with the paper's earlier run within the binomial error of our test rows
    (None: the paper published none for this data set)."""
    paper = published.ACCURACY.get(key)
    if paper is None:
        return None
    out = {}
    for attack in ("clean", "fgsm"):
        ct = _accuracies(d["robustness"]["full"], None if attack == "clean" else attack)
        bl = _accuracies(d["robustness"]["vanilla"], None if attack == "clean" else attack)
        p = paper[attack]
        out[attack] = [
            level_agrees(a, sa, p[0]) and level_agrees(b, sb, p[1])
            for (a, sa), (b, sb) in zip(ct, bl, strict=True)
        ]
    return out


def accuracy_table(results: dict[str, Any]) -> str:
    """Clean and FGSM accuracy per seed beside the paper's earlier run
    (``accuracy_verdicts``)."""
    lines = [
        "| data | accuracy | paper CT / BL | ours CT, per seed | ours BL, per seed | agrees in |",
        "|---|---|---|---|---|---|",
    ]
    for key, d in results["data"].items():
        agree = accuracy_verdicts(d, key)
        for attack, name in (("clean", "clean"), ("fgsm", "FGSM ε≈0.03")):
            ct = _accuracies(d["robustness"]["full"], None if attack == "clean" else attack)
            bl = _accuracies(d["robustness"]["vanilla"], None if attack == "clean" else attack)
            shown = [" / ".join(f"{a:.2f}" for a, _ in side) for side in (ct, bl)]
            if agree is None:
                lines.append(
                    f"| {NAMES[key]} | {name} | not published | {shown[0]} | {shown[1]} | – |"
                )
                continue
            p = published.ACCURACY[key][attack]
            k, n = count(agree[attack])
            lines.append(
                f"| {NAMES[key]} | {name} | {p[0]:.2f} / {p[1]:.2f} | {shown[0]} | {shown[1]} | "
                f"{k} of {n} |"
            )
    return "\n".join(lines)


def more_robust(results: dict[str, Any], margin: float = 0.05) -> tuple[list[str], list[str]]:
    """The data sets (keys) where CT is more accurate under FGSM than the baseline by more than
    ``margin`` in every seed here, and in the paper's earlier run."""
    ours = [
        k
        for k, d in results["data"].items()
        if all(
            accuracy_at(c, "fgsm", FGSM_EPS) > accuracy_at(b, "fgsm", FGSM_EPS) + margin
            for c, b in zip(d["robustness"]["full"], d["robustness"]["vanilla"], strict=True)
        )
    ]
    paper = [k for k, a in published.ACCURACY.items() if a["fgsm"][0] > a["fgsm"][1] + margin]
    return ours, paper


def robustness_text(results: dict[str, Any], margin: float = 0.05) -> str:
    """Where CT is more robust than the baseline under FGSM in every seed, beside the paper
    (``more_robust``)."""
    ours, paper = ([EXPERIMENTS[k].label for k in keys] for keys in more_robust(results, margin))
    return (
        f"Under FGSM at ε≈0.03, CT is more accurate than the baseline by more than {margin:g} in "
        f"every seed on {', '.join(ours) or 'no data set'} here, and on "
        f"{', '.join(paper) or 'none'} in the paper's earlier run."
    )


class Cause(Enum):
    """What the shipped results measure about a disagreement with the paper."""

    FEW_VALID_IN_TRAINING = "few valid in training"  # under half in every seed's training
    SIGNS_DIFFER = "signs differ"  # seeds on both sides of zero
    ALMOST_NONE_VALID = "almost none valid"  # test-time validity under 0.05, both models
    # The two models' mean validity over 0.1 apart, and their gap over 0.1 from the paper's.
    VALIDITY_DIFFERS = "validity differs"


@dataclass(frozen=True)
class Finding:
    """A published reduction that agrees in fewer than ``MAJORITY`` seeds: in how many of how
    many; what the shipped results measure about it (``causes``, with the training-time
    validity per seed and the two models' mean test-time validity they quote); the variants
    that change the count, as (name, seeds agreeing, seeds); and every variant tried."""

    key: str
    measure: str
    agree: int
    seeds: int
    causes: tuple[Cause, ...]
    training_valid: tuple[float, ...]
    validity: tuple[float, float] | None
    variants: tuple[tuple[str, int, int], ...]
    tried: tuple[str, ...]


def _causes(
    d: dict[str, Any], key: str, measure: str, scale: str
) -> tuple[list[Cause], list[float], tuple[float, float] | None]:
    """What the shipped results measure that bears on a disagreement, with the numbers."""
    causes = []
    training = "full_protected" if measure == "cost" else "full"
    valid = [v for v in d["valid_at_training"][training] if v is not None]
    if valid and max(valid) < 0.5:
        causes.append(Cause.FEW_VALID_IN_TRAINING)
    per_seed = [s["reduction"] for s in seeds_of(d, measure, scale) if s is not None]
    if per_seed and min(per_seed) < 0 < max(per_seed):
        causes.append(Cause.SIGNS_DIFFER)
    experiment = "protected" if measure == "cost" else "unconstrained"
    v = d["validity"][experiment]
    ct = [s["mean"] for s in v["full"] if s["mean"] is not None]
    bl = [s["mean"] for s in v["vanilla"] if s["mean"] is not None]
    levels = (mean(ct), mean(bl)) if ct and bl else None
    if ct and bl and max(ct + bl) < 0.05:
        causes.append(Cause.ALMOST_NONE_VALID)
    elif levels is not None and abs(levels[0] - levels[1]) > 0.1:
        # A gap the paper's models share says nothing about a difference from the paper.
        paper_ct, paper_bl = published.VALIDITY[key][experiment]
        if abs(levels[0] - levels[1] - (paper_ct - paper_bl)) > 0.1:
            causes.append(Cause.VALIDITY_DIFFERS)
    return causes, valid, levels


def _bears(variant: str, measure: str) -> bool:
    """Whether ``variant`` can move ``measure``: one that changes only the protected runs' loss
    weights trains the other models as the grid does, so it bears on the protected cost alone."""
    v = VARIANTS.get(variant)
    if v is None or measure == "cost":
        return True
    return replace(v, protected_lambdas="main") != replace(PAPER_SETUP, name=v.name, data=v.data)


def disagreements(
    results: dict[str, Any],
    scale: str = SCALE,
    variants: dict[str, dict[str, Any]] | None = None,
) -> list[Finding]:
    """Every published reduction that does not agree in ``MAJORITY`` seeds, with what the
    shipped results measure about it and the variants run on its data set that change how many
    seeds agree."""
    variants = variants or {}
    out = []
    for key, d in results["data"].items():
        for measure in LABELS:
            k, n = count(verdicts(d, key, measure, scale))
            if k >= MAJORITY:
                continue
            causes, valid, levels = _causes(d, key, measure, scale)
            tried = [
                name for name, v in variants.items() if key in v["data"] and _bears(name, measure)
            ]
            moved = []
            for name in tried:
                k1, n1 = count(verdicts(variants[name]["data"][key], key, measure, scale))
                if k1 != k:
                    moved.append((name, k1, n1))
            out.append(
                Finding(
                    key,
                    measure,
                    k,
                    n,
                    tuple(causes),
                    tuple(valid),
                    levels,
                    tuple(moved),
                    tuple(tried),
                )
            )
    return out


_CAUSE = {
    Cause.SIGNS_DIFFER: "our seeds differ in sign: the trained model, not the runs, decides it",
    Cause.ALMOST_NONE_VALID: "almost no test-time counterfactual is valid",
}


def _cause_text(cause: Cause, finding: Finding) -> str:
    if cause is Cause.FEW_VALID_IN_TRAINING:
        shown = ", ".join(f"{v:.0%}" for v in finding.training_valid)
        return (
            f"only {shown} of the training-time counterfactuals were valid, so the energy "
            "differential was zero for most of them"
        )
    if cause is Cause.VALIDITY_DIFFERS:
        ct, bl = finding.validity
        paper_ct, paper_bl = published.VALIDITY[finding.key][
            "protected" if finding.measure == "cost" else "unconstrained"
        ]
        return (
            f"the two models' validity differs as the paper's does not (CT {ct:.2f}, BL "
            f"{bl:.2f} on average; paper {paper_ct:.2f}, {paper_bl:.2f}), so the two means are "
            "over different factuals"
        )
    return _CAUSE[cause]


def findings(
    results: dict[str, Any],
    scale: str = SCALE,
    variants: dict[str, dict[str, Any]] | None = None,
) -> str:
    """Every published reduction that does not agree in ``MAJORITY`` seeds (``disagreements``),
    with one measured cause: the variants that bring it to agreement, else the first of what the
    shipped results measure about it; without either it is listed as open, with the variants
    that were tried. (Every move of every variant is in ``causes_table``.)"""
    out = []
    for f in disagreements(results, scale, variants):
        agreeing = [f"`{name}` ({k} of {n})" for name, k, n in f.variants if k >= MAJORITY]
        if agreeing:
            text = f"Measured: it agrees with variant {', '.join(agreeing)}."
        elif f.causes:
            text = f"Measured: {_cause_text(f.causes[0], f)}."
        else:
            tried = f" (variants tried: {', '.join(f.tried)})" if f.tried else ""
            text = f"Open: nothing measured brings it to agreement{tried}."
        out.append(f"- **{NAMES[f.key]}, {LABELS[f.measure]}** ({f.agree} of {f.seeds}): {text}")
    return "\n".join(out) if out else "Every published reduction agrees in at least 2 seeds."


# What each variant changes (``cfbook.paper.settings.VARIANTS``), for the causes table.
VARIANT_TEXT = {
    "sklearn_data": "sklearn's generators instead of MLJBase's (other centres, moons, labels)",
    "step_0.25": "search step 0.25, the configurations' unread `lr`, in training and test",
    "shuffled": "mini-batches reshuffled every epoch (CT.jl keeps Flux's `shuffle=false`)",
    "no_decoding": "no one-hot decoding in the test-time search",
    "own_groups": "`education_num` left out of the `education` group",
    "straight_through": "straight-through gradient through the decoding, not frozen",
    "default_lambdas_protected": "CTExperiments' bare default ridge (0.1) and adversarial weight "
    "(0.25) for CT with protected features, not the launch command's per-data-set weights",
    "zero_lambdas_protected": "no energy ridge and no adversarial term for CT with protected "
    "features, as CT.jl's mutability grids were committed once (`e14b747b`)",
    "data_draw_43": "the synthetic points drawn again (seed 43 instead of 42)",
    "data_draw_44": "the synthetic points drawn again (seed 44 instead of 42)",
}


def validity_verdicts(d: dict[str, Any], key: str, experiment: str) -> list[bool | None]:
    """Per seed, whether CT's and the baseline's validity both agree with the paper's in one
    ``experiment`` (None: a seed without a value)."""
    paper = published.VALIDITY[key][experiment]
    ct, ct_ok = _levels(d["validity"][experiment]["full"], paper[0])
    bl, bl_ok = _levels(d["validity"][experiment]["vanilla"], paper[1])
    return [None if a is None or b is None else a and b for a, b in zip(ct_ok, bl_ok, strict=True)]


def _all_verdicts(d: dict[str, Any], key: str) -> dict[str, list[bool | None]]:
    out = {LABELS[m]: verdicts(d, key, m) for m in LABELS}
    out["validity, no constraints"] = validity_verdicts(d, key, "unconstrained")
    out["validity, protected"] = validity_verdicts(d, key, "protected")
    return out


@dataclass(frozen=True)
class VariantEffect:
    """What one variant changes: each number it moves, as (data set, number, (seeds agreeing,
    seeds) with the paper setup, the same with the variant); and how many of all its numbers
    agree in at least ``MAJORITY`` seeds with the paper setup (``before``) and with it
    (``after``), of ``total``."""

    name: str
    moved: list[tuple[str, str, tuple[int, int], tuple[int, int]]]
    before: int
    after: int
    total: int


def variant_effects(
    results: dict[str, Any], variants: dict[str, dict[str, Any]]
) -> list[VariantEffect]:
    """Per shipped variant (one departure from the paper's setup, run on the data sets it
    concerns), the numbers of the main and validity tables whose agreement it moves."""
    out = []
    for name, other in variants.items():
        moved, before, after, total = [], 0, 0, 0
        for key, d in other["data"].items():
            ours, theirs = _all_verdicts(results["data"][key], key), _all_verdicts(d, key)
            for number, verdict in theirs.items():
                paper_setup, changed = count(ours[number]), count(verdict)
                total += 1
                before += paper_setup[0] >= MAJORITY
                after += changed[0] >= MAJORITY
                if paper_setup[0] != changed[0]:
                    moved.append((key, number, paper_setup, changed))
        out.append(VariantEffect(name, moved, before, after, total))
    return out


def causes_table(results: dict[str, Any], variants: dict[str, dict[str, Any]]) -> str:
    """Per shipped variant, how many seeds agree with the paper with the paper's setup and with
    the variant, for every number the variant moves; a summary row per variant
    (``variant_effects``)."""
    lines = [
        "| variant | data | number | paper setup: agrees in | variant: agrees in | "
        "variant, per seed |",
        "|---|---|---|---|---|---|",
    ]
    for effect in variant_effects(results, variants):
        name = effect.name
        for key, number, (k0, n0), (k1, n1) in effect.moved:
            d = variants[name]["data"][key]
            measure = next((m for m, label in LABELS.items() if label == number), None)
            if measure is None:
                experiment = "unconstrained" if "no constraints" in number else "protected"
                shown = " / ".join(
                    f"{a['mean']:.2f}, {b['mean']:.2f}"
                    for a, b in zip(
                        d["validity"][experiment]["full"],
                        d["validity"][experiment]["vanilla"],
                        strict=True,
                    )
                )
            else:
                shown = " / ".join(_reduction(x) for x in seeds_of(d, measure))
            lines.append(
                f"| {name} | {NAMES[key]} | {number} | {k0} of {n0} | {k1} of {n1} | {shown} |"
            )
        lines.append(
            f"| **{name}**: {VARIANT_TEXT.get(name, name)} | all its data sets | numbers that "
            f"agree in ≥ {MAJORITY} seeds | {effect.before} of {effect.total} | {effect.after} of "
            f"{effect.total} | |"
        )
    return "\n".join(lines)


def length_scale_text(results: dict[str, Any]) -> str:
    """IP* at the text's length scale 0.5, as a sensitivity beside the code's 5.0."""
    agreed = {
        scale: sum(
            count(verdicts(d, key, "ip_star", scale))[0] >= MAJORITY
            for key, d in results["data"].items()
        )
        for scale in ("5", "0.5")
    }
    n = len(results["data"])
    return (
        f"IP\\* uses CT.jl's length scale 5.0 (`globals.jl`), fixed before any result was seen. "
        f"At the text's 0.5, {agreed['0.5']} of {n} IP\\* reductions would agree with the paper "
        f"in at least {MAJORITY} seeds, against {agreed['5']} at 5.0: a sensitivity, not a choice."
    )


def reduction_figure(results: dict[str, Any], scale: str = SCALE) -> go.Figure:
    """A dot plot per measure: the paper's reduction and each seed's, each with ± Z SE."""
    keys = list(results["data"])
    names = [NAMES[k] for k in keys]
    fig = make_subplots(
        rows=len(LABELS),
        cols=1,
        shared_yaxes=True,
        subplot_titles=[f"{_plain(v)} reduction (%)" for v in LABELS.values()],
        vertical_spacing=0.08,
    )
    for row, measure in enumerate(LABELS, start=1):
        paper = [published.MAIN[k][measure] for k in keys]
        fig.add_scatter(
            x=[p[0] for p in paper],
            y=names,
            error_x={"type": "data", "array": [Z * p[1] for p in paper]},
            mode="markers",
            marker={"symbol": "diamond", "size": 10, "color": COLOURS["vanilla"]},
            name=f"paper (± {Z} SE)",
            showlegend=row == 1,
            row=row,
            col=1,
        )
        n_seeds = max(len(seeds_of(results["data"][k], measure, scale)) for k in keys)
        for i in range(n_seeds):
            seeds = [seeds_of(results["data"][k], measure, scale)[i] for k in keys]
            fig.add_scatter(
                x=[None if s is None else s["reduction"] for s in seeds],
                y=names,
                error_x={
                    "type": "data",
                    "array": [None if s is None else Z * s["se"] for s in seeds],
                },
                mode="markers",
                marker={"size": 7, "color": COLOURS["full"], "opacity": 0.8},
                name=f"cfbook, one dot per seed (± {Z} SE)",
                showlegend=row == 1 and i == 0,
                row=row,
                col=1,
            )
        # The axis spans every seed's interval and the paper's, save a published interval wider
        # than ``wide_published``'s threshold, which would squeeze the rest: it runs off the
        # axis, and a note at the edge says how far.
        wide = {k: w for k, m, w in wide_published() if m == measure}
        ends = [p[0] for p in paper]
        ends += [
            v
            for k, p in zip(keys, paper, strict=True)
            if k not in wide
            for v in (p[0] - Z * p[1], p[0] + Z * p[1])
        ]
        for k in keys:
            for s in seeds_of(results["data"][k], measure, scale):
                if s is not None and s.get("reduction") is not None:
                    ends += [s["reduction"] - Z * s["se"], s["reduction"] + Z * s["se"]]
        low, high = min(ends), max(ends)
        pad = 0.05 * (high - low)
        fig.update_xaxes(title_text="reduction (%)", range=[low - pad, high + pad], row=row, col=1)
        for k, width in wide.items():
            fig.add_annotation(
                x=high + pad,
                y=NAMES[k],
                text=f"paper ± {width:.0f}, past the axis",
                xanchor="right",
                yshift=12,
                showarrow=False,
                font={"size": 11},
                row=row,
                col=1,
            )
    fig.update_yaxes(autorange="reversed")
    fig.update_layout(
        template=TEMPLATE, height=330 * len(LABELS), legend={"orientation": "h", "y": -0.06}
    )
    return fig


def settings_table() -> str:
    """The per-data-set settings of the grid, as the paper's grid configurations give them."""
    lines = [
        "| data | training rows | batch | τ (training) | counterfactuals / epoch | λ_reg | "
        "protected | factuals / round and weight |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for e in EXPERIMENTS.values():
        protected = "pixel rows 1-5, 24-28" if e.kind == "image" else ", ".join(e.protected)
        reg = f"{e.lambda_reg:g}"
        lines.append(
            f"| {e.label} | {e.n_train:,} | {e.batch_size} | {e.tau:g} | {e.nce:,} | {reg} | "
            f"{protected} | {e.individuals} |"
        )
    return "\n".join(lines)


def timing_table(results: dict[str, Any]) -> str:
    lines = ["| data | training (s) | evaluation (s) |", "|---|---|---|"]
    total_t = total_e = 0.0
    for key, d in results["data"].items():
        total_t += d["training_seconds"]
        total_e += d["evaluation_seconds"]
        lines.append(
            f"| {EXPERIMENTS[key].label} | {d['training_seconds']:.0f} | "
            f"{d['evaluation_seconds']:.0f} |"
        )
    lines.append(f"| **all** | {total_t:.0f} | {total_e:.0f} |")
    return "\n".join(lines)


# The variants that draw the synthetic data again (``cfbook.paper.settings.DRAWN``), beside the
# grid's draw.
DRAW_VARIANTS = ("data_draw_43", "data_draw_44")
DRAW_MEASURES = ("ip", "ip_star")


def draws(
    results: dict[str, Any], variants: dict[str, dict[str, Any]], scale: str = SCALE
) -> dict[str, dict[str, list[list[float | None]]]]:
    """Per redrawn data set and measure, the reductions per draw (the grid's first) and seed;
    empty without the draw variants."""
    shipped = [variants[v] for v in DRAW_VARIANTS if v in variants]
    if not shipped:
        return {}
    keys = [k for k in shipped[0]["data"] if all(k in v["data"] for v in shipped)]
    return {
        key: {
            m: [
                [None if s is None else s["reduction"] for s in seeds_of(r["data"][key], m, scale)]
                for r in (results, *shipped)
            ]
            for m in DRAW_MEASURES
        }
        for key in keys
    }


def draw_table(
    results: dict[str, Any], variants: dict[str, dict[str, Any]], scale: str = SCALE
) -> str:
    """The redrawn data sets' IP and IP* reductions, per draw and seed, beside the paper's."""
    found = draws(results, variants, scale)
    if not found:
        return ""
    n_draws = len(next(iter(next(iter(found.values())).values())))
    lines = [
        "| data | measure | paper | "
        + " | ".join(["grid's draw", *(f"draw {i + 1}" for i in range(n_draws - 1))])
        + " |",
        "|---|---|---|" + "---|" * n_draws,
    ]
    for key, measures in found.items():
        for m, per_draw in measures.items():
            shown = [" / ".join(_f(v) for v in seeds) for seeds in per_draw]
            lines.append(
                f"| {NAMES[key]} | {LABELS[m]} | {published.MAIN[key][m][0]:.1f} | "
                + " | ".join(shown)
                + " |"
            )
    return "\n".join(lines)


@dataclass(frozen=True)
class DrawReading:
    """One redrawn number: the paper's value, the draws' means (over seeds), the seeds' mean
    standard deviation within a draw, and how far apart the draws' means lie (their standard
    deviation)."""

    key: str
    measure: str
    paper: float
    low: float
    high: float
    draw_means: list[float]
    within: float
    between: float

    @property
    def follows_draw(self) -> bool:
        """The draws' means spread more than twice as far as the seeds alone would move them
        (their standard deviation within a draw over the square root of the seeds)."""
        seeds = 3
        return self.between > 2 * self.within / math.sqrt(seeds)


def draw_readings(
    results: dict[str, Any], variants: dict[str, dict[str, Any]], scale: str = SCALE
) -> list[DrawReading]:
    """What the redrawn data sets say, number by number (``DrawReading``)."""
    out = []
    for key, measures in draws(results, variants, scale).items():
        for m, per_draw in measures.items():
            kept = [[v for v in seeds if v is not None] for seeds in per_draw]
            flat = [v for seeds in kept for v in seeds]
            means = [mean(seeds) for seeds in kept]
            within = mean(stdev(seeds) for seeds in kept)
            out.append(
                DrawReading(
                    key,
                    m,
                    published.MAIN[key][m][0],
                    min(flat),
                    max(flat),
                    means,
                    within,
                    stdev(means),
                )
            )
    return out


def draw_text(
    results: dict[str, Any], variants: dict[str, dict[str, Any]], scale: str = SCALE
) -> str:
    """Whether the redrawn data sets' IP and IP* reductions follow the data draw or the
    training seed (``draw_readings``)."""
    readings = draw_readings(results, variants, scale)
    if not readings:
        return ""
    n_draws = len(readings[0].draw_means)
    keys = list(dict.fromkeys(r.key for r in readings))

    def named(rs: list[DrawReading]) -> str:
        return ", ".join(f"{NAMES[r.key]} {LABELS[r.measure]}" for r in rs)

    spreads = "; ".join(
        f"{NAMES[r.key]} {LABELS[r.measure]}: draws {r.between:.1f} apart, seeds {r.within:.1f}"
        for r in readings
    )
    by_draw = [r for r in readings if r.follows_draw]
    verdict = (
        "every number follows the training seed, not the draw"
        if not by_draw
        else f"{named(by_draw)} follow the draw, the others the training seed"
    )
    inside = [r for r in readings if r.low <= r.paper <= r.high]
    below = [r for r in readings if r.high < r.paper]
    above = [r for r in readings if r.low > r.paper]
    sides = [
        f"{what} for {named(rs)}"
        for what, rs in (
            (f"the paper's value lies within the {n_draws * 3} models' range", inside),
            ("every model lies below it", below),
            ("every model lies above it", above),
        )
        if rs
    ]
    return (
        f"{' and '.join(NAMES[k] for k in keys)} were drawn {n_draws - 1} more times (variants "
        f"{', '.join(f'`{v}`' for v in DRAW_VARIANTS)}) and trained with the same three seeds. A "
        "number follows the draw where the draws' means spread more than twice as far as the "
        f"seeds alone would move a mean of three (their spread within a draw over √3). By that "
        f"rule {verdict} (standard deviations: {spreads}). Across all draws, "
        + "; ".join(sides)
        + "."
    )
