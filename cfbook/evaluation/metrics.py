"""Evaluation metrics: accuracy, and the counterfactual quality measures of the CT paper."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from cfbook.search.generators import eval_mode


@torch.no_grad()
def predict(model: nn.Module, x: Tensor, batch_size: int = 1024) -> Tensor:
    """Predicted classes in eval mode, batched to bound memory."""
    if x.shape[0] == 0:
        return torch.zeros(0, dtype=torch.long, device=x.device)
    with eval_mode(model):
        return torch.cat(
            [model(x[s : s + batch_size]).argmax(1) for s in range(0, x.shape[0], batch_size)]
        )


def accuracy(model: nn.Module, x: Tensor, y: Tensor, batch_size: int = 1024) -> float:
    """Share of correctly classified samples (one host sync, at the end)."""
    if x.shape[0] == 0:
        raise ValueError("accuracy needs at least one sample")
    return float((predict(model, x, batch_size) == y.to(x.device)).float().mean())


def validity(model: nn.Module, counterfactuals: Tensor, target: Tensor) -> float:
    """Share of counterfactuals the model assigns to their target class (the paper's validity)."""
    return float((predict(model, counterfactuals) == target).float().mean())


def cost(factuals: Tensor, counterfactuals: Tensor) -> Tensor:
    """L1 distance of each counterfactual from its factual."""
    return (counterfactuals - factuals).abs().sum(1)


def implausibility(
    counterfactuals: Tensor,
    target: Tensor,
    x: Tensor,
    y: Tensor,
    n_draws: int = 1000,
    generator: torch.Generator | None = None,
) -> Tensor:
    """IP: per counterfactual, mean L1 distance to up to ``n_draws`` samples of its target class."""
    out = torch.empty(counterfactuals.shape[0], device=counterfactuals.device)
    for cls in target.unique().tolist():
        members = x[y == cls]
        if members.shape[0] == 0:
            raise ValueError(f"no samples of target class {cls} to measure implausibility against")
        where = generator.device if generator is not None else members.device
        pick = torch.randperm(members.shape[0], generator=generator, device=where)[:n_draws]
        rows = target == cls
        out[rows] = torch.cdist(counterfactuals[rows], members[pick.to(x.device)], p=1).mean(1)
    return out


def mmd2(a: Tensor, b: Tensor, bandwidth: float | None = None) -> float:
    """IP*: unbiased squared MMD between two samples with a Gaussian kernel (median heuristic)."""
    if a.shape[0] < 2 or b.shape[0] < 2:
        raise ValueError("mmd2 needs at least two samples on each side")
    both = torch.cat([a, b])
    sq = torch.cdist(both, both).square()
    if bandwidth is None:
        bandwidth = float(sq[sq > 0].median().sqrt()) if bool((sq > 0).any()) else 1.0
    k = torch.exp(-sq / (2 * bandwidth**2))
    n, m = a.shape[0], b.shape[0]
    kaa, kbb, kab = k[:n, :n], k[n:, n:], k[:n, n:]
    term_a = (kaa.sum() - kaa.diagonal().sum()) / (n * (n - 1))
    term_b = (kbb.sum() - kbb.diagonal().sum()) / (m * (m - 1))
    return float(term_a + term_b - 2 * kab.mean())
