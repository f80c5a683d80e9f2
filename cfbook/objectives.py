"""Training objectives: which loss terms counterfactual training adds, and how much each weighs.

The names and default weights follow CounterfactualTraining.jl, so users of the Julia package find
the same ``[lambda_clf, lambda_div, lambda_reg, lambda_adv] = [1.0, 0.5, 0.1, 0.25]``.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_LAMBDAS = (1.0, 0.5, 0.1, 0.25)


@dataclass(frozen=True)
class Objective:
    """Weights of the four loss terms; a zero weight means the term is not computed at all."""

    lambda_clf: float = DEFAULT_LAMBDAS[0]
    lambda_div: float = 0.0
    lambda_reg: float = 0.0
    lambda_adv: float = 0.0

    def __post_init__(self) -> None:
        for name in ("lambda_clf", "lambda_div", "lambda_reg", "lambda_adv"):
            value = getattr(self, name)
            if not value >= 0:
                raise ValueError(f"{name} must be a non-negative number, got {value!r}")

    @property
    def name(self) -> str:
        return type(self).__name__

    @property
    def uses_counterfactual_terms(self) -> bool:
        """Whether any loss term needs counterfactuals, neighbours or adversarial examples."""
        return self.lambda_div > 0 or self.lambda_reg > 0 or self.lambda_adv > 0

    @property
    def needs_counterfactuals(self) -> bool:
        """Whether training must run the counterfactual search each epoch after burn-in."""
        return self.uses_counterfactual_terms


@dataclass(frozen=True)
class VanillaObjective(Objective):
    """Plain cross-entropy. With ``needs_ce=True`` counterfactuals are still generated (and their
    validity logged) without entering the loss; ``needs_ce=False`` skips the search entirely."""

    needs_ce: bool = True

    @property
    def needs_counterfactuals(self) -> bool:
        return self.needs_ce


@dataclass(frozen=True)
class EnergyDifferentialObjective(Objective):
    """Cross-entropy plus the energy differential and its ridge penalty."""

    lambda_div: float = DEFAULT_LAMBDAS[1]
    lambda_reg: float = DEFAULT_LAMBDAS[2]


@dataclass(frozen=True)
class AdversarialObjective(Objective):
    """Cross-entropy plus the adversarial loss on nascent counterfactuals."""

    lambda_adv: float = DEFAULT_LAMBDAS[3]


@dataclass(frozen=True)
class FullObjective(Objective):
    """All four terms: the objective of the counterfactual training paper."""

    lambda_div: float = DEFAULT_LAMBDAS[1]
    lambda_reg: float = DEFAULT_LAMBDAS[2]
    lambda_adv: float = DEFAULT_LAMBDAS[3]
