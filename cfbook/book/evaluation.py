"""The book's per-model evaluation of a training stage's runs: accuracy under attack and a
gallery of counterfactuals, written to ``data/<profile>/<mode>-evaluation.json``.

The counterfactuals' quality (validity, cost, IP, IP*) is not measured here but by the paper's
protocol (``cfbook.evaluation.protocol.paper_evaluate``), which the paired evaluation runs on
both stages' models. The gallery's search is that protocol's test-time search at one energy
weight, and its validity the protocol's (target probability >= 0.5).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import Tensor, nn

from cfbook.evaluation.attacks import ATTACKS, attack_accuracy
from cfbook.evaluation.metrics import is_valid
from cfbook.evaluation.protocol import PaperProtocol
from cfbook.evaluation.statistics import mean_se
from cfbook.search.constraints import Domain
from cfbook.search.targets import draw_targets

__all__ = [
    "EVALUATION_FORMAT",
    "EvaluationConfig",
    "decode_images",
    "decode_levels",
    "encode_images",
    "evaluate",
    "gallery",
]

EVALUATION_FORMAT = "cfbook-evaluation"
#: How the gallery counts a counterfactual as valid (the paper's rule, ``is_valid``).
VALIDITY_RULE = "target probability >= 0.5"
EVALUATION_VERSION = 2  # 2: no quality runs (the paper's protocol measures them); numeric epsilons


@dataclass(frozen=True)
class EvaluationConfig:
    """Robustness (the attacks' epsilons, PGD's steps, how many held-out samples are attacked;
    None: all) and the gallery (its energy weight and seed)."""

    epsilons: tuple[float, ...] = (0.01, 0.03, 0.05, 0.1)
    pgd_steps: int = 10
    attack_samples: int | None = None
    gallery_lambda_energy: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.pgd_steps, bool) or not isinstance(self.pgd_steps, int):
            raise ValueError(f"pgd_steps must be a positive integer, got {self.pgd_steps!r}")
        if self.pgd_steps < 1:
            raise ValueError(f"pgd_steps must be a positive integer, got {self.pgd_steps!r}")
        if any(not e >= 0 for e in self.epsilons):
            raise ValueError(f"epsilons must be non-negative, got {self.epsilons}")


def encode_images(x: Tensor, low: float, high: float) -> list[str]:
    """Images (flat rows or ``(n, 1, 28, 28)``) as hex strings of 8-bit levels between the
    domain bounds: a gallery file of a few kilobytes per digit that is still plain JSON."""
    levels = ((x - low) / (high - low) * 255).round().clamp(0, 255).to(torch.uint8).cpu()
    return [bytes(row.tolist()).hex() for row in levels.flatten(1)]


def decode_levels(images: list[str]) -> Tensor:
    """Gallery images as (n, D) integer levels 0-255."""
    return torch.tensor([list(bytes.fromhex(image)) for image in images], dtype=torch.int16)


def decode_images(images: list[str], domain: Sequence[float]) -> Tensor:
    """Gallery images back to (n, D) floats in the domain."""
    low, high = domain
    return decode_levels(images).float() / 255 * (high - low) + low


def gallery(
    model: nn.Module,
    x: Tensor,
    y: Tensor,
    *,
    config: EvaluationConfig,
    protocol: PaperProtocol,
    domain: tuple[float, float],
) -> dict[str, Any]:
    """One held-out digit per class (the first of a seeded order) with a seeded target, its
    counterfactual under the protocol's test-time search, and whether it is valid. The digits
    and targets depend only on the data and the seed, so every model gets the same ones."""
    order = torch.randperm(y.shape[0], generator=torch.Generator().manual_seed(config.seed))
    labels = y.cpu()[order]
    picks = [int(order[(labels == c).nonzero()[0, 0]]) for c in torch.unique(labels).tolist()]
    idx = torch.tensor(picks, device=y.device)
    rng = torch.Generator().manual_seed(config.seed + 1)
    target = draw_targets(y[idx].cpu(), torch.unique(y.cpu()), rng).to(y.device)
    search = protocol.generator(config.gallery_lambda_energy)
    found = search.generate(model, x[idx], target, domain=domain)
    low, high = domain
    return {
        "lambda_energy": config.gallery_lambda_energy,
        "search": search.settings(),
        "validity": VALIDITY_RULE,
        "index": picks,
        "label": y[idx].tolist(),
        "target": target.tolist(),
        "valid": is_valid(model, found.counterfactual, target).tolist(),
        "domain": [low, high],
        "factual": encode_images(x[idx], low, high),
        "counterfactual": encode_images(found.counterfactual, low, high),
    }


def _robustness_summary(per_model: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean and standard error over the models of each accuracy."""
    first = per_model[0]
    return {
        "clean": mean_se([m["clean"] for m in per_model]),
        "epsilons": first["epsilons"],
        **{
            attack: [mean_se([m[attack][i] for m in per_model]) for i in range(len(first[attack]))]
            for attack in ATTACKS
        },
    }


def evaluate(
    models: Sequence[nn.Module],
    x_eval: Tensor,
    y_eval: Tensor,
    *,
    config: EvaluationConfig,
    protocol: PaperProtocol,
    domain: Domain,
) -> dict[str, Any]:
    """Each model's accuracy under attack on the first ``config.attack_samples`` held-out
    samples, and the gallery of the first model; a JSON-serialisable record."""
    if not models:
        raise ValueError("evaluate needs at least one model")
    n_attack = config.attack_samples or x_eval.shape[0]
    robustness = [
        attack_accuracy(
            m,
            x_eval[:n_attack],
            y_eval[:n_attack],
            epsilons=config.epsilons,
            pgd_steps=config.pgd_steps,
            domain=domain,
        )
        for m in models
    ]
    return {
        "format": EVALUATION_FORMAT,
        "version": EVALUATION_VERSION,
        "config": json_config(config),
        "n_models": len(models),
        "robustness": {"per_model": robustness, "summary": _robustness_summary(robustness)},
        "gallery": gallery(
            models[0], x_eval, y_eval, config=config, protocol=protocol, domain=domain
        ),
    }


def json_config(config: EvaluationConfig) -> dict[str, Any]:
    """The settings as plain JSON values."""
    return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(config).items()}
