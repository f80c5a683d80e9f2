"""Target classes for counterfactuals: uniform over the labels present in the data, minus the
predicted class, drawn on the device without a host sync (training and evaluation alike)."""

from __future__ import annotations

import torch
from torch import Tensor


def label_levels(y: Tensor, what: str = "the training labels") -> Tensor:
    """The sorted labels present in the data (``what`` names them in the error when there are
    fewer than two): the classes targets are drawn from."""
    levels = torch.unique(y)
    if levels.numel() < 2:
        held = "hold" if what.endswith("labels") else "holds"
        raise ValueError(
            f"{what} {held} {levels.numel()} class(es); counterfactual targets need "
            "at least two: include samples of at least two classes"
        )
    return levels


def uniform_draws(rng: torch.Generator | Tensor, like: Tensor) -> Tensor:
    """One uniform draw per row of ``like``: from ``rng``, or ``rng`` itself if already drawn."""
    if isinstance(rng, Tensor):
        return rng
    return torch.rand(like.shape[0], generator=rng, device=like.device)


def draw_targets(predicted: Tensor, levels: Tensor, rng: torch.Generator | Tensor) -> Tensor:
    """One target per factual, uniform over the labels present in the data (``levels``, sorted)
    minus the predicted class, as in CT.jl; on the device, without a host sync. ``rng`` draws the
    uniforms, or is them (one per factual) when drawn ahead."""
    k = levels.shape[0]
    pos = torch.searchsorted(levels, predicted).clamp_(max=k - 1)
    present = levels[pos] == predicted
    u = uniform_draws(rng, predicted)
    n = k - present.long()  # the classes a target may be
    r = torch.minimum((u * n).long(), n - 1)  # u = 1, drawn ahead, stays in range
    return levels[r + (present & (r >= pos)).long()]
