"""The CT paper's test-time protocol, batched on the device.

Counterfactual quality: held-out factuals with seeded targets, searched with the ECCo-style
generator (no cost term, several energy weights, tau 0.95, 50 steps); validity, and over the valid
counterfactuals only, cost, IP and IP*. Robustness: clean accuracy and accuracy under FGSM and PGD.
Results are plain JSON-serialisable records with mean and standard error over runs.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import Tensor, nn

from cfbook.device import synchronize
from cfbook.evaluation.metrics import accuracy, cost, implausibility, mmd2, predict
from cfbook.search.constraints import Constraints, Domain, make_constraints
from cfbook.search.generators import NativeGenerator, eval_mode
from cfbook.search.targets import draw_targets

EVALUATION_FORMAT = "cfbook-evaluation"
EVALUATION_VERSION = 1
MEASURES = ("validity", "cost", "ip", "ip_star")


@dataclass(frozen=True)
class EvaluationConfig:
    """The protocol's settings; the defaults are the paper's (100 factuals, 5 runs)."""

    n_factuals: int = 100
    runs: int = 5
    lambda_energy: tuple[float, ...] = (0.1, 0.5, 1.0, 5.0, 10.0)
    maxiter: int = 50
    tau: float = 0.95
    step_size: float = 0.1
    ip_draws: int = 1000
    length_scale: float = 5.0  # of the Gaussian kernel of IP* (the experiments' setting)
    epsilons: tuple[float, ...] = (0.01, 0.03, 0.05, 0.1)
    pgd_steps: int = 10
    attack_samples: int | None = None  # held-out samples attacked; None: all of them
    gallery_lambda_energy: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("n_factuals", "runs", "maxiter", "ip_draws", "pgd_steps"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if not self.lambda_energy or any(not v > 0 for v in self.lambda_energy):
            raise ValueError(f"lambda_energy must list positive weights, got {self.lambda_energy}")
        if any(not e >= 0 for e in self.epsilons):
            raise ValueError(f"epsilons must be non-negative, got {self.epsilons}")

    def generator(self, lambda_energy: float, cf_batchsize: int | None) -> NativeGenerator:
        """The ECCo-style test-time search: energy penalty only, no cost term."""
        return NativeGenerator(
            maxiter=self.maxiter,
            tau=self.tau,
            lambda_cost=0.0,
            lambda_energy=lambda_energy,
            step_size=self.step_size,
            cf_batchsize=cf_batchsize,
        )


def draw_factuals(y: Tensor, n: int, seed: int) -> tuple[Tensor, Tensor]:
    """``n`` held-out rows and their targets, from the seed alone and never from a model, so two
    models are judged on the same factuals and targets. A target is uniform over the labels
    present, minus the factual's true label."""
    if n > y.shape[0]:
        raise ValueError(f"n_factuals={n} exceeds the {y.shape[0]} held-out samples")
    rng = torch.Generator().manual_seed(seed)
    labels = y.cpu()
    idx = torch.randperm(labels.shape[0], generator=rng)[:n]
    target = draw_targets(labels[idx], torch.unique(labels), rng)
    return idx.to(y.device), target.to(y.device)


def mean_se(values: Sequence[float | None]) -> dict[str, float | int | None]:
    """Mean and standard error (sample sd / sqrt(n)) of the defined values."""
    kept = [float(v) for v in values if v is not None]
    n = len(kept)
    if not n:
        return {"mean": None, "se": None, "n": 0}
    mean = sum(kept) / n
    se = math.sqrt(sum((v - mean) ** 2 for v in kept) / (n - 1) / n) if n > 1 else None
    return {"mean": mean, "se": se, "n": n}


def mean_of(values: Sequence[float | None]) -> float | None:
    """The mean of the defined values (None if there are none)."""
    return mean_se(values)["mean"]


def _ip_star(
    cf: Tensor,
    target: Tensor,
    ref_x: Tensor,
    ref_y: Tensor,
    config: EvaluationConfig,
    rng: torch.Generator,
) -> tuple[float | None, int]:
    """Unbiased MMD^2 between the counterfactuals of each target class and up to ``ip_draws``
    samples of that class, averaged over classes weighted by their counterfactuals."""
    total, count = 0.0, 0
    for cls in target.unique().tolist():
        rows = cf[target == cls]
        members = ref_x[ref_y == cls]
        if rows.shape[0] < 2 or members.shape[0] < 2:
            continue
        pick = torch.randperm(members.shape[0], generator=rng)[: config.ip_draws]
        total += rows.shape[0] * mmd2(rows, members[pick.to(members.device)], config.length_scale)
        count += rows.shape[0]
    return (total / count if count else None), count


def _quality(
    model: nn.Module,
    x: Tensor,
    target: Tensor,
    ref_x: Tensor,
    ref_y: Tensor,
    generator: NativeGenerator,
    domain: Domain,
    config: EvaluationConfig,
    rng: torch.Generator,
) -> tuple[dict[str, Any], float]:
    """One search and its measures, and the search's seconds; only valid counterfactuals
    (argmax = target, as in the paper) enter cost, IP and IP*."""
    start = time.perf_counter()
    found = generator.generate(model, x, target, domain=domain)
    synchronize(x.device)
    seconds = time.perf_counter() - start
    valid = predict(model, found.counterfactual) == target
    n_valid = int(valid.sum())
    record: dict[str, Any] = {
        "n": x.shape[0],
        "n_valid": n_valid,
        "validity": n_valid / x.shape[0],
        "cost": None,
        "ip": None,
        "ip_star": None,
        "n_ip_star": 0,
    }
    if n_valid:
        cf, tv = found.counterfactual[valid], target[valid]
        record["cost"] = float(cost(x[valid], cf).mean())
        ip = implausibility(cf, tv, ref_x, ref_y, n_draws=config.ip_draws, generator=rng)
        record["ip"] = float(ip.mean())
        record["ip_star"], record["n_ip_star"] = _ip_star(cf, tv, ref_x, ref_y, config, rng)
    return record, seconds


def _pooled(records: Sequence[dict[str, Any]]) -> dict[str, float | None]:
    """One run's figures over all its energy weights: validity over every search, the other
    measures over every valid counterfactual (IP* over those that entered it)."""
    n = sum(r["n"] for r in records)
    out: dict[str, float | None] = {"validity": sum(r["n_valid"] for r in records) / n}
    for key, weight in (("cost", "n_valid"), ("ip", "n_valid"), ("ip_star", "n_ip_star")):
        w = sum(r[weight] for r in records if r[key] is not None)
        out[key] = sum(r[key] * r[weight] for r in records if r[key] is not None) / w if w else None
    return out


# The paper's PGD (CT.jl's ``pgd``): 40 sign steps of 0.01 from a uniform random start in the
# eps ball, each projected on the ball; its eps grid is range(0, 0.1, length=10).
PAPER_PGD = {"pgd_steps": 40, "step_size": 0.01, "random_start": True}
PAPER_EPSILONS = tuple(k / 90 for k in range(10))


def _perturb(
    model: nn.Module,
    x: Tensor,
    y: Tensor,
    c: Constraints,
    eps: float,
    steps: int,
    step_size: float | None = None,
    start: Tensor | None = None,
) -> Tensor:
    """FGSM (``steps`` = 1, one full-size step) or PGD: sign steps of ``step_size`` (default
    2.5 eps / steps), each projected on the eps ball and the domain, from ``x`` itself or, with
    ``start`` (uniform draws in [0, 1), one per number), from a random point of the ball."""
    alpha = eps if steps == 1 else 2.5 * eps / steps if step_size is None else step_size
    adv = x if start is None else c.clamp(x + (2 * start - 1) * eps)
    for _ in range(steps):
        adv = adv.detach().requires_grad_(True)
        (grad,) = torch.autograd.grad(nn.functional.cross_entropy(model(adv), y), adv)
        adv = torch.minimum(torch.maximum(adv.detach() + alpha * grad.sign(), x - eps), x + eps)
        adv = c.clamp(adv)
    return adv.detach()


def attack_accuracy(
    model: nn.Module,
    x: Tensor,
    y: Tensor,
    *,
    epsilons: Sequence[float],
    pgd_steps: int,
    domain: Domain,
    batch_size: int = 512,
    step_size: float | None = None,
    random_start: bool = False,
    seed: int = 0,
) -> dict[str, Any]:
    """Accuracy on clean inputs and under L-inf FGSM and PGD at each epsilon, in eval mode.
    PGD takes ``pgd_steps`` sign steps of ``step_size`` (default 2.5 eps / steps), from the
    inputs or, with ``random_start``, from seeded uniform points of the eps ball;
    ``**PAPER_PGD`` gives the paper's attack."""
    c = make_constraints(domain, None, x.shape[1], device=x.device, dtype=x.dtype)
    out: dict[str, Any] = {"clean": accuracy(model, x, y), "fgsm": {}, "pgd": {}}
    rng = torch.Generator(device=x.device).manual_seed(seed)
    with eval_mode(model):
        for eps in epsilons:
            for name, steps in (("fgsm", 1), ("pgd", pgd_steps)):
                correct = torch.zeros((), device=x.device)
                for s in range(0, x.shape[0], batch_size):
                    xb, yb = x[s : s + batch_size], y[s : s + batch_size]
                    pgd = name == "pgd"
                    start = (
                        torch.rand(xb.shape, generator=rng, device=x.device, dtype=x.dtype)
                        if pgd and random_start
                        else None
                    )
                    adv = _perturb(model, xb, yb, c, eps, steps, step_size if pgd else None, start)
                    with torch.no_grad():
                        correct += (model(adv).argmax(1) == yb).sum()
                out[name][f"{eps:g}"] = float(correct) / x.shape[0]
    return out


def encode_images(x: Tensor, low: float, high: float) -> list[str]:
    """Images as hex strings of 8-bit levels between the domain bounds: a gallery file of a few
    kilobytes per digit that is still plain JSON."""
    levels = ((x - low) / (high - low) * 255).round().clamp(0, 255).to(torch.uint8).cpu()
    return [bytes(row.tolist()).hex() for row in levels]


def gallery(
    model: nn.Module,
    x: Tensor,
    y: Tensor,
    *,
    config: EvaluationConfig,
    domain: tuple[float, float],
    cf_batchsize: int | None = None,
) -> dict[str, Any]:
    """One held-out digit per class (the first of a seeded order) with a seeded target, its
    counterfactual under the test-time search, and whether it is valid. The digits and targets
    depend only on the data and the seed, so every model gets the same ones."""
    order = torch.randperm(y.shape[0], generator=torch.Generator().manual_seed(config.seed))
    labels = y.cpu()[order]
    picks = [int(order[(labels == c).nonzero()[0, 0]]) for c in torch.unique(labels).tolist()]
    idx = torch.tensor(picks, device=y.device)
    rng = torch.Generator().manual_seed(config.seed + 1)
    target = draw_targets(y[idx].cpu(), torch.unique(y.cpu()), rng).to(y.device)
    generator = config.generator(config.gallery_lambda_energy, cf_batchsize)
    found = generator.generate(model, x[idx], target, domain=domain)
    valid = predict(model, found.counterfactual) == target
    low, high = domain
    return {
        "lambda_energy": config.gallery_lambda_energy,
        "index": picks,
        "label": y[idx].tolist(),
        "target": target.tolist(),
        "valid": valid.tolist(),
        "domain": [low, high],
        "factual": encode_images(x[idx], low, high),
        "counterfactual": encode_images(found.counterfactual, low, high),
    }


def decode_levels(images: list[str]) -> Tensor:
    """Gallery images as (n, D) integer levels 0-255."""
    return torch.tensor([list(bytes.fromhex(image)) for image in images], dtype=torch.int16)


def decode_images(images: list[str], domain: Sequence[float]) -> Tensor:
    """Gallery images back to (n, D) floats in the domain."""
    low, high = domain
    return decode_levels(images).float() / 255 * (high - low) + low


def evaluate(
    models: Sequence[nn.Module],
    x_eval: Tensor,
    y_eval: Tensor,
    x_ref: Tensor,
    y_ref: Tensor,
    *,
    config: EvaluationConfig = EvaluationConfig(),
    domain: tuple[float, float] = (-1.0, 1.0),
    cf_batchsize: int | None = None,
    progress: Callable[[str], None] | None = print,
) -> dict[str, Any]:
    """Run the protocol; return a JSON-serialisable record.

    One model is searched in ``config.runs`` runs, each on its own seeded draw of factuals; with
    several models (one per training seed) run ``r`` searches model ``r``. ``x_ref``/``y_ref``
    (the training data) supply the target-class samples of IP and IP*. Robustness is measured on
    ``attack_samples`` held-out samples per model.
    """
    if not models:
        raise ValueError("evaluate needs at least one model")
    if x_eval.ndim != 2 or x_eval.shape[1] != x_ref.shape[1]:
        raise ValueError(
            f"held-out inputs {tuple(x_eval.shape)} and reference inputs {tuple(x_ref.shape)} "
            "must be flat (N, D) tensors of the same width"
        )
    runs = config.runs if len(models) == 1 else len(models)
    rng = torch.Generator().manual_seed(config.seed)
    run_records, searched, seconds = [], 0, 0.0
    for r in range(runs):
        model = models[r % len(models)]
        idx, target = draw_factuals(y_eval, config.n_factuals, config.seed + r)
        per_lambda = {}
        for lam in config.lambda_energy:
            per_lambda[f"{lam:g}"], spent = _quality(
                model,
                x_eval[idx],
                target,
                x_ref,
                y_ref,
                config.generator(lam, cf_batchsize),
                domain,
                config,
                rng,
            )
            seconds += spent
            searched += idx.shape[0]
        run_records.append(
            {"run": r, "per_lambda": per_lambda, "pooled": _pooled(list(per_lambda.values()))}
        )
        if progress is not None:
            pooled = run_records[-1]["pooled"]
            progress(f"evaluation run {r + 1}/{runs}: validity {pooled['validity']:.2f}")
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
        "config": {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(config).items()},
        "n_models": len(models),
        "runs": run_records,
        "summary": _summary(run_records, config),
        "robustness": {"per_model": robustness, "summary": _robustness_summary(robustness)},
        "gallery": gallery(
            models[0], x_eval, y_eval, config=config, domain=domain, cf_batchsize=cf_batchsize
        ),
        "throughput": {
            "counterfactuals": searched,
            "seconds": seconds,
            "per_second": searched / seconds if seconds else None,
        },
    }


def _summary(runs: list[dict[str, Any]], config: EvaluationConfig) -> dict[str, Any]:
    """Mean and standard error over runs: pooled over the energy weights, and per weight."""
    summary: dict[str, Any] = {
        key: mean_se([run["pooled"][key] for run in runs]) for key in MEASURES
    }
    summary["per_lambda"] = {
        f"{lam:g}": {
            key: mean_se([run["per_lambda"][f"{lam:g}"][key] for run in runs]) for key in MEASURES
        }
        for lam in config.lambda_energy
    }
    summary["n_valid"] = sum(r["n_valid"] for run in runs for r in run["per_lambda"].values())
    summary["n_searched"] = sum(r["n"] for run in runs for r in run["per_lambda"].values())
    return summary


def _robustness_summary(per_model: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "clean": mean_se([m["clean"] for m in per_model]),
        **{
            attack: {
                eps: mean_se([m[attack][eps] for m in per_model]) for eps in per_model[0][attack]
            }
            for attack in ("fgsm", "pgd")
        },
    }


__all__ = [
    "EVALUATION_FORMAT",
    "MEASURES",
    "EvaluationConfig",
    "attack_accuracy",
    "decode_images",
    "decode_levels",
    "draw_factuals",
    "encode_images",
    "evaluate",
    "gallery",
    "mean_se",
]
