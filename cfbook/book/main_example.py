"""The book's main example: the paper's MNIST MLP, where CT's counterfactuals are measurably
closer to real digits of their target class. The per-seed verdicts are read from the grid's
merged results (``data/reproduction/results.json``); the gallery is searched live in the two
seed-0 models whose weights ship in ``data/main_example/``, with the same test-time search as
the paper's protocol."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from cfbook.book.benchmarks import benchmark_record, benchmark_table, run_label
from cfbook.book.evaluation import EvaluationConfig, gallery
from cfbook.evaluation.protocol import PaperProtocol
from cfbook.paper.grid import _trained
from cfbook.paper.settings import TEST_TAU, ExperimentData

__all__ = [
    "VALIDITY_GAP",
    "Measure",
    "calibration_table",
    "SeedVerdict",
    "main_example_galleries",
    "load_main_models",
    "seed_verdicts",
    "verdict_table",
    "verdict_text",
    "weights_text",
]

#: How far CT's test-time validity may fall below the baseline's for the example to count as
#: CT working: a lower IP over far fewer valid searches would compare easier factuals.
VALIDITY_GAP = 0.05
MODELS = {"vanilla": "baseline", "full": "CT"}


@dataclass(frozen=True)
class Measure:
    """One measure of one seed: both models' means over the rounds, the reduction (relative %,
    positive: CT lower) and the 99 % interval of the per-round differences CT − baseline."""

    ct: float
    baseline: float
    reduction: float
    ci_low: float
    ci_high: float

    @property
    def significant(self) -> bool:
        """The interval excludes zero, in either direction."""
        return self.ci_low > 0 or self.ci_high < 0

    @property
    def significantly_lower(self) -> bool:
        """The interval lies below zero: CT's value is significantly lower."""
        return self.ci_high < 0


@dataclass(frozen=True)
class SeedVerdict:
    """One seed's CT model against its baseline under the paper's protocol."""

    seed: int
    rounds: int
    validity_ct: float
    validity_baseline: float
    ip: Measure
    ip_star: Measure


def _measure(entry: dict[str, Any]) -> Measure:
    return Measure(
        entry["ct"], entry["baseline"], entry["reduction"], entry["ci_low"], entry["ci_high"]
    )


def seed_verdicts(results: dict[str, Any], key: str = "mnist") -> list[SeedVerdict]:
    """The per-seed verdicts of data set ``key`` in the grid's merged results, unconstrained
    (no protected features); IP* at length scale 5, the one the paper's MNIST row reports."""
    data = results["data"][key]
    validity = data["validity"]["unconstrained"]
    return [
        SeedVerdict(
            seed=seed,
            rounds=rounds,
            validity_ct=validity["full"][i]["mean"],
            validity_baseline=validity["vanilla"][i]["mean"],
            ip=_measure(data["main"]["ip"]["per_seed"][i]),
            ip_star=_measure(data["main"]["ip_star_5"]["per_seed"][i]),
        )
        for i, (seed, rounds) in enumerate(zip(data["seeds"], data["rounds"], strict=True))
    ]


def _star(measure: Measure) -> str:
    return " ✱" if measure.significant else ""


def verdict_table(verdicts: list[SeedVerdict]) -> str:
    """A Markdown table, one row per seed."""
    lines = [
        "| seed | rounds | validity, CT / baseline | IP, CT / baseline | IP reduction | "
        "IP\\*, CT / baseline | IP\\* reduction |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for v in verdicts:
        ip, star = v.ip, v.ip_star
        lines.append(
            f"| {v.seed} | {v.rounds} | {v.validity_ct:.3f} / {v.validity_baseline:.3f} | "
            f"{ip.ct:.1f} / {ip.baseline:.1f} | {ip.reduction:+.1f} %{_star(ip)} | "
            f"{star.ct:.4f} / {star.baseline:.4f} | {star.reduction:+.1f} %{_star(star)} |"
        )
    return "\n".join(lines)


def _count(flags: list[bool]) -> str:
    n, k = len(flags), sum(flags)
    return "every seed" if k == n else f"{k} of {n} seed{'s' if n != 1 else ''}"


def verdict_text(verdicts: list[SeedVerdict]) -> str:
    """What the table says, from the same verdicts: validity within ``VALIDITY_GAP``, then IP
    and IP* lower and significantly lower in how many seeds."""
    close = [v.validity_baseline - v.validity_ct <= VALIDITY_GAP for v in verdicts]
    parts = [
        f"CT's validity was at most {VALIDITY_GAP:.2f} below the baseline's in {_count(close)}."
    ]
    for name, get in (("IP", lambda v: v.ip), ("IP\\*", lambda v: v.ip_star)):
        lower = [get(v).ct < get(v).baseline for v in verdicts]
        significant = [get(v).significantly_lower for v in verdicts]
        parts.append(
            f"{name} is lower with CT in {_count(lower)}, and significantly so (the 99 % "
            f"interval of CT − baseline lies below zero) in {_count(significant)}."
        )
    return " ".join(parts)


def load_main_models(
    folder: Path, data: ExperimentData, device: torch.device
) -> dict[str, nn.Module]:
    """The shipped seed-0 baseline and CT model (``vanilla``, ``full``) of ``folder``, loaded as
    the grid loads its cells, in eval mode; the error for a missing file names the command that
    trains them again."""
    return _trained("mnist", 0, tuple(MODELS), folder, data, device)


def main_example_galleries(
    models: dict[str, nn.Module], data: ExperimentData
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Each model's gallery (CT's, then the baseline's, as ``gallery_figure`` takes them): the
    same ten held-out digits and targets, searched with the paper's test-time search at energy
    weight 1 (steps of 0.1, up to 50, no distance penalty, stop at target probability 0.95)."""
    protocol = PaperProtocol(tau=TEST_TAU["none"])
    config = EvaluationConfig()
    found = {
        training: {
            "gallery": gallery(
                model,
                data.x_test,
                data.y_test,
                config=config,
                protocol=protocol,
                domain=data.domain,
            )
        }
        for training, model in models.items()
    }
    return found["full"], found["vanilla"]


def calibration_table(model: str = "resnet18", *, results: str | Path | None = None) -> str:
    """The calibration benchmark's rows for ``model`` (validity by threshold, ridge weight and
    semantics) as a Markdown table, with the machine and date it was measured on; a sentence
    saying so when it was never recorded."""
    record = benchmark_record("calibration", "cpu", results=results)
    if record is None:
        return "The calibration benchmark has not been recorded on this checkout."
    keep = ["τ", "λ_reg", "mature", "valid %", "s / epoch"]
    lines = ["| " + " | ".join(keep) + " |", "|" + "---:|" * len(keep)]
    for row in benchmark_table("calibration", "cpu", text=True, results=results) or []:
        if row["model"] == model:
            lines.append("| " + " | ".join(row[c] for c in keep) + " |")
    return "\n".join(lines) + f"\n\n_Measured on {run_label(record['provenance'])}._"


def weights_text(folder: Path) -> str:
    """Where the shipped weights come from (``provenance.json``): the machine, and each model's
    test accuracy beside the grid's cell of the same settings."""
    p = json.loads((folder / "provenance.json").read_text(encoding="utf-8"))
    accuracy = "; ".join(
        f"{MODELS[t]} {p['test_accuracy'][t]:.4f} (the grid's {p['grid_test_accuracy'][t]:.4f})"
        for t in MODELS
    )
    return (
        f"These two models were trained on {p['machine']} with the grid's settings for seed 0; "
        f"test accuracy: {accuracy}. Floating-point order on another processor changes the "
        "last digits, not the verdicts."
    )
