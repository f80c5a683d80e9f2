"""Statistics of evaluation results: mean and standard error, and CT against the baseline on
the per-round figures of the paper's protocol, as CT.jl's tables compute them
(``presentation.jl``: ``aggregate_ce_evaluation``, ``cidiff``). Each round is one sample of the
rounds' distribution, so a percentile interval needs no resampling: it is the rounds' own
quantiles."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from math import nan

import torch


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


def compare_rounds(
    ct: Sequence[float | None], baseline: Sequence[float | None], level: float = 0.99
) -> dict[str, float | bool | int]:
    """CT against the baseline on one measure, from per-round means as CT.jl's tables compute
    it (``presentation.jl``: ``aggregate_ce_evaluation``, ``cidiff``).

    Each round is one draw, so the percentile CI of the difference CT - baseline is
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


def compare_rounds_or_none(
    ct: Sequence[float | None], baseline: Sequence[float | None], level: float = 0.99
) -> dict[str, float | bool | int] | None:
    """``compare_rounds``, or None where no round has a value on both sides (one model found no
    valid counterfactual in any round); rounds of unequal count are still an error."""
    if not any(a is not None and b is not None for a, b in zip(ct, baseline, strict=True)):
        return None
    return compare_rounds(ct, baseline, level)


def fragile_significance(
    ct: Sequence[float | None], baseline: Sequence[float | None], level: float = 0.99
) -> bool:
    """Whether leaving out one round turns ``compare_rounds``' verdict of significance around.
    The interval's ends interpolate between the most extreme per-round differences, so with 100
    rounds one extreme round can decide whether the interval excludes zero."""
    pairs = [(a, b) for a, b in zip(ct, baseline, strict=True) if a is not None and b is not None]
    diff = torch.tensor([a - b for a, b in pairs], dtype=torch.float64)
    n = diff.numel()
    if n < 3:
        return False
    tail = (1.0 - level) / 2
    q = torch.tensor([tail, 1.0 - tail], dtype=torch.float64)
    low, high = torch.quantile(diff, q)
    significant = not float(low) <= 0.0 <= float(high)
    # Row i holds every difference but the i-th.
    others = torch.arange(n).repeat(n, 1)
    others = others[others != torch.arange(n)[:, None]].reshape(n, n - 1)
    lows, highs = torch.quantile(diff[others], q, dim=1)
    left_out = ~((lows <= 0.0) & (highs >= 0.0))
    return bool((left_out != significant).any())


def compare_models(
    per_round: Mapping[str, Mapping[str, Sequence[float | None]]],
    ct: str,
    baseline: str,
    level: float = 0.99,
) -> dict[str, dict[str, float | bool | int]]:
    """``compare_rounds`` for every measure but validity (which the paper reports as levels):
    reductions of CT against the baseline with their SE and percentile CI."""
    return {
        k: compare_rounds(per_round[ct][k], per_round[baseline][k], level)
        for k in per_round[ct]
        if k != "validity"
    }
