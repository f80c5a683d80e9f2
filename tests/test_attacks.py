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


class _Peak(nn.Module):
    """One feature; the cross-entropy of label 0 is largest at x = 0.3, so sign steps that climb
    it overshoot and come back: where PGD ends tells its step length."""

    def forward(self, x):
        return torch.cat([(x - 0.3) ** 2, torch.zeros_like(x)], 1)


@pytest.mark.parametrize(
    ("steps", "step_size", "end"),
    [
        (5, None, 0.5),  # 2.5 eps / 5 = 0.5: 0.5, 0, 0.5, 0, 0.5
        (2, None, -0.25),  # 2.5 eps / 2 = 1.25: 1 (the ball's edge), then 1 - 1.25
    ],
)
def test_pgd_steps_are_2_5_eps_over_steps_by_default(steps, step_size, end):
    c = make_constraints(None, None, 1, device="cpu")
    x, y = torch.zeros(1, 1), torch.tensor([0])
    adv = perturb(_Peak(), x, y, c, 1.0, steps, step_size)
    assert adv.item() == pytest.approx(end)


def test_a_given_step_size_is_used_and_a_flat_gradient_does_not_move():
    c = make_constraints(None, None, 1, device="cpu")
    y = torch.tensor([0])
    # Steps of 0.2 from 0: 0.2, 0.4, 0.2 (the peak at 0.3 lies between).
    assert perturb(_Peak(), torch.zeros(1, 1), y, c, 1.0, 3, 0.2).item() == pytest.approx(0.2)
    at_peak = torch.full((1, 1), 0.3)  # zero gradient: sign 0, no step
    assert perturb(_Peak(), at_peak, y, c, 1.0, 3, 0.2).item() == pytest.approx(0.3)


def _brute_force_attack_accuracy(model, x, y, eps, steps, domain):
    """Each row attacked on its own (no batches), with deterministic starts."""
    c = make_constraints(domain, None, x.shape[1], device="cpu", dtype=x.dtype)
    correct = 0
    for i in range(x.shape[0]):
        adv = perturb(model, x[i : i + 1], y[i : i + 1], c, eps, steps)
        correct += int(model(adv).argmax(1).item() == y[i].item())
    return correct / x.shape[0]


def test_attack_accuracy_equals_the_row_by_row_attack_in_batches_and_in_float64():
    torch.manual_seed(0)
    model = mlp(3, (8,), 2).double()
    x = torch.rand(37, 3, dtype=torch.float64) * 2 - 1  # 37 rows, 3 features, batches of 5
    y = (x[:, 0] + x[:, 1] > 0).long()
    domain = [(-1.0, 1.0), (-1.0, 1.0), (-0.1, 0.1)]  # the third feature's bounds bind
    out = attack_accuracy(
        model, x, y, epsilons=(0.0, 0.3), pgd_steps=4, domain=domain, batch_size=5
    )
    for k, eps in enumerate((0.0, 0.3)):
        assert out["fgsm"][k] == _brute_force_attack_accuracy(model, x, y, eps, 1, domain)
        assert out["pgd"][k] == _brute_force_attack_accuracy(model, x, y, eps, 4, domain)
    assert out["fgsm"][1] < out["clean"]  # the attack bites at eps 0.3


def test_random_starts_are_drawn_from_the_seed_alone():
    # No PGD steps: each adversarial point is its random start, so the accuracy is the share of
    # starts that stay on the right side (a margin x0 - x1 of 0.05 and eps 0.1: about 28 % of
    # the starts cross). The same seed must give the same starts, other seeds others; the
    # default is off.
    model = identity_model()
    x = torch.tensor([[0.0, -0.05]]).repeat(400, 1)
    y = torch.zeros(400, dtype=torch.long)
    kwargs = {"epsilons": (0.1,), "domain": None, "pgd_steps": 0, "step_size": 0.01}
    kwargs["random_start"] = True
    torch.manual_seed(0)
    first = attack_accuracy(model, x, y, **kwargs)["pgd"]
    torch.manual_seed(1)  # the global RNG plays no part
    assert attack_accuracy(model, x, y, **kwargs)["pgd"] == first
    assert attack_accuracy(model, x, y, seed=0, **kwargs)["pgd"] == first  # seed 0 by default
    assert attack_accuracy(model, x, y, seed=5, **kwargs)["pgd"] != first
    assert 0.6 < first[0] < 0.9
    plain = {k: v for k, v in kwargs.items() if k != "random_start"}
    assert attack_accuracy(model, x, y, **plain)["pgd"] == [1.0]  # no random start by default


def test_an_epsilon_is_found_to_within_a_millionth():
    out = {"epsilons": [0.0, 0.1 / 9], "fgsm": [1.0, 0.5]}
    assert accuracy_at(out, "fgsm", 0.0111111) == 0.5


def test_at_eps_0_the_attack_is_the_clamped_input_and_the_random_stream_goes_on():
    # eps 0 projects every step back on x: the attack is x clamped to the domain, found
    # without a gradient, and its random starts are still drawn, so the next epsilon's starts
    # are those of a grid whose first epsilon is tiny but not 0.
    calls = []
    model = identity_model()
    model.register_forward_hook(lambda *args: calls.append(1))
    c = make_constraints((-1.0, 0.5), None, 2, device="cpu")
    x = torch.tensor([[0.2, 0.7], [-0.3, 0.1]])  # the first row outside the domain
    adv = perturb(model, x, torch.tensor([0, 0]), c, 0.0, 40, 0.01, start=torch.rand(2, 2))
    assert torch.equal(adv, torch.tensor([[0.2, 0.5], [-0.3, 0.1]])) and not calls
    x = torch.tensor([[0.0, -0.05]]).repeat(400, 1)
    y = torch.zeros(400, dtype=torch.long)
    kwargs = {"domain": None, "pgd_steps": 2, "step_size": 0.01, "random_start": True}
    zero = attack_accuracy(model, x, y, epsilons=(0.0, 0.1), **kwargs)
    tiny = attack_accuracy(model, x, y, epsilons=(1e-9, 0.1), **kwargs)
    assert zero["pgd"] == tiny["pgd"] and zero["fgsm"] == tiny["fgsm"]
    assert zero["pgd"][0] == 1.0 and 0.6 < zero["pgd"][1] < 0.95
