"""Tests for cfbook.models: the ResNet-18 of MNIST images and the MLP of flat rows."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torchvision.models import resnet18

from cfbook.data import MNISTData
from cfbook.models import INPUT_SHAPES, count_parameters, mlp, resnet18_mnist

# torchvision's ResNet-18 with a 10-class head has 11,181,642 parameters; the 1-channel stem drops
# 2 of the 3 input channels of the 64 7x7 conv1 filters.
RESNET18_MNIST_PARAMETERS = 11_181_642 - 2 * 64 * 7 * 7


@pytest.fixture
def resnet() -> nn.Module:
    # A fresh model per test: a shared one carries batch-norm statistics from test to test, and
    # mutmut would credit its construction to the first test alone.
    torch.manual_seed(0)
    return resnet18_mnist()


def test_resnet_output_shape_in_both_modes(resnet: nn.Module) -> None:
    x = torch.rand(2, 1, 28, 28) * 2 - 1
    resnet.train()
    assert resnet(x).shape == (2, 10)
    resnet.eval()
    with torch.no_grad():
        logits = resnet(x)
    assert logits.shape == (2, 10) and torch.isfinite(logits).all()


def test_resnet_parameter_count_and_stem(resnet: nn.Module) -> None:
    assert count_parameters(resnet) == RESNET18_MNIST_PARAMETERS
    assert count_parameters(resnet18(weights=None, num_classes=10)) - 2 * 64 * 49 == (
        count_parameters(resnet)
    )
    stem = resnet.conv1
    assert stem.in_channels == 1 and stem.out_channels == 64
    assert (stem.kernel_size, stem.stride, stem.padding) == ((7, 7), (2, 2), (3, 3))
    assert stem.bias is None


def test_resnet_num_classes() -> None:
    model = resnet18_mnist(num_classes=3).eval()
    with torch.no_grad():
        assert model(torch.zeros(2, 1, 28, 28)).shape == (2, 3)


def test_resnet_gradients_reach_the_input(resnet: nn.Module) -> None:
    # Not zeros: in eval mode a fresh model's batch norms map a zero image to zero, where every
    # ReLU's gradient is zero (a shared model passed only once another test had trained its
    # running statistics).
    resnet.eval()
    g = torch.Generator().manual_seed(0)
    x = (torch.rand(2, 1, 28, 28, generator=g) * 2 - 1).requires_grad_()
    resnet(x)[:, 3].sum().backward()
    assert x.grad is not None and x.grad.shape == (2, 1, 28, 28) and x.grad.abs().sum() > 0


def test_the_data_come_in_the_shape_each_model_takes() -> None:
    x = torch.arange(2 * 784.0).reshape(2, 784)
    data = MNISTData(x, torch.zeros(2), x[:1], torch.zeros(1), "test", "test")
    images = data.for_model("resnet18")
    assert images.x.shape == (2, 1, 28, 28) and images.x_val.shape == (1, 1, 28, 28)
    assert torch.equal(images.x.flatten(1), x)  # row by row, pixel by pixel
    assert data.for_model("mlp").x.shape == (2, 784)
    assert INPUT_SHAPES == {"resnet18": (1, 28, 28), "mlp": (784,)}


def test_mlp_structure_and_output() -> None:
    model = mlp()
    kinds = [type(layer) for layer in model]
    assert kinds == [nn.Linear, nn.ReLU, nn.Linear]
    assert count_parameters(model) == 784 * 32 + 32 + 32 * 10 + 10
    assert model(torch.zeros(5, 784)).shape == (5, 10)
    deep = mlp(in_features=4, hidden=(8, 6), num_classes=3)
    assert [type(layer) for layer in deep] == [nn.Linear, nn.ReLU, nn.Linear, nn.ReLU, nn.Linear]
    assert deep(torch.zeros(2, 4)).shape == (2, 3)
    assert [type(layer) for layer in mlp(hidden=())] == [nn.Linear]
    assert mlp(in_features=1, hidden=(1,), num_classes=1)(torch.zeros(2, 1)).shape == (2, 1)


@pytest.mark.parametrize(
    ("kwargs", "name"), [({"hidden": (0,)}, "hidden"), ({"num_classes": 0}, "num_classes")]
)
def test_mlp_rejects_bad_widths(kwargs: dict, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        mlp(**kwargs)


def test_mlp_rejects_wrongly_typed_widths() -> None:
    with pytest.raises(TypeError, match="in_features must hold positive integers, got float"):
        mlp(in_features=784.0)


def test_count_parameters_counts_frozen_ones_too() -> None:
    layer = nn.Linear(3, 2)
    layer.bias.requires_grad_(False)
    assert count_parameters(layer) == 8


def test_mlp_is_initialised_like_flux_dense() -> None:
    torch.manual_seed(0)
    first, _, last = mlp()
    for layer, (fan_in, fan_out) in ((first, (784, 32)), (last, (32, 10))):
        bound = (6 / (fan_in + fan_out)) ** 0.5  # Glorot-uniform
        weight = layer.weight.detach()
        assert 0.95 * bound < float(weight.abs().max()) <= bound
        assert float(weight.std()) == pytest.approx(bound / 3**0.5, rel=0.05)
        assert torch.equal(layer.bias, torch.zeros(fan_out))
