"""The recorded search path (``cfbook.search.path``) against the searches it pictures."""

from __future__ import annotations

import torch

from cfbook.models import mlp
from cfbook.search.generators import NativeGenerator, ReferenceGenerator
from cfbook.search.path import search_path


def _setup():
    torch.manual_seed(0)
    model = mlp(2, (8,), 2)
    x = torch.randn(12, 2, generator=torch.Generator().manual_seed(1))
    target = 1 - model(x).argmax(1)
    return model, x, target


def test_the_path_ends_where_the_batched_and_the_reference_search_end():
    model, x, target = _setup()
    g = NativeGenerator(maxiter=20, step_size=0.5, tau=0.9, lambda_cost=0.01, compile=False)
    path = search_path(g, model, x, target, domain=(-3.0, 3.0))
    assert path.shape == (21, 12, 2) and torch.equal(path[0], x)
    batched = g.generate(model, x, target, domain=(-3.0, 3.0))
    reference = ReferenceGenerator(maxiter=20, step_size=0.5, tau=0.9, lambda_cost=0.01)
    reference = reference.generate(model, x, target, domain=(-3.0, 3.0))
    assert torch.allclose(path[-1], batched.counterfactual, atol=1e-5)
    assert torch.allclose(path[-1], reference.counterfactual, atol=1e-5)
    # A row moves exactly as many times as its search took steps, then stays put.
    moves = (path[1:] != path[:-1]).any(2).sum(0)
    assert torch.equal(moves, reference.iterations)


def test_a_protected_feature_never_moves_along_the_path():
    model, x, target = _setup()
    g = NativeGenerator(maxiter=15, step_size=0.5)
    path = search_path(g, model, x, target, mutability=["none", "both"])
    assert torch.equal(path[:, :, 0], x[:, 0].expand(16, 12))
    assert (path[-1, :, 1] != x[:, 1]).any()
