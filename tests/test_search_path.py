"""The recorded search path (``cfbook.search.path``) against the searches it pictures."""

from __future__ import annotations

from dataclasses import replace

import torch

from cfbook.models import mlp
from cfbook.search.generators import NativeGenerator, ReferenceGenerator
from cfbook.search.path import record_search, search_path


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


def test_every_recorded_iterate_is_the_reference_search_stopped_there():
    """Iterate k of the path is where ReferenceGenerator(maxiter=k) ends. The energy schedule
    depends on maxiter through round(maxiter / 25), which is 1 for every k from 13 to 30."""
    model, x, target = _setup()
    settings = {"step_size": 0.3, "tau": 0.95, "lambda_cost": 0.01, "lambda_energy": 2.0}
    path = search_path(NativeGenerator(maxiter=30, **settings), model, x, target)
    for k in range(13, 31):
        reference = ReferenceGenerator(maxiter=k, **settings).generate(model, x, target)
        assert torch.allclose(path[k], reference.counterfactual, atol=1e-5), k
    assert (path[13] != path[30]).any()  # the rows still move over the compared iterates


def test_a_record_marks_where_the_search_returns_its_counterfactual_and_adversarial_example():
    model, x, target = _setup()
    g = NativeGenerator(maxiter=25, step_size=1.0, tau=0.8, epsilon=0.5, compile=False)
    result = g.generate(model, x, target)
    for i in range(x.shape[0]):
        record = record_search(g, model, x[i], int(target[i]))
        assert record.path.shape == (26, 2) and record.target_prob.shape == (26,)
        assert record.counterfactual_at == int(result.iterations[i])
        assert record.valid == bool(result.valid[i])
        assert torch.allclose(record.path[record.counterfactual_at], result.counterfactual[i])
        assert torch.allclose(record.path[record.adversarial_at], result.nascent[i])
        assert record.distance[record.adversarial_at] <= 0.5
        if record.adversarial_at < record.counterfactual_at:
            assert record.distance[record.adversarial_at + 1] > 0.5
    # Both outcomes occur, and some rows leave the epsilon ball before they stop.
    assert result.valid.any() and not result.valid.all()
    assert not torch.equal(result.nascent, result.counterfactual)


def test_the_path_keeps_to_the_domain_and_does_not_depend_on_the_chunk_size():
    model, x, target = _setup()
    x = x.clamp(-0.5, 0.5)
    g = NativeGenerator(maxiter=15, step_size=0.5, compile=False)
    path = search_path(g, model, x, target, domain=(-0.5, 0.5))
    assert path.min() >= -0.5 and path.max() <= 0.5
    assert (path[-1].abs() == 0.5).any()  # the domain binds
    chunked = search_path(replace(g, cf_batchsize=5), model, x, target, domain=(-0.5, 0.5))
    # Each row's path, whatever batch it stepped in: equal to float rounding, not bit for bit,
    # since a CPU's matrix kernels may round another batch size's rows differently (6e-8 on
    # an Intel Xeon, 0 on an AMD EPYC); a row stepped in another row's place moves by 0.1s.
    assert torch.allclose(chunked, path, rtol=0, atol=1e-6)


def test_a_record_keeps_to_the_domain_and_the_mutability():
    model, x, target = _setup()
    g = NativeGenerator(maxiter=15, step_size=0.5, compile=False)
    x0 = x[0].clamp(-0.5, 0.5)
    record = record_search(g, model, x0, int(target[0]), domain=(-0.5, 0.5))
    assert record.path.abs().max() <= 0.5 and (record.path[-1].abs() == 0.5).any()
    record = record_search(g, model, x0, int(target[0]), mutability=["none", "both"])
    assert (record.path[:, 0] == x0[0]).all() and (record.path[:, 1] != x0[1]).any()


def test_a_record_counts_reaching_tau_exactly_as_valid():
    """A zero model gives every point probability 1/2 exactly: with tau = 1/2 the factual is
    already a counterfactual, and with epsilon 0 it is also the last point within epsilon."""
    model = torch.nn.Linear(2, 2)
    torch.nn.init.zeros_(model.weight), torch.nn.init.zeros_(model.bias)
    g = NativeGenerator(maxiter=5, tau=0.5, epsilon=0.0, compile=False)
    record = record_search(g, model, torch.tensor([0.3, -0.2]), 1)
    assert record.valid and record.counterfactual_at == 0 and record.adversarial_at == 0


def test_the_adversarial_point_is_the_counterfactual_when_the_search_stays_within_epsilon():
    model, x, target = _setup()
    g = NativeGenerator(maxiter=25, step_size=1.0, tau=0.8, epsilon=100.0, compile=False)
    for i in range(x.shape[0]):
        record = record_search(g, model, x[i], int(target[i]))
        assert record.adversarial_at == record.counterfactual_at
    assert any(
        0 < record_search(g, model, x[i], int(target[i])).counterfactual_at < 24
        for i in range(x.shape[0])
    )
