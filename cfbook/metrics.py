"""Evaluation metrics: accuracy, and the counterfactual quality measures of the CT paper."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from cfbook.generators import eval_mode


@torch.no_grad()
def predict(model: nn.Module, x: Tensor, batch_size: int = 1024) -> Tensor:
    """Predicted classes in eval mode, batched to bound memory."""
    with eval_mode(model):
        return torch.cat(
            [model(x[s : s + batch_size]).argmax(1) for s in range(0, x.shape[0], batch_size)]
        ) if x.shape[0] else torch.zeros(0, dtype=torch.long, device=x.device)


def accuracy(model: nn.Module, x: Tensor, y: Tensor, batch_size: int = 1024) -> float:
    """Share of correctly classified samples (one host sync, at the end)."""
    if x.shape[0] == 0:
        raise ValueError("accuracy needs at least one sample")
    return float((predict(model, x, batch_size) == y.to(x.device)).float().mean())
