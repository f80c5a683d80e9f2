"""The iterates of a search, for pictures: the batched eager step without compaction, so every
row's point is recorded at every iteration (a converged row stays where it stopped)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from cfbook.search.constraints import Domain, Mutability
from cfbook.search.generators import SearchParameters, _prepare, eval_mode
from cfbook.search.step import StepSettings, WorkingSet, eager_step


def search_path(
    generator: SearchParameters,
    model: nn.Module,
    x: Tensor,
    target: Tensor,
    *,
    domain: Domain = None,
    mutability: Mutability = None,
) -> Tensor:
    """``(maxiter + 1, N, D)``: the factuals, then each iteration's points of the search that
    ``generator``'s settings define (``NativeGenerator(compile=False)`` ends at the last one)."""
    x, target, constraints = _prepare(model, x, target, domain, mutability)
    ws = WorkingSet.start(x, target, fused=False)
    settings = StepSettings(
        generator.tau, generator.lambda_cost, generator.step_size, generator.epsilon, None, 1.0
    )
    points = [ws.x.detach().clone()]
    with eval_mode(model):
        for t in range(generator.maxiter):
            eager_step(model, ws, generator.energy_weight(t), constraints, settings)
            points.append(ws.x.detach().clone())
    return torch.stack(points)
