"""Feature constraints of the counterfactual search: domain bounds and mutability.

Both are validated once and turned into device tensors, so the search loop applies them with a few
elementwise kernels and no Python per feature.

``domain`` is one ``(low, high)`` pair for every feature, one pair per feature, or an
``(n_features, 2)`` tensor. ``domain=None`` means the same everywhere in cfbook (``generate``,
``counterfactual_training``, ``paper_evaluate``, ``attack_accuracy``): no bounds, the search
may move a feature anywhere. ``infer_domain(x)`` gives the data's own range as CT.jl infers it.
``mutability`` is one of ``MUTABILITY_VALUES`` per feature; ``None``: every feature is free.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

MUTABILITY_VALUES = ("both", "none", "increase", "decrease")

Domain = Sequence[tuple[float, float]] | tuple[float, float] | Tensor | None
Mutability = Sequence[str] | None


@dataclass
class Constraints:
    """Per-feature bounds and step masks on the search device (masks are ``None`` when all free)."""

    lower: Tensor | None
    upper: Tensor | None
    immutable: Tensor | None = None
    increase_only: Tensor | None = None
    decrease_only: Tensor | None = None

    @property
    def has_mutability(self) -> bool:
        return self.immutable is not None

    def clamp(self, x: Tensor) -> Tensor:
        """Project onto the domain."""
        if self.lower is None:
            return x
        return torch.clamp(x, self.lower, self.upper)

    def mask_step(self, step: Tensor) -> Tensor:
        """Drop the parts of a step that move a feature the way it may not move."""
        if not self.has_mutability:
            return step
        no_up = self.immutable | self.decrease_only
        no_down = self.immutable | self.increase_only
        return torch.where((step > 0) & no_up | (step < 0) & no_down, 0.0, step)

    def step_bounds(self, dtype: torch.dtype) -> tuple[Tensor, Tensor] | None:
        """``mask_step`` as a per-feature clamp of the step: (0, inf) where a feature may only
        increase, (-inf, 0) where it may only decrease, (0, 0) where it is immutable."""
        if not self.has_mutability:
            return None
        inf = torch.full(self.immutable.shape, torch.inf, dtype=dtype, device=self.immutable.device)
        no_up = self.immutable | self.decrease_only
        no_down = self.immutable | self.increase_only
        return torch.where(no_down, 0.0, -inf), torch.where(no_up, 0.0, inf)

    def protect_neighbours(self, neighbours: Tensor, counterfactuals: Tensor) -> Tensor:
        """Make neighbours keep the counterfactual's fixed features (edits neighbours, not CFs)."""
        if not self.has_mutability:
            return neighbours
        out = torch.where(self.immutable, counterfactuals, neighbours)
        out = torch.where(self.increase_only, torch.maximum(counterfactuals, out), out)
        return torch.where(self.decrease_only, torch.minimum(counterfactuals, out), out)


def infer_domain(x: Tensor) -> Tensor:
    """Per-feature ``[min(mu - 2 sd, min), max(mu + 2 sd, max)]`` with the corrected (n - 1)
    standard deviation, like the Julia package (one sample: sd 0)."""
    mu = x.mean(0)
    sd = x.std(0, correction=1) if x.shape[0] > 1 else torch.zeros_like(mu)
    lower = torch.minimum(mu - 2 * sd, x.amin(0))
    upper = torch.maximum(mu + 2 * sd, x.amax(0))
    return torch.stack([lower, upper], dim=1)


def domain_bounds(domain: Domain, n_features: int) -> Tensor:
    """``domain`` (not None) as an (n_features, 2) float64 tensor of (low, high) rows, checked."""
    if isinstance(domain, Tensor):
        bounds = domain.detach().to("cpu", torch.float64)
    elif (
        isinstance(domain, tuple)
        and len(domain) == 2
        and all(isinstance(v, int | float) for v in domain)
    ):
        bounds = torch.tensor([domain], dtype=torch.float64).expand(n_features, 2)
    else:
        try:
            bounds = torch.tensor([tuple(pair) for pair in domain], dtype=torch.float64)
        except (TypeError, ValueError) as err:
            raise ValueError(
                "domain must be a (low, high) pair or one (low, high) pair per feature"
            ) from err
    if bounds.ndim != 2 or bounds.shape[1] != 2:
        raise ValueError(f"domain must have shape (n_features, 2), got {tuple(bounds.shape)}")
    if bounds.shape[0] != n_features:
        raise ValueError(
            f"domain has {bounds.shape[0]} entries but the data has {n_features} features"
        )
    if torch.isnan(bounds).any() or (bounds[:, 0] > bounds[:, 1]).any():
        bad = int(torch.nonzero(~(bounds[:, 0] <= bounds[:, 1]))[0])
        raise ValueError(f"domain entry {bad} is not a (low, high) pair with low <= high")
    return bounds


def _mutability_masks(mutability: Mutability, n_features: int) -> dict[str, Tensor]:
    if isinstance(mutability, str):
        raise ValueError("mutability must be a sequence with one value per feature, not a string")
    values = list(mutability)
    if len(values) != n_features:
        raise ValueError(
            f"mutability has {len(values)} entries but the data has {n_features} features"
        )
    unknown = sorted({str(v) for v in values} - set(MUTABILITY_VALUES))
    if unknown:
        raise ValueError(
            f"mutability values must be one of {', '.join(MUTABILITY_VALUES)}; got {unknown}"
        )
    return {
        "immutable": torch.tensor([v == "none" for v in values]),
        "increase_only": torch.tensor([v == "increase" for v in values]),
        "decrease_only": torch.tensor([v == "decrease" for v in values]),
    }


def make_constraints(
    domain: Domain,
    mutability: Mutability,
    n_features: int,
    *,
    device: torch.device | str,
    dtype: torch.dtype = torch.float32,
) -> Constraints:
    """Check ``domain`` and ``mutability`` against ``n_features``; place them on ``device``."""
    lower = upper = None
    if domain is not None:
        bounds = domain_bounds(domain, n_features).to(device=device, dtype=dtype)
        lower, upper = bounds[:, 0].contiguous(), bounds[:, 1].contiguous()
    masks: dict[str, Tensor] = {}
    if mutability is not None:
        masks = _mutability_masks(mutability, n_features)
        if not any(bool(m.any()) for m in masks.values()):
            masks = {}  # every feature is free: skip the masking kernels entirely
        masks = {k: m.to(device) for k, m in masks.items()}
    return Constraints(lower, upper, **masks)
