"""The paper's evaluation rounds: each draws a factual class and a target class, then, for each
model, test points that the model predicts as the factual class (with replacement), so the
models are compared on what each of them takes to be the factual class
(``../shared/reference/PAPER.md``; CT.jl, ``paper/experiments/CTExperiments/src/``)."""

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
