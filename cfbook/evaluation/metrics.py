"""The measures of the CT paper's evaluation, one implementation each: accuracy, and of a
counterfactual its validity, cost, implausibility (IP) and IP* (MMD^2). Every evaluation in
cfbook, the paper's protocol, the book's and the grid's, uses these."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from cfbook.search.checks import check_labelled, eval_mode
from cfbook.search.logits import class_logits

#: A counterfactual is valid when the model gives its target class at least this probability
#: (CounterfactualExplanations.jl's ``validity``); with two classes that is the argmax.
VALIDITY_THRESHOLD = 0.5


@torch.no_grad()
def predict(model: nn.Module, x: Tensor, batch_size: int = 1024) -> Tensor:
    """Predicted classes in eval mode, batched to bound memory."""
    if x.shape[0] == 0:
        return torch.zeros(0, dtype=torch.long, device=x.device)
    with eval_mode(model):
        return torch.cat(
            [
                class_logits(model(x[s : s + batch_size])).argmax(1)
                for s in range(0, x.shape[0], batch_size)
            ]
        )


def accuracy(model: nn.Module, x: Tensor, y: Tensor, batch_size: int = 1024) -> float:
    """Share of correctly classified samples. ``x`` and ``y`` are checked once, as training
    checks its data (``cfbook.search.checks.check_labelled``)."""
    check_labelled(model, x, y)
    return float((predict(model, x, batch_size) == y.to(x.device)).float().mean())


@torch.no_grad()
def target_probability(model: nn.Module, x: Tensor, target: Tensor) -> Tensor:
    """The probability the model (in eval mode) gives each row's target class."""
    with eval_mode(model):
        probs = class_logits(model(x)).float().softmax(1)
    return probs.gather(1, target[:, None]).squeeze(1)


def is_valid(model: nn.Module, counterfactuals: Tensor, target: Tensor) -> Tensor:
    """Per counterfactual, whether the model gives its target class a probability of at least
    ``VALIDITY_THRESHOLD``: the paper's validity."""
    return target_probability(model, counterfactuals, target) >= VALIDITY_THRESHOLD


def cost(factuals: Tensor, counterfactuals: Tensor) -> Tensor:
    """L1 distance of each counterfactual from its factual (over all of a sample's numbers,
    for flat rows and samples of any shape alike)."""
    return (counterfactuals - factuals).abs().flatten(1).sum(1)


def implausibility(counterfactuals: Tensor, reference: Tensor) -> float:
    """IP: the mean L1 distance between the counterfactuals and samples of their target class
    (``reference``), over every pair."""
    if counterfactuals.shape[0] == 0 or reference.shape[0] == 0:
        raise ValueError("implausibility needs at least one counterfactual and one reference")
    return float(torch.cdist(counterfactuals.flatten(1), reference.flatten(1), p=1).mean())


def mmd2(a: Tensor, b: Tensor, bandwidth: float | None = None) -> float:
    """Unbiased squared MMD between two samples with a Gaussian kernel of length scale
    ``bandwidth`` (None: the median heuristic). It can dip below 0 by chance."""
    return mmd2_at(a, b, (bandwidth,))[0]


def mmd2_at(a: Tensor, b: Tensor, bandwidths: Sequence[float | None]) -> list[float]:
    """``mmd2`` at each of ``bandwidths`` from one distance matrix: the pairwise distances are
    most of the work, and the protocol measures IP* at two length scales."""
    if a.shape[0] < 2 or b.shape[0] < 2:
        raise ValueError("mmd2 needs at least two samples on each side")
    both = torch.cat([a, b]).flatten(1)  # samples of any shape as flat rows
    sq = torch.cdist(both, both).square()
    n, m = a.shape[0], b.shape[0]
    out = []
    for bandwidth in bandwidths:
        if bandwidth is None:
            bandwidth = float(sq[sq > 0].median().sqrt()) if bool((sq > 0).any()) else 1.0
        k = torch.exp(-sq / (2 * bandwidth**2))
        kaa, kbb, kab = k[:n, :n], k[n:, n:], k[:n, n:]
        term_a = (kaa.sum() - kaa.diagonal().sum()) / (n * (n - 1))
        term_b = (kbb.sum() - kbb.diagonal().sum()) / (m * (m - 1))
        out.append(float(term_a + term_b - 2 * kab.mean()))
    return out


def ip_star(counterfactuals: Tensor, reference: Tensor, length_scale: float) -> float:
    """IP*: the unbiased MMD^2 between the counterfactuals and samples of their target class,
    clamped at 0 as CT.jl clamps it."""
    return ip_stars(counterfactuals, reference, (length_scale,))[0]


def ip_stars(
    counterfactuals: Tensor, reference: Tensor, length_scales: Sequence[float]
) -> list[float]:
    """``ip_star`` at each of ``length_scales``, from one distance matrix."""
    return [max(v, 0.0) for v in mmd2_at(counterfactuals, reference, length_scales)]
