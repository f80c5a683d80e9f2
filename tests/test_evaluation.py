"""The paper's test-time protocol: hand-computed measures, seeded factuals, attacks, gallery."""

from __future__ import annotations

import json
import math

import pytest
import torch
from torch import nn

from cfbook.data import load_mnist
from cfbook.evaluation.metrics import mmd2
from cfbook.evaluation.protocol import (
    EvaluationConfig,
    _pooled,
    _quality,
    attack_accuracy,
    decode_images,
    draw_factuals,
    evaluate,
    gallery,
    mean_se,
)
from cfbook.models import mlp
from cfbook.search.generators import CounterfactualResult


def identity_model() -> nn.Module:
    model = nn.Linear(2, 2)
    with torch.no_grad():
        model.weight.copy_(torch.eye(2))
        model.bias.zero_()
    return model


def test_mean_and_standard_error_by_hand():
    assert mean_se([1.0, 2.0, 3.0]) == {"mean": 2.0, "se": pytest.approx(1 / math.sqrt(3)), "n": 3}
    assert mean_se([4.0, None]) == {"mean": 4.0, "se": None, "n": 1}
    assert mean_se([None]) == {"mean": None, "se": None, "n": 0}


def test_factuals_and_targets_come_from_the_seed_and_exclude_the_true_label():
    y = torch.arange(500) % 10
    idx, target = draw_factuals(y, 100, seed=3)
    again_idx, again_target = draw_factuals(y, 100, seed=3)
    assert torch.equal(idx, again_idx) and torch.equal(target, again_target)
    assert len(set(idx.tolist())) == 100
    assert bool((target != y[idx]).all()) and set(target.tolist()) <= set(range(10))
    other, _ = draw_factuals(y, 100, seed=4)
    assert not torch.equal(idx, other)
    with pytest.raises(ValueError, match="exceeds the 500 held-out"):
        draw_factuals(y, 501, seed=0)


class FixedSearch:
    """A stand-in generator returning hand-picked counterfactuals."""

    def __init__(self, counterfactual: torch.Tensor):
        self.counterfactual = counterfactual

    def generate(self, model, x, target, **kwargs):
        n = x.shape[0]
        return CounterfactualResult(
            self.counterfactual,
            x,
            torch.ones(n, dtype=torch.bool),
            torch.zeros(n, dtype=torch.long),
        )


def test_only_valid_counterfactuals_enter_cost_ip_and_ip_star():
    # Identity model: a counterfactual is valid when its target coordinate is the larger one.
    x = torch.zeros(4, 2)
    target = torch.tensor([1, 1, 1, 0])
    cf = torch.tensor([[0.0, 1.0], [0.0, 3.0], [2.0, 0.0], [5.0, 0.0]])  # row 2 is invalid
    ref_x = torch.tensor([[0.0, 1.0], [0.0, 2.0], [1.0, 0.0], [3.0, 0.0]])
    ref_y = torch.tensor([1, 1, 0, 0])
    config = EvaluationConfig(length_scale=5.0)
    record, _ = _quality(
        identity_model(),
        x,
        target,
        ref_x,
        ref_y,
        FixedSearch(cf),
        None,
        config,
        torch.Generator().manual_seed(0),
    )
    assert (record["n"], record["n_valid"], record["validity"]) == (4, 3, 0.75)
    assert record["cost"] == pytest.approx((1 + 3 + 5) / 3)  # L1 of the valid rows only
    # IP: mean L1 distance to every sample of the target class.
    # (0,1) -> class 1 {(0,1),(0,2)}: (0 + 1) / 2;  (0,3): (2 + 1) / 2;  (5,0) -> {(1,0),(3,0)}: 3
    assert record["ip"] == pytest.approx((0.5 + 1.5 + 3.0) / 3)
    # IP*: class 1 has two valid counterfactuals (MMD^2 against its two samples); class 0 has one
    # and is left out.
    expected = mmd2(cf[[0, 1]], ref_x[:2], 5.0)
    assert record["ip_star"] == pytest.approx(expected) and record["n_ip_star"] == 2


def test_runs_pool_their_energy_weights_by_count():
    records = [
        {"n": 10, "n_valid": 5, "cost": 2.0, "ip": 4.0, "ip_star": 1.0, "n_ip_star": 4},
        {"n": 10, "n_valid": 0, "cost": None, "ip": None, "ip_star": None, "n_ip_star": 0},
        {"n": 10, "n_valid": 15 // 3, "cost": 4.0, "ip": 1.0, "ip_star": 3.0, "n_ip_star": 2},
    ]
    pooled = _pooled(records)
    assert pooled["validity"] == pytest.approx(10 / 30)
    assert pooled["cost"] == pytest.approx(3.0) and pooled["ip"] == pytest.approx(2.5)
    assert pooled["ip_star"] == pytest.approx((4 * 1.0 + 2 * 3.0) / 6)


def test_fgsm_and_pgd_accuracy_by_hand():
    # Identity model, label 0: the margin x0 - x1 shrinks by 2 eps under the optimal L-inf attack,
    # which for a linear model FGSM and PGD both find.
    x = torch.tensor([[0.1, 0.0], [0.3, 0.0]])
    y = torch.tensor([0, 0])
    out = attack_accuracy(
        identity_model(), x, y, epsilons=(0.03, 0.1, 0.2), pgd_steps=5, domain=(-1.0, 1.0)
    )
    assert out["clean"] == 1.0
    assert out["fgsm"] == {"0.03": 1.0, "0.1": 0.5, "0.2": 0.0}
    assert out["pgd"] == {"0.03": 1.0, "0.1": 0.5, "0.2": 0.0}


def test_the_papers_pgd_starts_in_the_ball_and_ends_at_the_optimal_corner():
    """CT.jl's PGD: a uniform start in the eps ball, then 40 sign steps of 0.01, each projected.
    On the identity model (label 0) every step lowers x0 and raises x1, so after 40 steps of
    0.01 any start ends at x + eps (-1, +1) when eps <= 0.2."""
    from cfbook.evaluation.protocol import PAPER_EPSILONS, PAPER_PGD, _perturb
    from cfbook.search.constraints import make_constraints

    x = torch.tensor([[0.1, 0.0], [0.3, 0.5]])
    y = torch.tensor([0, 0])
    c = make_constraints((-1.0, 1.0), None, 2, device="cpu")
    u = torch.tensor([[0.0, 1.0], [0.75, 0.5]])  # uniform draws: the ball's corners and inside
    steps, alpha = PAPER_PGD["pgd_steps"], PAPER_PGD["step_size"]
    start = _perturb(identity_model(), x, y, c, 0.03, 0, alpha, start=u)  # the start alone
    assert torch.allclose(start, x + torch.tensor([[-0.03, 0.03], [0.015, 0.0]]))
    adv = _perturb(identity_model(), x, y, c, 0.03, steps, alpha, start=u)
    assert torch.allclose(adv, x + torch.tensor([-0.03, 0.03]))
    assert len(PAPER_EPSILONS) == 10 and PAPER_EPSILONS[0] == 0 and PAPER_EPSILONS[-1] == 0.1
    assert PAPER_EPSILONS[1] == pytest.approx(0.1 / 9)


def test_a_random_start_is_seeded_and_stays_in_the_ball():
    torch.manual_seed(0)
    model = mlp(4, (8,), 3)
    x = torch.rand(256, 4) * 2 - 1
    y = torch.randint(0, 3, (256,))
    kwargs = {"epsilons": (0.05,), "domain": (-1.0, 1.0), "pgd_steps": 3}
    kwargs |= {"step_size": 0.001, "random_start": True}
    first = attack_accuracy(model, x, y, seed=1, **kwargs)
    assert attack_accuracy(model, x, y, seed=1, **kwargs) == first
    others = [attack_accuracy(model, x, y, seed=s, **kwargs)["pgd"] for s in range(2, 6)]
    assert any(o != first["pgd"] for o in others)  # the start is random
    assert (
        first["fgsm"] == attack_accuracy(model, x, y, **{**kwargs, "random_start": False})["fgsm"]
    )  # FGSM never starts at random


def test_pgd_stays_in_the_epsilon_ball_and_the_domain():
    torch.manual_seed(0)
    model = mlp(4, (8,), 3)
    x = torch.rand(64, 4) * 2 - 1
    y = torch.randint(0, 3, (64,))
    from cfbook.evaluation.protocol import _perturb
    from cfbook.search.constraints import make_constraints

    c = make_constraints((-1.0, 1.0), None, 4, device="cpu")
    adv = _perturb(model, x, y, c, 0.2, 7)
    assert float((adv - x).abs().max()) <= 0.2 + 1e-6
    assert float(adv.abs().max()) <= 1.0
    with torch.no_grad():
        assert nn.functional.cross_entropy(model(adv), y) > nn.functional.cross_entropy(model(x), y)


@pytest.fixture(scope="module")
def digits():
    data = load_mnist(1000, verbose=False)
    models = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        model = mlp()
        optimizer = torch.optim.Adam(model.parameters(), 1e-3)
        for _ in range(5):
            for xb, yb in data.loader(100, seed=seed):
                optimizer.zero_grad()
                nn.functional.cross_entropy(model(xb), yb).backward()
                optimizer.step()
        models.append(model.eval())
    return data, models


def test_gallery_shows_the_same_digits_and_targets_to_every_model(digits):
    data, models = digits
    config = EvaluationConfig()
    first, second = (
        gallery(m, data.x_val, data.y_val, config=config, domain=(-1.0, 1.0)) for m in models
    )
    assert first["label"] == list(range(10))
    for key in ("index", "label", "target", "factual"):
        assert first[key] == second[key]
    assert all(t != label for t, label in zip(first["target"], first["label"], strict=True))
    factuals = decode_images(first["factual"], first["domain"])
    torch.testing.assert_close(factuals, data.x_val[first["index"]], atol=1 / 255, rtol=0)
    # Valid means the model predicts the target for the stored counterfactual.
    cf = decode_images(first["counterfactual"], first["domain"])
    with torch.no_grad():
        predicted = models[0](cf).argmax(1)
    agree = (predicted == torch.tensor(first["target"])).tolist() == first["valid"]
    assert agree and any(first["valid"])


def test_evaluate_on_real_digits_is_consistent_and_serialisable(digits):
    data, models = digits
    config = EvaluationConfig(
        n_factuals=20,
        runs=2,
        lambda_energy=(0.5, 5.0),
        epsilons=(0.03,),
        pgd_steps=3,
        attack_samples=200,
        ip_draws=200,
    )
    result = evaluate(
        models,
        data.x_val,
        data.y_val,
        data.x,
        data.y,
        config=config,
        cf_batchsize=16,
        progress=None,
    )
    assert json.loads(json.dumps(result)) == result
    assert result["n_models"] == 2 and len(result["runs"]) == 2
    for run in result["runs"]:
        for record in run["per_lambda"].values():
            assert record["n"] == 20 and 0 < record["n_valid"] <= 20
            assert record["validity"] == record["n_valid"] / 20
            assert record["cost"] > 0 and record["ip"] > 0
    summary = result["summary"]
    assert summary["validity"]["mean"] == pytest.approx(
        sum(run["pooled"]["validity"] for run in result["runs"]) / 2
    )
    assert summary["validity"]["n"] == 2 and summary["validity"]["se"] is not None
    assert summary["n_searched"] == 2 * 2 * 20
    robust = result["robustness"]
    assert len(robust["per_model"]) == 2
    for m in robust["per_model"]:
        assert m["clean"] > 0.7 and m["fgsm"]["0.03"] <= m["clean"]
        assert m["pgd"]["0.03"] <= m["fgsm"]["0.03"] + 0.02
    assert result["throughput"]["counterfactuals"] == 80
    assert result["throughput"]["per_second"] > 0


def test_one_model_is_searched_in_several_runs_on_fresh_factuals(digits):
    data, models = digits
    config = EvaluationConfig(
        n_factuals=10, runs=3, lambda_energy=(1.0,), epsilons=(), attack_samples=50, ip_draws=50
    )
    result = evaluate(
        models[:1], data.x_val, data.y_val, data.x, data.y, config=config, progress=None
    )
    assert result["n_models"] == 1 and len(result["runs"]) == 3
    costs = [run["pooled"]["cost"] for run in result["runs"]]
    assert len(set(costs)) == 3  # three different draws of factuals
