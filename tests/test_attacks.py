"""Accuracy under attack (``cfbook.evaluation.attacks``): FGSM and PGD by hand, the paper's
PGD, seeded random starts, the eps ball and the domain."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from cfbook.evaluation.attacks import (
    PAPER_EPSILONS,
    PAPER_PGD,
    accuracy_at,
    attack_accuracy,
    perturb,
)
from cfbook.models import mlp
from cfbook.search.constraints import make_constraints


def identity_model() -> nn.Module:
    model = nn.Linear(2, 2)
    with torch.no_grad():
        model.weight.copy_(torch.eye(2))
        model.bias.zero_()
    return model


def test_fgsm_and_pgd_accuracy_by_hand():
    # Identity model, label 0: the margin x0 - x1 shrinks by 2 eps under the optimal L-inf attack,
    # which for a linear model FGSM and PGD both find.
    x = torch.tensor([[0.1, 0.0], [0.3, 0.0]])
    y = torch.tensor([0, 0])
    out = attack_accuracy(
        identity_model(), x, y, epsilons=(0.03, 0.1, 0.2), pgd_steps=5, domain=(-1.0, 1.0)
    )
    assert out["clean"] == 1.0 and out["epsilons"] == [0.03, 0.1, 0.2]
    assert out["fgsm"] == [1.0, 0.5, 0.0] and out["pgd"] == [1.0, 0.5, 0.0]
    assert accuracy_at(out, "fgsm", 0.1) == 0.5 and accuracy_at(out, "pgd", 0.2) == 0.0
    with pytest.raises(KeyError, match="no attack at eps 0.05"):
        accuracy_at(out, "fgsm", 0.05)


def test_the_papers_pgd_starts_in_the_ball_and_ends_at_the_optimal_corner():
    """CT.jl's PGD: a uniform start in the eps ball, then 40 sign steps of 0.01, each projected.
    On the identity model (label 0) every step lowers x0 and raises x1, so after 40 steps of
    0.01 any start ends at x + eps (-1, +1) when eps <= 0.2."""
    x = torch.tensor([[0.1, 0.0], [0.3, 0.5]])
    y = torch.tensor([0, 0])
    c = make_constraints((-1.0, 1.0), None, 2, device="cpu")
    u = torch.tensor([[0.0, 1.0], [0.75, 0.5]])  # uniform draws: the ball's corners and inside
    steps, alpha = PAPER_PGD["pgd_steps"], PAPER_PGD["step_size"]
    start = perturb(identity_model(), x, y, c, 0.03, 0, alpha, start=u)  # the start alone
    assert torch.allclose(start, x + torch.tensor([[-0.03, 0.03], [0.015, 0.0]]))
    adv = perturb(identity_model(), x, y, c, 0.03, steps, alpha, start=u)
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
    c = make_constraints((-1.0, 1.0), None, 4, device="cpu")
    adv = perturb(model, x, y, c, 0.2, 7)
    assert float((adv - x).abs().max()) <= 0.2 + 1e-6
    assert float(adv.abs().max()) <= 1.0
    with torch.no_grad():
        assert nn.functional.cross_entropy(model(adv), y) > nn.functional.cross_entropy(model(x), y)
