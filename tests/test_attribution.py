"""Integrated gradients and their standardisation (``cfbook.evaluation.attribution``)."""

from __future__ import annotations

import inspect

import pytest
import torch
from torch import nn

from cfbook.evaluation.attribution import (
    integrated_gradients,
    protected_sensitivity,
    standardise,
)


def _linear() -> nn.Linear:
    model = nn.Linear(3, 2)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[1.0, -2.0, 0.5], [0.0, 3.0, -1.0]]))
        model.bias.copy_(torch.tensor([0.3, -0.1]))
    return model


def test_integrated_gradients_of_a_linear_model_are_known_in_closed_form():
    # For f_t(x) = w_t . x + b, IG_d = (x_d - x0_d) * w_td exactly, whatever the path steps.
    model = _linear()
    x = torch.tensor([[1.0, 2.0, -1.0], [0.5, -0.5, 2.0]])
    baseline = torch.tensor([[0.2, -0.4, 0.1]])
    target = torch.tensor([0, 1])
    got = integrated_gradients(model, x, target, baseline, n_steps=8)
    expected = (x - baseline) * model.weight[target].detach()
    assert torch.allclose(got, expected, atol=1e-5)
    # Completeness: the attributions sum to f(x) - f(baseline).
    gap = model(x).gather(1, target[:, None]) - model(baseline).expand(2, 2).gather(
        1, target[:, None]
    )
    assert torch.allclose(got.sum(1, keepdim=True), gap.detach(), atol=1e-5)


def test_standardisation_follows_the_papers_two_rules():
    g = torch.tensor([-2.0, 1.0, 2.0])
    # 2-D data: |g| / (max - min) = [2, 1, 2] / 4; real data: (g - min) / (max - min).
    assert torch.allclose(standardise(g, True), torch.tensor([0.5, 0.25, 0.5]))
    assert torch.allclose(standardise(g, False), torch.tensor([0.0, 0.75, 1.0]))


def test_a_model_blind_to_a_feature_has_no_sensitivity_to_it():
    model = _linear()
    with torch.no_grad():
        model.weight[:, 2] = 0.0  # column 2 never matters
    x = torch.randn(50, 3, generator=torch.Generator().manual_seed(0))
    y = (x[:, 1] > 0).long()
    blind = protected_sensitivity(model, x, y, [2], two_dimensional=True, rounds=4, samples=20)
    seen = protected_sensitivity(model, x, y, [1], two_dimensional=True, rounds=4, samples=20)
    assert blind == pytest.approx([0.0] * 4, abs=1e-6)
    assert all(s > 0.1 for s in seen)
    with pytest.raises(ValueError, match="at least one protected column"):
        protected_sensitivity(model, x, y, [], two_dimensional=False)


def test_standardisation_is_per_row_and_keeps_small_spans():
    g = torch.tensor([[-0.2, 0.1, 0.2], [1.0, 3.0, 2.0]])  # spans 0.4 and 2
    assert torch.allclose(standardise(g, True), torch.tensor([[0.5, 0.25, 0.5], [0.5, 1.5, 1.0]]))
    assert torch.allclose(standardise(g, False), torch.tensor([[0.0, 0.75, 1.0], [0.0, 1.0, 0.5]]))
    assert standardise(torch.ones(3), False).tolist() == [0.0, 0.0, 0.0]  # no span: no NaN


def test_protected_sensitivity_equals_its_definition_on_a_linear_model():
    # Linear model: IG is (x - baseline) * w_y in closed form. Each round draws its rows (with
    # replacement) and then its baseline from U(-1, 1) with the seeded generator, averages the
    # rows' IG, standardises across features and averages the protected ones.
    model = _linear().double()
    x = torch.randn(30, 3, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    y = (x[:, 0] > 0).long()
    w = model.weight.detach()
    rng = torch.Generator().manual_seed(7)
    expected = []
    for _ in range(3):
        rows = torch.randint(30, (11,), generator=rng)
        baseline = torch.rand(1, 3, generator=rng).double() * 2 - 1
        g = ((x[rows] - baseline) * w[y[rows]]).mean(0)
        expected.append(float(standardise(g, False)[[0, 2]].mean()))
    got = protected_sensitivity(
        model, x, y, [0, 2], two_dimensional=False, rounds=3, samples=11, seed=7, n_steps=4
    )
    assert got == pytest.approx(expected, abs=1e-9)


def _curved() -> nn.Module:
    # A model whose IG depends on the number of path steps (a linear one's does not).
    torch.manual_seed(3)
    return nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)).double()


def test_protected_sensitivity_defaults_are_the_papers():
    # The appendix: 100 rounds of 2,500 test points; Captum's 50 steps; seed 0. Called, so that
    # a changed default shows in the numbers, not only in the signature.
    defaults = {
        name: p.default for name, p in inspect.signature(protected_sensitivity).parameters.items()
    }
    assert (defaults["rounds"], defaults["samples"], defaults["n_steps"]) == (100, 2500, 50)
    assert defaults["seed"] == 0
    model = _curved()
    x = torch.randn(40, 3, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    y = (x[:, 0] > 0).long()
    got = protected_sensitivity(model, x, y, [1], two_dimensional=False)
    explicit = protected_sensitivity(
        model, x, y, [1], two_dimensional=False, rounds=100, samples=2500, seed=0, n_steps=50
    )
    assert got == explicit and len(got) == 100
    baseline = torch.zeros(1, 3, dtype=torch.float64)
    assert torch.equal(
        integrated_gradients(model, x, y, baseline), integrated_gradients(model, x, y, baseline, 50)
    )


def test_protected_sensitivity_integrates_with_the_steps_it_is_given():
    # On a curved model the path's steps change IG: each round must use the n_steps passed.
    model = _curved()
    x = torch.randn(30, 3, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    y = (x[:, 0] > 0).long()
    rng = torch.Generator().manual_seed(7)
    expected = []
    for _ in range(3):
        rows = torch.randint(30, (11,), generator=rng)
        baseline = (torch.rand(1, 3, generator=rng) * 2 - 1).double()
        g = integrated_gradients(model, x[rows], y[rows], baseline, n_steps=3).mean(0)
        expected.append(float(standardise(g, False)[[0, 2]].mean()))
    got = protected_sensitivity(
        model, x, y, [0, 2], two_dimensional=False, rounds=3, samples=11, seed=7, n_steps=3
    )
    assert got == pytest.approx(expected, abs=1e-12)
    fifty = protected_sensitivity(
        model, x, y, [0, 2], two_dimensional=False, rounds=3, samples=11, seed=7, n_steps=50
    )
    assert max(abs(a - b) for a, b in zip(got, fifty, strict=True)) > 1e-4
    with pytest.raises(
        ValueError, match="^protected_sensitivity needs at least one protected column$"
    ):
        protected_sensitivity(model, x, y, [], two_dimensional=False)
