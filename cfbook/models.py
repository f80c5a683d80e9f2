"""Classifiers that take flat (N, 784) MNIST vectors, the layout counterfactual search works in."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

__all__ = [
    "IMAGE_SHAPE",
    "MODELS",
    "N_FEATURES",
    "FlatImageClassifier",
    "build_model",
    "count_parameters",
    "glorot_linear",
    "mlp",
    "resnet18_mnist",
]

IMAGE_SHAPE = (1, 28, 28)
N_FEATURES = 28 * 28


class FlatImageClassifier(nn.Module):
    """Reshape flat vectors to images before a convolutional net, rejecting wrong widths early.

    Counterfactual generators perturb flat feature vectors; this wrapper lets them treat a CNN like
    any other classifier, and turns a shape slip into a readable error, not a deep conv failure.
    """

    def __init__(self, net: nn.Module, image_shape: tuple[int, int, int] = IMAGE_SHAPE) -> None:
        super().__init__()
        self.image_shape = image_shape
        self.n_features = image_shape[0] * image_shape[1] * image_shape[2]
        self.unflatten = nn.Unflatten(1, image_shape)
        self.net = net

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 2 or x.shape[1] != self.n_features:
            raise ValueError(
                f"expected flat input of shape (N, {self.n_features}), got {tuple(x.shape)}; "
                f"flatten images with x.reshape(len(x), -1)"
            )
        return self.net(self.unflatten(x))


def resnet18_mnist(num_classes: int = 10) -> nn.Module:
    """torchvision ResNet-18 (random init, never downloaded weights) with a 1-channel stem."""
    from torchvision.models import resnet18  # lazily: slow to import

    net = resnet18(weights=None, num_classes=num_classes)
    stem = net.conv1
    net.conv1 = nn.Conv2d(
        1,
        stem.out_channels,
        kernel_size=stem.kernel_size,
        stride=stem.stride,
        padding=stem.padding,
        bias=stem.bias is not None,
    )
    return FlatImageClassifier(net)


def mlp(
    in_features: int = N_FEATURES, hidden: Sequence[int] = (32,), num_classes: int = 10
) -> nn.Module:
    """Linear-ReLU stack initialised like Flux's ``Dense`` (the paper's MNIST model is
    ``mlp()``: 784-32-10); small enough for quick CPU experiments and tests."""
    widths = [in_features, *hidden, num_classes]
    names = ["in_features", *["hidden"] * len(hidden), "num_classes"]
    for name, width in zip(names, widths, strict=True):
        if isinstance(width, bool) or not isinstance(width, int):
            raise TypeError(f"{name} must hold positive integers, got {type(width).__name__}")
        if width < 1:
            raise ValueError(f"{name} must hold positive integers, got {width!r}")
    layers: list[nn.Module] = []
    for i, (w_in, w_out) in enumerate(zip(widths[:-1], widths[1:], strict=True)):
        if i:
            layers.append(nn.ReLU())
        layers.append(glorot_linear(w_in, w_out))
    return nn.Sequential(*layers)


def glorot_linear(in_features: int, out_features: int) -> nn.Linear:
    """``nn.Linear`` initialised like Flux's ``Dense`` (Glorot-uniform weights, zero bias).

    PyTorch's default (Kaiming-uniform with a = sqrt(5)) gives smaller logits early in training,
    and the counterfactual search then reaches its threshold far less often than in CT.jl.
    """
    layer = nn.Linear(in_features, out_features)
    nn.init.xavier_uniform_(layer.weight)
    nn.init.zeros_(layer.bias)
    return layer


MODELS: dict[str, Callable[[], nn.Module]] = {"resnet18": resnet18_mnist, "mlp": mlp}


def build_model(name: str) -> nn.Module:
    """A freshly initialised model by name (seed first for identical weights)."""
    try:
        return MODELS[name]()
    except KeyError:
        raise ValueError(f"unknown model {name!r}; valid models: {', '.join(MODELS)}") from None


def count_parameters(model: nn.Module) -> int:
    """Number of scalar parameters (trainable or not), e.g. to report model size in the book."""
    return sum(p.numel() for p in model.parameters())
