"""The paper's evaluation rounds and their significance test, as building blocks.

Each of the J rounds of the CT paper draws a factual class and a target class, then, for each
model, test points that the model predicts as the factual class (with replacement): the models
are compared on what each of them takes to be the factual class. The difference of a measure
between CT and the baseline is significant when the percentile bootstrap 99 % confidence interval
of the difference in means excludes zero (``../shared/reference/PAPER.md``; CT.jl,
``paper/experiments/CTExperiments/src/tables.jl``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class Round:
    """One evaluation round: the class pair, and per model the test rows it searches."""

    factual: int
    target: int
    rows: dict[str, Tensor]


def draw_round(
    predicted: Mapping[str, Tensor], levels: Sequence[int], n: int, rng: torch.Generator
) -> Round:
    """A factual class and a different target class, uniform over ``levels``, and for each
    model ``n`` test rows drawn with replacement among those it predicts as the factual class.
    A class pair that some model never predicts as the factual class is drawn again."""
    if len(levels) < 2:
        raise ValueError(f"a round needs at least two classes, got {list(levels)}")
    predicted = {name: p.cpu() for name, p in predicted.items()}
    for _ in range(100 * len(levels)):
        i, j = torch.randint(len(levels), (2,), generator=rng).tolist()
        if i == j:
            continue
        factual, target = int(levels[i]), int(levels[j])
        members = {name: (p == factual).nonzero().flatten() for name, p in predicted.items()}
        if all(m.numel() for m in members.values()):
            picks = {
                name: m[torch.randint(m.numel(), (n,), generator=rng)]
                for name, m in members.items()
            }
            return Round(factual, target, picks)
    raise ValueError(
        "no class pair found whose factual class every model predicts for some test point: "
        "check the models and the test data"
    )


def bootstrap_ci(
    a: Sequence[float] | Tensor,
    b: Sequence[float] | Tensor,
    level: float = 0.99,
    resamples: int = 10_000,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap confidence interval of mean(a) - mean(b), resampling each sample
    with replacement on its own (``resamples`` times, seeded)."""
    a, b = torch.as_tensor(a, dtype=torch.float64), torch.as_tensor(b, dtype=torch.float64)
    if a.numel() == 0 or b.numel() == 0:
        raise ValueError("bootstrap_ci needs at least one value on each side")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must lie in (0, 1), got {level!r}")
    rng = torch.Generator().manual_seed(seed)

    def means(x: Tensor) -> Tensor:
        return x[torch.randint(x.numel(), (resamples, x.numel()), generator=rng)].mean(1)

    diff = means(a) - means(b)
    tail = (1.0 - level) / 2
    low, high = torch.quantile(diff, torch.tensor([tail, 1.0 - tail], dtype=torch.float64))
    return float(low), float(high)
