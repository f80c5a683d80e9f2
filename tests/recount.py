"""Recount, independently of cfbook, how many of the paper's 27 published reductions our seeds
reproduce: from the per-round values in ``reproduction/evaluations/<data>-s<seed>.json`` alone,
with the published numbers transcribed here from the paper's main table, and the rule written
out again from its statement (the reproduction chapter's "The rule that decides agreement"):

    one seed agrees when |ours - paper| <= 2.58 * sqrt(SE_ours^2 + SE_paper^2) and both are
    significant or neither is; a number agrees when at least 2 of its 3 seeds do.

CT.jl's statistics (``presentation.jl``): per run the ratio CT / baseline; the reduction is
``-(mean(ratio) - 1) * 100`` and its SE ``100 * std(ratio)`` (sample standard deviation); a
result is significant when the 0.5 % and 99.5 % quantiles of the per-run differences CT -
baseline (Julia's default, linear interpolation) lie on one side of zero. Runs where a side has
no value are skipped. Standard library only, so that nothing of cfbook or torch is shared.

    python tests/recount.py [data_dir]    # prints every number's verdicts and the count
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path

# The paper's main table: (reduction %, SE, significant) per data set for IP, IP* and the cost
# with protected features.
PUBLISHED = {
    "lin_sep": [(26.26, 0.67, True), (51.28, 2.01, True), (16.41, 0.57, True)],
    "circles": [(58.88, 0.37, True), (93.84, 6.7, True), (42.99, 0.85, True)],
    "moons": [(19.59, 0.73, True), (8.0, 9.44, False), (5.16, 1.0, True)],
    "over": [(-1.93, 1.12, False), (-27.7, 14.59, False), (40.86, 2.3, True)],
    "adult": [(0.19, 1.05, False), (34.35, 5.61, True), (4.03, 4.03, False)],
    "cali": [(10.65, 1.47, True), (63.06, 4.25, True), (44.23, 1.43, True)],
    "credit": [(10.14, 1.59, True), (50.35, 12.26, True), (-18.17, 4.4, True)],
    "gmsc": [(10.65, 2.28, True), (24.75, 4.84, True), (66.01, 1.41, True)],
    "mnist": [(6.36, 1.7, True), (-70.31, 217.6, False), (-35.11, 6.96, True)],
}
# (experiment, per-run key) of each published column: IP* at CT.jl's length scale 5.0.
COLUMNS = [("unconstrained", "ip"), ("unconstrained", "ip_star_5"), ("protected", "cost")]


def quantile(values: list[float], p: float) -> float:
    """The ``p`` quantile with linear interpolation between order statistics (type 7)."""
    xs = sorted(values)
    h = (len(xs) - 1) * p
    low = math.floor(h)
    high = min(low + 1, len(xs) - 1)
    return xs[low] + (h - low) * (xs[high] - xs[low])


def seed_result(ct: list, bl: list) -> tuple[float, float, bool]:
    """(reduction %, SE, significant) of one seed's CT against its baseline."""
    pairs = [(a, b) for a, b in zip(ct, bl, strict=True) if a is not None and b is not None]
    ratios = [a / b for a, b in pairs if b != 0]
    diffs = [a - b for a, b in pairs]
    reduction = -(statistics.fmean(ratios) - 1) * 100
    se = 100 * statistics.stdev(ratios)
    low, high = quantile(diffs, 0.005), quantile(diffs, 0.995)
    return reduction, se, not (low <= 0 <= high)


def agrees(ours: tuple[float, float, bool], paper: tuple[float, float, bool]) -> bool:
    (r, se, sig), (p, p_se, p_sig) = ours, paper
    return abs(r - p) <= 2.58 * math.sqrt(se**2 + p_se**2) and sig == p_sig


def recount(data_dir: Path) -> dict[tuple[str, int], int]:
    """Per (data set, column index): how many seeds agree with the paper."""
    folder = data_dir / "reproduction" / "evaluations"
    out = {}
    for key, published in PUBLISHED.items():
        runs = [json.loads(p.read_text()) for p in sorted(folder.glob(f"{key}-s*.json"))]
        for column, ((experiment, measure), paper) in enumerate(
            zip(COLUMNS, published, strict=True)
        ):
            seeds = 0
            for run in runs:
                rounds = run[experiment]["per_round"]
                if any(v is not None for v in rounds["full"][measure]):
                    ours = seed_result(rounds["full"][measure], rounds["vanilla"][measure])
                    seeds += agrees(ours, paper)
            out[key, column] = seeds
    return out


if __name__ == "__main__":
    here = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parents[1] / "data"
    counted = recount(here)
    for (key, column), seeds in counted.items():
        print(f"{key:8s} {COLUMNS[column][1]:10s} {seeds} of 3")
    print(f"{sum(s >= 2 for s in counted.values())} of {len(counted)} agree in at least 2 seeds")
