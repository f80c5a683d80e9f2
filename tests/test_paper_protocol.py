"""The paper's evaluation protocol (``cfbook.evaluation.protocol``) on small models."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from cfbook.evaluation.protocol import PaperProtocol, paper_evaluate
from cfbook.evaluation.statistics import compare_models
from cfbook.search.generators import NativeGenerator


def _by_sign(column: int, scale: float = 4.0) -> nn.Module:
    """A two-class linear model that predicts class 1 where x[column] > 0."""
    model = nn.Linear(2, 2)
    with torch.no_grad():
        model.weight.zero_()
        model.bias.zero_()
        model.weight[1, column], model.weight[0, column] = scale, -scale
    return model


@pytest.fixture
def toy():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(200, 2, generator=g)
    y = (x[:, 0] > 0).long()  # the true labels follow x1
    return x, y


def test_each_round_searches_what_each_model_predicts_as_the_factual_class(toy, monkeypatch):
    x, y = toy
    # The second model predicts by x2: its factuals differ from the first model's.
    models = {"ct": _by_sign(0), "baseline": _by_sign(1)}
    calls = []
    original = NativeGenerator.generate

    def spy(self, model, x0, target, **kwargs):
        calls.append((model, x0.clone(), target.clone(), self.lambda_energy, self.tau))
        return original(self, model, x0, target, **kwargs)

    monkeypatch.setattr(NativeGenerator, "generate", spy)
    protocol = PaperProtocol(rounds=6, individuals=5, energy_weights=(0.1, 5.0), tau=0.9)
    out = paper_evaluate(models, x, y, protocol)
    assert len(calls) == 2 * 2  # one batched search per model and energy weight
    for model, x0, target, weight, tau in calls:
        assert x0.shape == (30, 2) and weight in (0.1, 5.0) and tau == 0.9
        for r in range(6):
            part = slice(5 * r, 5 * r + 5)
            factual = 1 - int(target[part][0])  # two classes: the factual class is the other one
            assert (target[part] == target[part][0]).all()  # one target class per round
            assert (model(x0[part]).argmax(1) == factual).all()  # predicted as the factual class
    for name in models:
        for values in out["per_round"][name].values():
            assert len(values) == 6
        assert all(0.0 <= v <= 1.0 for v in out["per_round"][name]["validity"])
    assert [w["energy_weight"] for w in out["by_weight"]["ct"]] == [0.1, 5.0]


def test_measures_use_valid_counterfactuals_against_the_test_set(toy):
    x, y = toy
    models = {"ct": _by_sign(0), "baseline": _by_sign(0, scale=0.5)}
    out = paper_evaluate(models, x, y, PaperProtocol(rounds=4, individuals=8, ip_draws=50))
    for name in models:
        rounds = out["per_round"][name]
        # A linear boundary is crossed within 50 steps: every counterfactual is valid, so every
        # round has a cost, an IP and both IP* figures (at least two valid counterfactuals).
        assert rounds["validity"] == [1.0] * 4
        assert all(v is not None and v > 0 for v in rounds["cost"] + rounds["ip"])
        assert all(v is not None and v >= 0 for v in rounds["ip_star_5"] + rounds["ip_star_0.5"])
    # The flatter model needs longer steps to reach p >= 0.95: it is costlier.
    table = compare_models(out["per_round"], "ct", "baseline")
    assert set(table) == {"cost", "ip", "ip_star_5", "ip_star_0.5"}
    assert table["cost"]["reduction"] > 0 and table["cost"]["significant"]


def test_protocol_rejects_nonsense():
    with pytest.raises(ValueError, match="rounds"):
        PaperProtocol(rounds=0)
    with pytest.raises(ValueError, match="energy_weights"):
        PaperProtocol(energy_weights=())
