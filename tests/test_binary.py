"""A binary model with one output (a logit, as with ``BCEWithLogitsLoss``) is two classes with
the logits ``(-z/2, z/2)``: searched, trained and evaluated exactly as the two-output model with
those weights (to float rounding: the two matrix products sum in their own order)."""

import warnings

import pytest
import torch
from torch import nn

from cfbook import (
    DeviceLoader,
    FullObjective,
    NativeGenerator,
    ReferenceGenerator,
    accuracy,
    counterfactual_training,
    predict,
)
from cfbook.evaluation.metrics import target_probability
from cfbook.search.logits import class_logits


def one_output() -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    with torch.no_grad():
        model[2].weight.mul_(4.0)
    return model


def two_outputs(model: nn.Module) -> nn.Module:
    """The two-output model whose logits are (-z/2, z/2) of ``model``'s z, exactly."""
    twin = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
    with torch.no_grad():
        twin[0].load_state_dict(model[0].state_dict())
        w, b = model[2].weight, model[2].bias
        twin[2].weight.copy_(torch.cat([-w / 2, w / 2]))
        twin[2].bias.copy_(torch.cat([-b / 2, b / 2]))
    return twin


def data(n: int = 200) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(n, 4, generator=g)
    return x, (x[:, 0] + x[:, 1] > 0).long()


def test_a_single_logit_is_the_two_logits_half_of_it_either_way():
    z = torch.tensor([[2.0], [-1.0]])
    assert class_logits(z).tolist() == [[-1.0, 1.0], [0.5, -0.5]]
    assert torch.allclose(class_logits(z).softmax(1)[:, 1], torch.sigmoid(z[:, 0]))
    wide = torch.randn(3, 4)
    assert class_logits(wide) is wide


@pytest.mark.parametrize(
    "generator",
    [NativeGenerator(step_size=1.0, maxiter=50), ReferenceGenerator(step_size=1.0, maxiter=50)],
)
def test_a_one_output_model_is_searched_as_its_two_output_twin(generator):
    model = one_output()
    twin = two_outputs(model)
    x, _ = data(40)
    target = 1 - predict(model, x)
    assert torch.equal(predict(model, x), predict(twin, x))
    torch.testing.assert_close(
        target_probability(model, x, target), target_probability(twin, x, target)
    )
    mine = generator.generate(model, x, target, domain=(-3.0, 3.0))
    theirs = generator.generate(twin, x, target, domain=(-3.0, 3.0))
    torch.testing.assert_close(mine.counterfactual, theirs.counterfactual, atol=1e-5, rtol=0)
    assert torch.equal(mine.valid, theirs.valid) and torch.equal(mine.iterations, theirs.iterations)
    assert bool(mine.valid.float().mean() > 0.5)
    assert set(target.tolist()) == {0, 1}  # searched towards both classes


def test_ct_trains_a_one_output_binary_model():
    x, y = data()
    model = one_output()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model, log = counterfactual_training(
            FullObjective(),
            model,
            NativeGenerator(step_size=1.0, maxiter=50),
            DeviceLoader(x, y, batch_size=50),
            torch.optim.Adam(model.parameters(), lr=1e-2),
            device="cpu",
            nepochs=6,
            burnin=0.5,
            nce=40,
            verbose=0,
        )
    assert log[-1].percent_valid > 0.5 and log[-1].implaus is not None
    assert accuracy(model, x, y) > 0.9
    # Labels beyond the two classes are refused with the model's two classes.
    with pytest.raises(ValueError, match=r"y must lie in \[0, 1\]"):
        accuracy(model, x, y + 1)
