"""Tables and text that compare two evaluations (CT against the baseline), written from the
numbers so the chapter says what held and what did not for whichever run produced them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cfbook.evaluation.protocol import mean_se

#: Label and direction of each counterfactual measure (True: higher is better).
MEASURE_LABELS = {
    "validity": ("validity", True),
    "cost": ("cost", False),
    "ip": ("IP", False),
    "ip_star": ("IP*", False),
}
ATTACK_EPS = "0.03"


@dataclass(frozen=True)
class Comparison:
    """One measure, CT against the baseline: means and standard errors over runs, and the
    paired per-run percentage change (positive: CT better)."""

    key: str
    label: str
    higher_is_better: bool
    ct: dict[str, Any]
    baseline: dict[str, Any]
    change: dict[str, Any]

    @property
    def ct_better(self) -> bool | None:
        mean = self.change["mean"]
        return None if mean is None else mean > 0

    @property
    def clear(self) -> bool:
        """Whether the change exceeds twice its standard error (one run: never clear)."""
        mean, se = self.change["mean"], self.change["se"]
        return mean is not None and se is not None and abs(mean) > 2 * se


def _change(ct: float | None, base: float | None, higher_is_better: bool) -> float | None:
    if ct is None or base is None or base == 0:
        return None
    return 100.0 * ((ct - base) if higher_is_better else (base - ct)) / abs(base)


def _check_pair(full: dict[str, Any], vanilla: dict[str, Any]) -> None:
    if full["meta"].get("profile") != vanilla["meta"].get("profile"):
        raise ValueError(
            f"evaluations of different profiles: {full['meta'].get('profile')!r} and "
            f"{vanilla['meta'].get('profile')!r}"
        )
    if full["config"] != vanilla["config"] or len(full["runs"]) != len(vanilla["runs"]):
        raise ValueError("the two evaluations used different protocols; re-run both stages")


def compare_quality(full: dict[str, Any], vanilla: dict[str, Any]) -> list[Comparison]:
    """Validity, cost, IP and IP* pooled over the energy weights, CT against the baseline."""
    _check_pair(full, vanilla)
    rows = []
    for key, (label, higher) in MEASURE_LABELS.items():
        changes = [
            _change(a["pooled"][key], b["pooled"][key], higher)
            for a, b in zip(full["runs"], vanilla["runs"], strict=True)
        ]
        rows.append(
            Comparison(
                key, label, higher, full["summary"][key], vanilla["summary"][key], mean_se(changes)
            )
        )
    return rows


def compare_robustness(full: dict[str, Any], vanilla: dict[str, Any]) -> list[Comparison]:
    """Clean accuracy and accuracy under each attack and epsilon, CT against the baseline."""
    _check_pair(full, vanilla)
    a, b = full["robustness"]["per_model"], vanilla["robustness"]["per_model"]
    pairs = list(zip(a, b, strict=False))  # models pair by training seed; one model pairs once
    rows = [
        Comparison(
            "clean",
            "clean accuracy",
            True,
            full["robustness"]["summary"]["clean"],
            vanilla["robustness"]["summary"]["clean"],
            mean_se([_change(x["clean"], y["clean"], True) for x, y in pairs]),
        )
    ]
    for attack in ("fgsm", "pgd"):
        for eps in full["robustness"]["summary"][attack]:
            rows.append(
                Comparison(
                    f"{attack}_{eps}",
                    f"{attack.upper()} accuracy, eps {eps}",
                    True,
                    full["robustness"]["summary"][attack][eps],
                    vanilla["robustness"]["summary"][attack][eps],
                    mean_se([_change(x[attack][eps], y[attack][eps], True) for x, y in pairs]),
                )
            )
    return rows


def _value(stat: dict[str, Any], digits: int = 3) -> str:
    if stat["mean"] is None:
        return "n/a"
    text = f"{stat['mean']:.{digits}g}" if abs(stat["mean"]) >= 1 else f"{stat['mean']:.3f}"
    return text if stat["se"] is None else f"{text} ± {stat['se']:.2g}"


def _pct(stat: dict[str, Any]) -> str:
    if stat["mean"] is None:
        return "n/a"
    text = f"{stat['mean']:+.1f} %"
    return text if stat["se"] is None else f"{text} ± {stat['se']:.1f}"


def comparison_table(rows: list[Comparison]) -> str:
    """Markdown: CT, baseline and the change in the paper's convention (positive = CT better)."""
    lines = [
        "| measure | CT | baseline | change (positive: CT better) |",
        "|---|---:|---:|---:|",
    ]
    for row in rows:
        direction = "higher" if row.higher_is_better else "lower"
        lines.append(
            f"| {row.label} ({direction} is better) | {_value(row.ct)} | "
            f"{_value(row.baseline)} | {_pct(row.change)} |"
        )
    return "\n".join(lines)


def _verdict(row: Comparison) -> str:
    if row.ct_better is None:
        return f"**{row.label}:** not measured (no valid counterfactual entered it)."
    if abs(row.change["mean"]) < 0.05:
        return f"**{row.label}:** the same for both models ({_value(row.ct)})."
    better = "better" if row.ct_better else "worse"
    strength = (
        "clearly, by more than twice the standard error"
        if row.clear
        else "but within the run-to-run noise"
        if row.change["se"] is not None
        else "from a single run, so without an error estimate"
    )
    return (
        f"**{row.label}:** CT is {better} by {abs(row.change['mean']):.1f} % "
        f"({_value(row.ct)} against {_value(row.baseline)}), {strength}."
    )


def evaluation_text(quality: list[Comparison], robustness: list[Comparison]) -> str:
    """Paragraphs that say, from the numbers, what counterfactual training bought and cost."""
    by_key = {row.key: row for row in (*quality, *robustness)}
    paragraphs = []
    ip = by_key["ip"]
    if ip.ct_better and ip.clear:
        paragraphs.append(
            "**The claim held here:** the counterfactuals of the CT model lie closer to real "
            "digits of their target class (lower IP) than the baseline's, searched with the same "
            "generator from the same factuals."
        )
    elif ip.ct_better:
        paragraphs.append(
            "**The claim is not settled here:** the CT model's counterfactuals lie slightly "
            "closer to real digits of their target class (lower IP) than the baseline's, but by "
            "less than the runs can tell apart from chance."
        )
    elif ip.ct_better is False:
        paragraphs.append(
            "**The claim did not hold here:** the CT model's counterfactuals are not closer to "
            "real digits of their target class than the baseline's (IP)."
        )
    paragraphs += [_verdict(by_key[key]) for key in ("ip", "ip_star", "cost", "validity")]
    paragraphs.append(_verdict(by_key["clean"]))
    fgsm = by_key.get(f"fgsm_{ATTACK_EPS}")
    if fgsm is not None:
        paragraphs.append(_verdict(fgsm))
    return "\n\n".join(paragraphs)
