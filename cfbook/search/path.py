"""The iterates of a search, for pictures: ``NativeGenerator.generate(..., record=True)``, the
one search loop with every iterate kept, and what a picture of one factual's search needs."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from cfbook.search.checks import eval_mode
from cfbook.search.constraints import Domain, Mutability
from cfbook.search.generators import NativeGenerator
from cfbook.search.logits import class_logits

__all__ = ["SearchRecord", "record_search", "search_path"]


def search_path(
    generator: NativeGenerator,
    model: nn.Module,
    x: Tensor,
    target: Tensor,
    *,
    domain: Domain = None,
    mutability: Mutability = None,
) -> Tensor:
    """``(maxiter + 1, N, ...)``: the factuals, then each iteration's points of the search that
    ``generator``'s settings define (``NativeGenerator(compile=False)`` ends at the last one)."""
    found = generator.generate(model, x, target, domain=domain, mutability=mutability, record=True)
    return found.path


@dataclass(frozen=True)
class SearchRecord:
    """One factual's search, iterate by iterate: what a picture of the search needs.

    ``counterfactual_at`` is the iterate the search returns: the first whose target probability
    reaches ``tau`` (the search stops there), else the last. ``adversarial_at`` is the last
    iterate up to it that lies within ``epsilon`` (L-inf) of the factual: the nascent point that
    the adversarial term of counterfactual training uses.
    """

    path: Tensor
    target_prob: Tensor
    distance: Tensor
    counterfactual_at: int
    adversarial_at: int
    valid: bool


def record_search(
    generator: NativeGenerator,
    model: nn.Module,
    x: Tensor,
    target: int,
    *,
    domain: Domain = None,
    mutability: Mutability = None,
) -> SearchRecord:
    """Search one factual ``x`` (one sample, of any shape) towards class ``target`` and keep
    every iterate with its target probability and its L-inf distance from ``x``."""
    path = search_path(
        generator,
        model,
        x[None],
        torch.tensor([target], device=x.device),
        domain=domain,
        mutability=mutability,
    )[:, 0]
    with torch.no_grad(), eval_mode(model):
        prob = class_logits(model(path)).float().softmax(1)[:, target]
    distance = (path - path[0]).abs().flatten(1).amax(1)
    reached = (prob >= generator.tau).nonzero().flatten().tolist()
    stop = reached[0] if reached else generator.maxiter
    within = (distance[: stop + 1] <= generator.epsilon).nonzero().flatten().tolist()
    return SearchRecord(
        path.cpu(),
        prob.cpu(),
        distance.cpu(),
        counterfactual_at=stop,
        adversarial_at=within[-1],
        valid=bool(prob[stop] >= generator.tau),
    )
