"""The book's and the paper's MNIST classifiers: the ResNet-18 takes images ``(N, 1, 28, 28)``,
the MLP flat rows ``(N, 784)`` (``INPUT_SHAPES``); the search and training take either as is."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from torch import nn

__all__ = [
    "IMAGE_SHAPE",
    "MODELS",
    "N_FEATURES",
    "INPUT_SHAPES",
    "build_model",
    "count_parameters",
    "glorot_linear",
    "mlp",
    "resnet18_mnist",
]

IMAGE_SHAPE = (1, 28, 28)
N_FEATURES = 28 * 28


def resnet18_mnist(num_classes: int = 10) -> nn.Module:
    """torchvision ResNet-18 (random init, never downloaded weights) with a 1-channel stem: it
    takes MNIST images as they are, ``(N, 1, 28, 28)``, and so do the search and training."""
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
    return net


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
#: One sample's shape as each model takes it: images for the ResNet, flat rows for the MLP.
INPUT_SHAPES: dict[str, tuple[int, ...]] = {"resnet18": IMAGE_SHAPE, "mlp": (N_FEATURES,)}


def build_model(name: str) -> nn.Module:
    """A freshly initialised model by name (seed first for identical weights)."""
    try:
        return MODELS[name]()
    except KeyError:
        raise ValueError(f"unknown model {name!r}; valid models: {', '.join(MODELS)}") from None


def count_parameters(model: nn.Module) -> int:
    """Number of scalar parameters (trainable or not), e.g. to report model size in the book."""
    return sum(p.numel() for p in model.parameters())
