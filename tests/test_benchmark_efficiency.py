"""Benchmark 2's bare passes: computed as the search computes them, by the direct path for a
plain MLP (so with the search's products) and by autograd for any other model."""

from __future__ import annotations

import torch
from torch import nn

from benchmarks.efficiency import bare_passes


class Layers(nn.Sequential):
    """The same layers in a subclass: the search runs it through autograd."""


def test_bare_passes_take_the_direct_path_for_plain_mlps_only(pullback_rows):
    rows = pullback_rows
    model = nn.Sequential(nn.Linear(12, 8), nn.ReLU(), nn.Linear(8, 3))
    x, grad_out = torch.rand(20, 12), torch.randn(20, 3)
    bare_passes(model, x, [20, 7, 3], grad_out)
    assert rows == [20, 7, 3]
    bare_passes(Layers(*model), x, [20, 7], grad_out)
    assert rows == [20, 7, 3]  # autograd ran those
