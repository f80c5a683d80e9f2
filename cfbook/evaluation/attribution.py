"""Sensitivity to protected features by integrated gradients (Captum), standardised as the CT
paper's appendix does (CT.jl: ``paper/sections/other/main_results.qmd``, "Integrated Gradients").

Per round, IG of each sampled test point's true class against one baseline drawn from U(-1, 1)
(the paper's baseline for every data set), averaged over the round's points, then standardised
across features so that models with different output scales compare: ``|g| / (max g - min g)``
for the two-dimensional data, ``(g - min g) / (max g - min g)`` (to [0, 1]) for the others. A
round's sensitivity is the mean standardised attribution of the protected features.

Captum is an optional dependency (``pip install 'cfbook[paper]'``), imported when IG runs.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from cfbook.search.checks import eval_mode


def standardise(g: Tensor, two_dimensional: bool) -> Tensor:
    """Attributions (..., D) rescaled across their features as the paper does."""
    span = (g.amax(-1, keepdim=True) - g.amin(-1, keepdim=True)).clamp_min(1e-12)
    if two_dimensional:
        return g.abs() / span
    return (g - g.amin(-1, keepdim=True)) / span


def integrated_gradients(
    model: nn.Module, x: Tensor, target: Tensor, baseline: Tensor, n_steps: int = 50
) -> Tensor:
    """Captum's integrated gradients of ``model``'s logit of ``target`` for each row of ``x``.

    Captum differentiates one output per row of its expanded batch (rows x steps): a backward
    pass with that many roots, orders of magnitude slower than one. The rows are independent
    (the model is in eval mode), so the gradient of their summed target logits is each row's own
    gradient: Captum is handed that sum, one root, and returns the same attributions."""
    try:
        from captum.attr import IntegratedGradients
    except ImportError as err:
        raise ImportError(
            "integrated gradients need Captum: pip install 'cfbook[paper]' (or captum)"
        ) from err
    steps_target = target.repeat(n_steps)[:, None]  # Captum's expanded batch is step-major

    def summed(z: Tensor) -> Tensor:
        return model(z).gather(1, steps_target[: z.shape[0]]).sum().reshape(1)

    with eval_mode(model):
        ig = IntegratedGradients(summed)
        return ig.attribute(x, baselines=baseline.expand_as(x), n_steps=n_steps).detach()


def protected_sensitivity(
    model: nn.Module,
    x: Tensor,
    y: Tensor,
    protected: Sequence[int],
    *,
    two_dimensional: bool,
    rounds: int = 100,
    samples: int = 2500,
    seed: int = 0,
    n_steps: int = 50,
) -> list[float]:
    """Per round, the standardised IG sensitivity of ``model`` to the ``protected`` columns, on
    ``samples`` test rows drawn with replacement (the paper: 100 rounds of 2,500)."""
    if not protected:
        raise ValueError("protected_sensitivity needs at least one protected column")
    rng = torch.Generator().manual_seed(seed)
    cols = torch.as_tensor(list(protected), device=x.device)
    out = []
    for _ in range(rounds):
        rows = torch.randint(x.shape[0], (samples,), generator=rng).to(x.device)
        baseline = (torch.rand(1, x.shape[1], generator=rng) * 2 - 1).to(x.device, x.dtype)
        g = integrated_gradients(model, x[rows], y[rows], baseline, n_steps).mean(0)
        out.append(float(standardise(g, two_dimensional)[cols].mean()))
    return out
