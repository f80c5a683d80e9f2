"""The paper's evaluation design, as the code that made its numbers draws it
(CounterfactualExplanations.jl ``src/evaluation/benchmark.jl``, ``benchmark(data; ...)``, which
CTExperiments calls without a ``factual`` or ``target``): each individual gets a factual class
and a different target class, drawn once, before the runs, and kept across them; each run then
draws, for each model and individual, a test point that the model predicts as that individual's
factual class (with replacement). Classes are therefore mixed within a run and fixed across runs,
and each model is searched on what it takes to be the factual class."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class Individuals:
    """The per-individual factual and target classes of one benchmark (one energy weight)."""

    factual: Tensor
    target: Tensor


def draw_individuals(
    predicted: Mapping[str, Tensor], levels: Sequence[int], n: int, rng: torch.Generator
) -> Individuals:
    """``n`` factual classes uniform over ``levels`` and, for each, a target class uniform over
    the others (``rand(data.y_levels, n)``, then ``rand(levels .!= factual[i])``).

    CE.jl errors when a model never predicts an individual's factual class; here the factual
    classes are drawn among the classes every model predicts for some test point, and an error
    names the problem when fewer than one such class is left."""
    if len(levels) < 2:
        raise ValueError(f"the evaluation needs at least two classes, got {list(levels)}")
    predicted = {name: p.cpu() for name, p in predicted.items()}
    usable = [c for c in levels if all(bool((p == c).any()) for p in predicted.values())]
    if not usable:
        raise ValueError(
            "no class is predicted for some test point by every model, so no factual can be "
            "drawn: check the models and the test data"
        )
    usable_t = torch.tensor(usable)
    factual = usable_t[torch.randint(len(usable), (n,), generator=rng)]
    levels_t = torch.tensor(list(levels))
    # A uniform pick among the other len(levels) - 1 classes: skip the factual's own position.
    pick = torch.randint(len(levels) - 1, (n,), generator=rng)
    position = (levels_t[None, :] == factual[:, None]).int().argmax(1)
    target = levels_t[pick + (pick >= position).long()]
    return Individuals(factual, target)


def draw_rows(predicted: Tensor, factual: Tensor, rng: torch.Generator) -> Tensor:
    """For each individual, a test row the model predicts as its factual class, drawn with
    replacement among those rows (CE.jl: ``rand(findall(yhat .== factual[i]))``)."""
    predicted = predicted.cpu()
    rows = torch.empty(factual.shape[0], dtype=torch.long)
    for c in factual.unique().tolist():
        where = factual == c
        members = (predicted == c).nonzero().flatten()
        if not members.numel():
            raise ValueError(f"the model predicts class {c} for no test point")
        rows[where] = members[torch.randint(members.numel(), (int(where.sum()),), generator=rng)]
    return rows
