"""Data, partially trained models and factual/target sets, built once per run.

A freshly initialised network is a poor stand-in for training-time search behaviour, so the
models get a few epochs of plain training first; every benchmark then searches the same
factuals and targets with the same weights.
"""

from __future__ import annotations

import copy

import torch
from torch import Tensor, nn

from benchmarks.common import Context
from cfbook.data import MNISTData, load_mnist
from cfbook.evaluation.metrics import accuracy, predict
from cfbook.models import IMAGE_SHAPE, mlp, resnet18_mnist

# The benchmarks search and train on flat MNIST rows: the ResNet-18 reads them behind a reshape
# (which costs nothing measurable: the images benchmark).
BUILDERS = {
    "mlp": mlp,
    "resnet18": lambda: nn.Sequential(nn.Unflatten(1, IMAGE_SHAPE), resnet18_mnist()),
}
DOMAIN = (-1.0, 1.0)  # MNIST scaled to [-1, 1]
SEED = 0


def mnist(ctx: Context) -> MNISTData:
    """The benchmark's MNIST subset, on the CPU (callers move what they use)."""
    if "mnist" not in ctx.cache:
        ctx.cache["mnist"] = load_mnist(ctx.sizes.n_data, device="cpu", verbose=False)
    return ctx.cache["mnist"]


def fresh_model(name: str, device: torch.device) -> nn.Module:
    """An untrained model with seeded weights (same weights on every device)."""
    torch.manual_seed(SEED)
    return BUILDERS[name]().to(device)


def _pretrain(ctx: Context, name: str) -> dict[str, Tensor]:
    samples, epochs = ctx.sizes.pretrain[name]
    data = mnist(ctx)
    model = fresh_model(name, ctx.device)
    x, y = data.x[:samples].to(ctx.device), data.y[:samples].to(ctx.device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    generator = torch.Generator().manual_seed(SEED)
    model.train()
    for _ in range(epochs):
        order = torch.randperm(samples, generator=generator).to(ctx.device)
        for start in range(0, samples, 128):
            batch = order[start : start + 128]
            optimizer.zero_grad(set_to_none=True)
            nn.functional.cross_entropy(model(x[batch]), y[batch]).backward()
            optimizer.step()
    acc = accuracy(model, data.x_val.to(ctx.device), data.y_val.to(ctx.device))
    ctx.log(f"pretrained {name}: {epochs} epochs on {samples} samples, held-out acc {acc:.3f}")
    ctx.cache[f"accuracy/{name}"] = acc
    return {k: v.detach().cpu() for k, v in model.state_dict().items()}


def trained_model(ctx: Context, name: str, device: torch.device | None = None) -> nn.Module:
    """A private copy of the partially trained ``name`` model on ``device``, in eval mode.

    Weights are trained once per run (on the run's device) and shared by every copy, so a CPU
    and a GPU measurement search with identical models.
    """
    key = f"weights/{name}"
    if key not in ctx.cache:
        ctx.cache[key] = _pretrain(ctx, name)
    model = fresh_model(name, device or ctx.device)
    model.load_state_dict(copy.deepcopy(ctx.cache[key]))
    return model.eval()


def factuals(
    ctx: Context, model: nn.Module, n: int, device: torch.device | None = None
) -> tuple[Tensor, Tensor]:
    """``n`` seeded training samples and targets drawn uniformly among the non-predicted classes.

    The draw depends only on ``n`` and the seed, so a smaller set is a prefix of a larger one.
    """
    device = device or ctx.device
    data = mnist(ctx)
    if n > data.x.shape[0]:
        raise ValueError(f"n={n} factuals requested but only {data.x.shape[0]} samples loaded")
    generator = torch.Generator().manual_seed(SEED)
    idx = torch.randperm(data.x.shape[0], generator=generator)[:n]
    shift = torch.randint(1, 10, (data.x.shape[0],), generator=generator)[:n]
    x = data.x[idx].to(device)
    target = (predict(model, x) + shift.to(device)) % 10
    return x, target
