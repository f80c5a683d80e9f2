"""The CT paper's test-time protocol, batched: rounds of class pairs, five test-time energy
weights, measures on valid counterfactuals against the test set, CT - baseline per round. It is
cfbook's one evaluation of counterfactuals: the grid's and the book's comparisons run it.

CT.jl runs one ``benchmark`` per test-time energy weight (``evaluation_1..5/eval_config.toml``),
each of ``n_runs`` = 100 rounds of ``n_individuals`` factuals per model. Here every round of one
energy weight is searched in a single batch per model, so a whole evaluation is
``2 x len(energy_weights)`` searches rather than thousands of small ones (a search's rows are
independent, so batching them changes no result).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import Tensor, nn

from cfbook.evaluation.metrics import cost, implausibility, ip_star, is_valid, predict
from cfbook.evaluation.rounds import Round, draw_round
from cfbook.evaluation.statistics import mean_of
from cfbook.search.constraints import Domain, Mutability
from cfbook.search.generators import NativeGenerator
from cfbook.search.targets import label_levels

# IP*: CT.jl's code uses a Gaussian kernel of length scale 5.0, the paper's text says 0.5.
LENGTH_SCALES = (5.0, 0.5)


@dataclass(frozen=True)
class PaperProtocol:
    """Test-time settings of the paper (``eval_config.toml``): ``rounds`` rounds per energy
    weight of ``individuals`` factuals per model (250 synthetic, 100 tabular, 25 MNIST); an ECCo
    search with lambda_cost 0 and step 0.25 that stops at target probability ``tau`` (0.95; 0.5
    in the mutability experiment) or after ``maxiter`` steps. A counterfactual is valid when its
    target probability reaches 0.5 (CE.jl's ``validity``). IP averages the L1 distance to up to
    ``ip_draws`` target-class test points; IP* is the unbiased MMD^2 against ``mmd_samples`` of
    them, at each of ``length_scales``."""

    rounds: int = 100
    individuals: int = 100
    energy_weights: tuple[float, ...] = (0.1, 0.5, 1.0, 5.0, 10.0)
    tau: float = 0.95
    maxiter: int = 50
    step_size: float = 0.25
    ip_draws: int = 1000
    mmd_samples: int = 100
    length_scales: tuple[float, ...] = LENGTH_SCALES
    seed: int = 2025

    def __post_init__(self) -> None:
        for name in ("rounds", "individuals", "maxiter", "ip_draws", "mmd_samples"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if not self.energy_weights or not self.length_scales:
            raise ValueError("energy_weights and length_scales must not be empty")

    def generator(self, lambda_energy: float) -> NativeGenerator:
        """The test-time search at one energy weight."""
        return NativeGenerator(
            maxiter=self.maxiter,
            tau=self.tau,
            lambda_cost=0.0,
            lambda_energy=lambda_energy,
            step_size=self.step_size,
        )


def _round_measures(
    x0: Tensor,
    cf: Tensor,
    valid: Tensor,
    members: Tensor,
    protocol: PaperProtocol,
    rng: torch.Generator,
) -> dict[str, float | None]:
    """One round of one model at one energy weight: validity over all its factuals, the other
    measures over its valid counterfactuals (None when it has none, or fewer than two for IP*)."""
    out: dict[str, float | None] = {"validity": float(valid.float().mean())}
    cf, x0 = cf[valid], x0[valid]
    n_valid = cf.shape[0]
    out["cost"] = float(cost(x0, cf).mean()) if n_valid else None
    pick = torch.randperm(members.shape[0], generator=rng)
    near = members[pick[: protocol.ip_draws].to(members.device)]
    out["ip"] = implausibility(cf, near) if n_valid else None
    sample = members[pick[: protocol.mmd_samples].to(members.device)]
    for scale in protocol.length_scales:
        ok = n_valid >= 2 and sample.shape[0] >= 2
        out[ip_star_key(scale)] = ip_star(cf, sample, scale) if ok else None
    return out


def ip_star_key(length_scale: float) -> str:
    """The name of IP* at one kernel length scale in the protocol's results."""
    return f"ip_star_{length_scale:g}"


def paper_evaluate(
    models: Mapping[str, nn.Module],
    x_test: Tensor,
    y_test: Tensor,
    protocol: PaperProtocol,
    *,
    domain: Domain = None,
    mutability: Mutability = None,
) -> dict[str, Any]:
    """Counterfactual measures of each model under the paper's protocol, per round.

    For each energy weight, ``protocol.rounds`` rounds are drawn (a factual and a target class,
    then for each model test points it predicts as the factual class, with replacement); each
    model's rounds are searched in one batch. A round's figure for a model is the mean over
    energy weights of its per-weight means (CT.jl averages out ``lambda_energy_eval`` before it
    compares objectives). Returns ``{"per_round": {model: {measure: [value or None per round]}},
    "by_weight": {model: [{"energy_weight": w, measure: mean over rounds, ...} per weight]},
    "protocol": ...}``.
    """
    if len(models) < 1:
        raise ValueError("paper_evaluate needs at least one model")
    rng = torch.Generator().manual_seed(protocol.seed)
    levels = label_levels(y_test).tolist()
    predicted = {name: predict(model, x_test) for name, model in models.items()}
    members = {c: x_test[y_test == c] for c in levels}
    keys = ("validity", "cost", "ip", *map(ip_star_key, protocol.length_scales))
    per_weight: dict[str, dict[float, dict[str, list[float | None]]]] = {m: {} for m in models}
    for weight in protocol.energy_weights:
        rounds: list[Round] = [
            draw_round(predicted, levels, protocol.individuals, rng) for _ in range(protocol.rounds)
        ]
        target = torch.tensor(
            [r.target for r in rounds for _ in range(protocol.individuals)], device=x_test.device
        )
        for name, model in models.items():
            rows = torch.cat([r.rows[name] for r in rounds]).to(x_test.device)
            x0 = x_test[rows]
            found = protocol.generator(weight).generate(
                model, x0, target, domain=domain, mutability=mutability
            )
            valid = is_valid(model, found.counterfactual, target)
            figures: dict[str, list[float | None]] = {k: [] for k in keys}
            n = protocol.individuals
            for i, r in enumerate(rounds):
                part = slice(i * n, (i + 1) * n)
                got = _round_measures(
                    x0[part],
                    found.counterfactual[part],
                    valid[part],
                    members[r.target],
                    protocol,
                    rng,
                )
                for k in keys:
                    figures[k].append(got[k])
            per_weight[name][weight] = figures
    per_round = {
        name: {
            k: [
                mean_of([per_weight[name][w][k][i] for w in protocol.energy_weights])
                for i in range(protocol.rounds)
            ]
            for k in keys
        }
        for name in models
    }
    by_weight = {
        name: [
            {"energy_weight": w, **{k: mean_of(per_weight[name][w][k]) for k in keys}}
            for w in per_weight[name]
        ]
        for name in models
    }
    return {"protocol": asdict(protocol), "per_round": per_round, "by_weight": by_weight}
