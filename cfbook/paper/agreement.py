"""When one of our trained models agrees with a number the paper publishes.

The paper trained one model per objective and data set and reports, per measure, the reduction
of CT against the baseline over 100 runs with an SE of ``100 * std(ratio)`` over those runs
(CT.jl ``presentation.jl``) and an asterisk when the 99 % interval of per-run differences
excludes zero. Each of our seeds is such a model, measured the same way, so each seed is compared
on its own, never pooled:

- a **reduction** agrees when ``|ours - paper| <= Z * sqrt(SE_ours^2 + SE_paper^2)`` and both
  are significant or neither is (where the paper publishes no SE or significance, as for the
  costs without constraints, the SE counts as 0 and significance is not compared);
- a **level** (validity, accuracy), published to two digits without an SE, agrees when
  ``|ours - paper| <= Z * SE_ours + ROUNDING``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

Z = 2.58  # the two-sided 99 % normal quantile, the paper's level of significance
ROUNDING = 0.005  # half a unit of the paper's last published digit on a level


def reduction_agrees(
    ours: dict[str, Any] | None,
    value: float,
    se: float | None = None,
    significant: bool | None = None,
) -> bool | None:
    """Whether one seed's ``compare_rounds`` result agrees with a published reduction (None when
    the seed had no valid counterfactual to compare)."""
    if ours is None or ours.get("reduction") is None or math.isnan(ours["reduction"]):
        return None
    ours_se = ours["se"] if ours.get("se") is not None and not math.isnan(ours["se"]) else 0.0
    width = Z * math.sqrt(ours_se**2 + (se or 0.0) ** 2)
    close = abs(ours["reduction"] - value) <= width
    return close and (significant is None or bool(ours["significant"]) == significant)


def level_agrees(mean: float | None, se: float | None, value: float) -> bool | None:
    """Whether one seed's level (a validity or an accuracy) agrees with a published one."""
    if mean is None:
        return None
    return abs(mean - value) <= Z * (se or 0.0) + ROUNDING


def binomial_se(share: float, n: int) -> float:
    """The standard error of a share measured on ``n`` independent points."""
    return math.sqrt(max(share * (1.0 - share), 0.0) / max(n, 1))


def count(verdicts: Sequence[bool | None]) -> tuple[int, int]:
    """(seeds that agree, seeds with something to compare)."""
    known = [v for v in verdicts if v is not None]
    return sum(known), len(known)


def pairs_agreeing(seeds: Sequence[dict[str, Any] | None]) -> tuple[int, int]:
    """(pairs of our seeds that agree with each other by the reduction rule, pairs where both
    have a value): how often two models trained the same way pass the rule, its ceiling."""
    known = [s for s in seeds if s is not None and not math.isnan(s.get("reduction", math.nan))]
    pairs = [(a, b) for i, a in enumerate(known) for b in known[i + 1 :]]
    agreed = sum(
        bool(reduction_agrees(a, b["reduction"], b["se"], b["significant"])) for a, b in pairs
    )
    return agreed, len(pairs)


def chance_of_majority(rate: float, seeds: int = 3, majority: int = 2) -> float:
    """The chance that at least ``majority`` of ``seeds`` independent seeds agree with a number
    when each does with probability ``rate``: what a number's verdict would be worth if the
    paper's model were one more seed."""
    return sum(
        math.comb(seeds, k) * rate**k * (1 - rate) ** (seeds - k)
        for k in range(majority, seeds + 1)
    )
