"""Training objectives: which loss terms counterfactual training adds, and how much each weighs.

The names and default weights follow CounterfactualTraining.jl, so users of the Julia package find
the same ``[lambda_clf, lambda_div, lambda_reg, lambda_adv] = [1.0, 0.5, 0.1, 0.25]``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

DEFAULT_LAMBDAS = (1.0, 0.5, 0.1, 0.25)
WEIGHT_NAMES = ("lambda_clf", "lambda_div", "lambda_reg", "lambda_adv")


@dataclass(frozen=True)
class Objective:
    """Weights of the four loss terms; a zero weight keeps a term out of the loss.

    The named subclasses fix which terms they use: a weight for any other term is an error, so
    ``VanillaObjective(lambda_div=0.5)`` cannot silently become another objective. The base class
    takes any mix.
    """

    lambda_clf: float = DEFAULT_LAMBDAS[0]
    lambda_div: float = 0.0
    lambda_reg: float = 0.0
    lambda_adv: float = 0.0

    uses: ClassVar[tuple[str, ...]] = WEIGHT_NAMES

    def __post_init__(self) -> None:
        for name in WEIGHT_NAMES:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise TypeError(f"{name} must be a non-negative number, got {value!r}")
            if not value >= 0:
                raise ValueError(f"{name} must be a non-negative number, got {value!r}")
            if value and name not in self.uses:
                raise ValueError(
                    f"{self.name} has no {name} term (it uses {', '.join(self.uses)}); got "
                    f"{name}={value!r}. Use FullObjective or Objective(...) for another mix."
                )

    @property
    def name(self) -> str:
        return type(self).__name__

    @property
    def lambdas(self) -> tuple[float, float, float, float]:
        """``(lambda_clf, lambda_div, lambda_reg, lambda_adv)``, the Julia package's order."""
        return tuple(float(getattr(self, name)) for name in WEIGHT_NAMES)

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
    """Plain cross-entropy. ``needs_ce=True`` still searches counterfactuals every epoch, so the
    log holds their validity and (computed without gradient) the CT terms for comparison."""

    needs_ce: bool = False

    uses: ClassVar[tuple[str, ...]] = ("lambda_clf",)

    @property
    def needs_counterfactuals(self) -> bool:
        return self.needs_ce


@dataclass(frozen=True)
class EnergyDifferentialObjective(Objective):
    """Cross-entropy plus the energy differential and its ridge penalty."""

    lambda_div: float = DEFAULT_LAMBDAS[1]
    lambda_reg: float = DEFAULT_LAMBDAS[2]

    uses: ClassVar[tuple[str, ...]] = ("lambda_clf", "lambda_div", "lambda_reg")


@dataclass(frozen=True)
class AdversarialObjective(Objective):
    """Cross-entropy plus the adversarial loss on nascent counterfactuals."""

    lambda_adv: float = DEFAULT_LAMBDAS[3]

    uses: ClassVar[tuple[str, ...]] = ("lambda_clf", "lambda_adv")


@dataclass(frozen=True)
class FullObjective(Objective):
    """All four terms: the objective of the counterfactual training paper."""

    lambda_div: float = DEFAULT_LAMBDAS[1]
    lambda_reg: float = DEFAULT_LAMBDAS[2]
    lambda_adv: float = DEFAULT_LAMBDAS[3]
