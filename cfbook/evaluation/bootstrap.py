"""The paper's evaluation rounds and their significance test, as building blocks.

Each of the J rounds of the CT paper draws a factual class and a target class, then, for each
model, test points that the model predicts as the factual class (with replacement): the models
are compared on what each of them takes to be the factual class. The difference of a measure
between CT and the baseline is significant when the percentile bootstrap 99 % confidence interval
of the difference in means excludes zero (``../shared/reference/PAPER.md``; CT.jl,
``paper/experiments/CTExperiments/src/presentation.jl``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from math import nan

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


def compare_rounds(
    ct: Sequence[float | None], baseline: Sequence[float | None], level: float = 0.99
) -> dict[str, float | bool | int]:
    """CT against the baseline on one measure, from per-round means as CT.jl's tables compute
    it (``presentation.jl``: ``aggregate_ce_evaluation``, ``cidiff``).

    Each round is a bootstrap sample, so the percentile CI of the difference CT - baseline is
    the ``(1 - level) / 2`` and ``(1 + level) / 2`` quantiles of the per-round differences. The
    reduction is ``-(mean(ct / baseline) - 1) * 100`` (positive = CT lower, i.e. better, for a
    distance) and its SE is ``100 * std(ct / baseline)`` over rounds, the paper's "bootstrapped
    standard error". Rounds where either side has no value (no valid counterfactual) are left
    out, as CT.jl's ``skipmissing`` does. ``reduction_low`` / ``reduction_high`` are the same
    percentile interval for the per-round reduction ``(1 - ct / baseline) * 100``, the scale on
    which a published reduction can be checked against it."""
    if len(ct) != len(baseline):
        raise ValueError(f"one value per round on each side: got {len(ct)} and {len(baseline)}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must lie in (0, 1), got {level!r}")
    pairs = [(a, b) for a, b in zip(ct, baseline, strict=True) if a is not None and b is not None]
    if not pairs:
        raise ValueError("no round has a value on both sides")
    a, b = (torch.tensor(side, dtype=torch.float64) for side in zip(*pairs, strict=True))
    # A round whose baseline figure is 0 (an MMD² at a tiny length scale) has no ratio; the
    # reduction and its SE come from the other rounds (NaN if none is left).
    ratio = a[b != 0] / b[b != 0]
    tail = (1.0 - level) / 2
    q = torch.tensor([tail, 1.0 - tail], dtype=torch.float64)
    low, high = torch.quantile(a - b, q)
    r_low, r_high = torch.quantile((1.0 - ratio) * 100, q) if ratio.numel() else (nan, nan)
    se = float(ratio.std()) * 100 if ratio.numel() > 1 else nan
    return {
        "ct": float(a.mean()),
        "baseline": float(b.mean()),
        "reduction": -(float(ratio.mean()) - 1.0) * 100 if ratio.numel() else nan,
        "se": se,
        "ci_low": float(low),
        "ci_high": float(high),
        "significant": not float(low) <= 0.0 <= float(high),
        "reduction_low": float(r_low),
        "reduction_high": float(r_high),
        "rounds": len(pairs),
        "ratio_rounds": ratio.numel(),
    }
