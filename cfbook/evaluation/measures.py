"""The measures of the paper's protocol in one registry: each measure's key in the result files,
its label in tables, whether it is taken over the valid counterfactuals only, and the function
that computes it from one run. The protocol computes and writes them in ``protocol_measures``'
order; the merge, the book's report and its figures take the measures they compare from
``compared_measures``, so that a measure is named in one place."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Protocol

import torch
from torch import Tensor

from cfbook.evaluation.metrics import cost, implausibility, ip_stars

# IP*: CT.jl's code uses a Gaussian kernel of length scale 5.0, the paper's text says 0.5. The
# first decides; the others are reported as sensitivities.
LENGTH_SCALES = (5.0, 0.5)


class References(Protocol):
    """A run's reference points of each target class: IP's (``near``) and IP*'s (``sample``)."""

    def near(self, c: int) -> Tensor: ...

    def sample(self, c: int) -> Tensor: ...


@dataclass
class Run:
    """One run of one model at one energy weight, as its measures read it: per individual the
    factual ``x0``, the counterfactual ``cf``, whether it is ``valid`` and its ``target`` class;
    the run's ``references``; IP*'s subsample size, length scales and random generator; and
    ``held``, where the protocol has them, the L1 distances of a class's rows to IP's reference
    points (None: computed from the points)."""

    x0: Tensor
    cf: Tensor
    valid: Tensor
    target: Tensor
    references: References
    mmd_samples: int
    length_scales: tuple[float, ...]
    rng: torch.Generator
    held: Callable[[int, Tensor], Tensor | None] | None = None

    @cached_property
    def keep(self) -> Tensor:
        """The rows of the valid counterfactuals."""
        return self.valid.nonzero().flatten()

    @cached_property
    def classes(self) -> list[tuple[int, Tensor]]:
        """Each target class of a valid counterfactual, in ascending order, with those rows."""
        targets = self.target[self.keep]
        return [(c, self.keep[targets == c]) for c in targets.unique().tolist()]

    @cached_property
    def stars(self) -> dict[float, float | None]:
        """IP* at each length scale, from one draw for all of them: per target class, the MMD^2
        of up to ``mmd_samples`` of its valid counterfactuals against its IP* reference points,
        averaged over the classes with at least two a side (None: no such class)."""
        values: dict[float, list[float]] = {scale: [] for scale in self.length_scales}
        for c, rows in self.classes:
            if rows.numel() < 2:
                continue
            sample = self.references.sample(c)
            if sample.shape[0] < 2:
                continue
            pick = torch.randperm(rows.numel(), generator=self.rng)[: self.mmd_samples]
            mine = self.cf[rows]
            at = ip_stars(mine[pick.to(mine.device)], sample, self.length_scales)
            for scale, value in zip(self.length_scales, at, strict=True):
                values[scale].append(value)
        return {scale: sum(v) / len(v) if v else None for scale, v in values.items()}


@dataclass(frozen=True)
class Measure:
    """One measure: its ``key`` in the results, its ``label`` in tables, whether it is taken over
    the valid counterfactuals only (None for a run without any), and ``compute``, its value for
    one run."""

    key: str
    label: str
    valid_only: bool
    compute: Callable[[Run], float | None]

    def of(self, run: Run) -> float | None:
        """The measure of ``run``."""
        if self.valid_only and not run.keep.numel():
            return None
        return self.compute(run)


def _validity(run: Run) -> float:
    """The share of the run's counterfactuals that are valid."""
    return float(run.valid.float().mean())


def _cost(run: Run) -> float:
    """The mean L1 distance of the valid counterfactuals from their factuals."""
    return float(cost(run.x0[run.keep], run.cf[run.keep]).mean())


def _ip(run: Run) -> float | None:
    """IP: each valid counterfactual's mean L1 distance to IP's reference points of its target
    class, averaged over the counterfactuals."""
    total, count = 0.0, 0
    for c, rows in run.classes:
        mine = run.cf[rows]
        held = None if run.held is None else run.held(c, rows)
        if held is None:
            total += implausibility(mine, run.references.near(c)) * mine.shape[0]
        else:
            total += float(held.mean()) * mine.shape[0]
        count += mine.shape[0]
    return total / count if count else None


VALIDITY = Measure("validity", "validity", False, _validity)
COST = Measure("cost", "cost", True, _cost)
IP = Measure("ip", "IP", True, _ip)


def ip_star_key(length_scale: float) -> str:
    """The key of IP* at one kernel length scale in the protocol's results."""
    return f"ip_star_{length_scale:g}"


def ip_star(length_scale: float) -> Measure:
    """IP* at one kernel length scale."""
    return Measure(ip_star_key(length_scale), "IP*", True, lambda run: run.stars[length_scale])


def protocol_measures(length_scales: tuple[float, ...] = LENGTH_SCALES) -> tuple[Measure, ...]:
    """Every measure of the protocol with IP* at ``length_scales``, in the order of its results:
    validity, cost, IP, IP* at each length scale."""
    return (VALIDITY, COST, IP, *map(ip_star, length_scales))


def compared_measures(
    length_scales: tuple[float, ...] = LENGTH_SCALES, *, sensitivities: bool = False
) -> tuple[Measure, ...]:
    """The measures on which tables compare CT with the baseline, in the paper's order: IP, IP*
    at the first of ``length_scales`` (with ``sensitivities``, at each), cost. Validity is a
    level, shown beside them."""
    return (IP, *map(ip_star, length_scales if sensitivities else length_scales[:1]), COST)
