"""Accuracy under attack: L-inf FGSM and PGD at each epsilon, as the paper measures robustness.

A result holds the epsilons as numbers and one accuracy per epsilon and attack, in the same
order (``accuracy_at`` looks one up)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from cfbook.evaluation.metrics import accuracy
from cfbook.search.checks import check_labelled, eval_mode
from cfbook.search.constraints import Constraints, Domain, make_constraints
from cfbook.search.logits import class_logits

ATTACKS = ("fgsm", "pgd")
# The paper's PGD (CT.jl's ``pgd``): 40 sign steps of 0.01 from a uniform random start in the
# eps ball, each projected on the ball; its eps grid is range(0, 0.1, length=10).
PAPER_PGD = {"pgd_steps": 40, "step_size": 0.01, "random_start": True}
PAPER_EPSILONS = tuple(k / 90 for k in range(10))


def perturb(
    model: nn.Module,
    x: Tensor,
    y: Tensor,
    c: Constraints,
    eps: float,
    steps: int,
    step_size: float | None = None,
    start: Tensor | None = None,
) -> Tensor:
    """FGSM (``steps`` = 1, one full-size step) or PGD: sign steps of ``step_size`` (default
    2.5 eps / steps), each projected on the eps ball and the domain, from ``x`` itself or, with
    ``start`` (uniform draws in [0, 1), one per number), from a random point of the ball."""
    if eps == 0:
        # Every step ends on the ball's projection, which for eps 0 is x itself: no gradient
        # needed (the paper's grid starts at eps 0).
        return c.clamp(x).detach()
    alpha = eps if steps == 1 else 2.5 * eps / steps if step_size is None else step_size
    adv = x if start is None else c.clamp(x + (2 * start - 1) * eps)
    for _ in range(steps):
        adv = adv.detach().requires_grad_(True)
        (grad,) = torch.autograd.grad(nn.functional.cross_entropy(class_logits(model(adv)), y), adv)
        adv = torch.minimum(torch.maximum(adv.detach() + alpha * grad.sign(), x - eps), x + eps)
        adv = c.clamp(adv)
    return adv.detach()


def attack_accuracy(
    model: nn.Module,
    x: Tensor,
    y: Tensor,
    *,
    pgd_steps: int,
    epsilons: Sequence[float] = PAPER_EPSILONS,
    domain: Domain = None,
    batch_size: int = 512,
    step_size: float | None = None,
    random_start: bool = False,
    seed: int = 0,
) -> dict[str, Any]:
    """Accuracy on clean inputs and under L-inf FGSM and PGD at each epsilon, in eval mode:
    ``{"clean": a, "epsilons": [...], "fgsm": [...], "pgd": [...]}``. PGD takes ``pgd_steps``
    sign steps of ``step_size`` (default 2.5 eps / steps), from the inputs or, with
    ``random_start``, from seeded uniform points of the eps ball; ``**PAPER_PGD`` gives the
    paper's attack, ``epsilons`` (default ``PAPER_EPSILONS``) its grid. ``domain=None``: no
    bounds, as everywhere in cfbook. ``x`` and ``y`` are checked once, as training checks its
    data (``cfbook.search.checks.check_labelled``)."""
    check_labelled(model, x, y)
    c = make_constraints(domain, None, x.shape[1:], device=x.device, dtype=x.dtype)
    out: dict[str, Any] = {"clean": accuracy(model, x, y), "epsilons": [float(e) for e in epsilons]}
    out.update({name: [] for name in ATTACKS})
    rng = torch.Generator(device=x.device).manual_seed(seed)
    with eval_mode(model):
        for eps in epsilons:
            for name, steps in (("fgsm", 1), ("pgd", pgd_steps)):
                correct = torch.zeros((), device=x.device)
                for s in range(0, x.shape[0], batch_size):
                    xb, yb = x[s : s + batch_size], y[s : s + batch_size]
                    pgd = name == "pgd"
                    start = (
                        torch.rand(xb.shape, generator=rng, device=x.device, dtype=x.dtype)
                        if pgd and random_start
                        else None
                    )
                    adv = perturb(model, xb, yb, c, eps, steps, step_size if pgd else None, start)
                    with torch.no_grad():
                        correct += (class_logits(model(adv)).argmax(1) == yb).sum()
                out[name].append(float(correct) / x.shape[0])
    return out


def accuracy_at(result: Mapping[str, Any], attack: str, eps: float) -> Any:
    """The entry of ``result[attack]`` (one per epsilon) at the epsilon closest to ``eps``; an
    error if none is within 1e-6."""
    epsilons = result["epsilons"]
    i = min(range(len(epsilons)), key=lambda k: abs(epsilons[k] - eps))
    if not math.isclose(epsilons[i], eps, rel_tol=0, abs_tol=1e-6):
        raise KeyError(f"no attack at eps {eps:g}; measured at {epsilons}")
    return result[attack][i]
