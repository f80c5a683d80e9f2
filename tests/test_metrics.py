import pytest
import torch
from torch import nn

from cfbook.evaluation.metrics import accuracy, cost, implausibility, mmd2, predict, validity


def linear_model() -> nn.Module:
    model = nn.Linear(2, 2, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.eye(2))  # class = index of the larger feature
    return model


def test_predict_accuracy_and_validity():
    model = linear_model()
    x = torch.tensor([[1.0, 0.0], [0.0, 1.0], [2.0, 1.0], [0.0, 3.0]])
    assert predict(model, x, batch_size=3).tolist() == [0, 1, 0, 1]
    assert accuracy(model, x, torch.tensor([0, 1, 1, 1])) == pytest.approx(0.75)
    assert validity(model, x, torch.tensor([1, 1, 1, 1])) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="at least one sample"):
        accuracy(model, x[:0], torch.tensor([], dtype=torch.long))


def test_cost_and_implausibility():
    x = torch.zeros(2, 3)
    cf = torch.tensor([[1.0, -1.0, 0.0], [0.0, 0.0, 2.0]])
    assert cost(x, cf).tolist() == [2.0, 2.0]
    data = torch.tensor([[1.0, -1.0, 0.0], [1.0, -1.0, 2.0], [5.0, 5.0, 5.0]])
    labels = torch.tensor([0, 0, 1])
    ip = implausibility(cf, torch.tensor([0, 1]), data, labels)
    assert ip.tolist() == pytest.approx([1.0, 13.0])
    with pytest.raises(ValueError, match="target class 2"):
        implausibility(cf, torch.tensor([2, 2]), data, labels)


def test_mmd2_is_small_for_the_same_distribution_and_large_otherwise():
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(200, 4, generator=g), torch.randn(200, 4, generator=g)
    far = torch.randn(200, 4, generator=g) + 3.0
    assert abs(mmd2(a, b)) < 0.02
    assert mmd2(a, far) > 0.3
    with pytest.raises(ValueError, match="two samples"):
        mmd2(a[:1], b)
