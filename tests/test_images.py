"""Samples of any shape: images ``(N, C, H, W)`` are searched, trained on and evaluated as they
are, exactly as the same numbers given as flat rows to the same model behind an
``nn.Unflatten``."""

import re
import warnings

import pytest
import torch
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import DataLoader, Subset, TensorDataset

from cfbook import FullObjective, NativeGenerator, ReferenceGenerator, counterfactual_training
from cfbook.evaluation.attacks import attack_accuracy
from cfbook.evaluation.metrics import cost, implausibility, mmd2
from cfbook.evaluation.protocol import PaperProtocol, paper_evaluate
from cfbook.search.constraints import domain_bounds, make_constraints

SHAPE = (1, 3, 4)
N_CLASSES = 3


def conv_model(seed: int = 2) -> nn.Module:
    """A small convolutional model of (N, 1, 3, 4) images, with weights large enough that most
    searches converge."""
    torch.manual_seed(seed)
    model = nn.Sequential(
        nn.Conv2d(1, 4, 2), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 2 * 3, N_CLASSES)
    )
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(4.0)
    return model


def images(model: nn.Module, n: int = 24) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    x = torch.rand(n, *SHAPE, generator=g) * 2 - 1
    with torch.no_grad():
        target = (model(x).argmax(1) + 1) % N_CLASSES
    return x, target


# One mutability nested in the image's shape, and the same one flat.
NESTED = [
    [["both", "both", "increase", "decrease"], ["none", "both", "both", "both"], ["both"] * 4]
]
FLAT = [v for row in NESTED[0] for v in row]


@pytest.mark.parametrize(
    "generator", [NativeGenerator(step_size=0.5), ReferenceGenerator(step_size=0.5)], ids=type
)
def test_an_image_search_is_the_flat_search_to_the_bit(generator):
    model = conv_model()
    flat_model = nn.Sequential(nn.Unflatten(1, SHAPE), model)
    x, target = images(model)
    low, high = torch.full(SHAPE, -3.0), torch.full(SHAPE, 3.0)
    low[0, 0, 0] = -0.8
    shaped = generator.generate(model, x, target, domain=(low, high), mutability=NESTED)
    flat_domain = list(zip(low.flatten().tolist(), high.flatten().tolist(), strict=True))
    flat = generator.generate(flat_model, x.flatten(1), target, domain=flat_domain, mutability=FLAT)
    assert shaped.counterfactual.shape == shaped.nascent.shape == x.shape
    for name in ("counterfactual", "nascent"):
        assert torch.equal(getattr(shaped, name).flatten(1), getattr(flat, name))
    assert torch.equal(shaped.valid, flat.valid) and torch.equal(shaped.iterations, flat.iterations)
    # The search moved: not a pass-through, and the constraints held.
    assert shaped.valid.float().mean() > 0.5
    cf = shaped.counterfactual
    assert bool((cf >= low).all() and (cf <= high).all())
    assert torch.equal(cf[:, 0, 1, 0], x[:, 0, 1, 0])  # immutable
    assert bool((cf[:, 0, 0, 2] >= x[:, 0, 0, 2]).all())  # may only increase
    assert bool((cf[:, 0, 0, 3] <= x[:, 0, 0, 3]).all())  # may only decrease


def test_the_batched_image_search_matches_the_per_sample_reference():
    model = conv_model()
    x, target = images(model)
    kwargs = {"domain": (-3.0, 3.0), "mutability": NESTED}
    fast = NativeGenerator(step_size=0.5, compact_every=2).generate(model, x, target, **kwargs)
    slow = ReferenceGenerator(step_size=0.5).generate(model, x, target, **kwargs)
    assert fast.valid.float().mean() > 0.5
    torch.testing.assert_close(fast.counterfactual, slow.counterfactual, atol=1e-5, rtol=0)
    assert torch.equal(fast.valid, slow.valid) and torch.equal(fast.iterations, slow.iterations)


def test_a_recorded_image_search_keeps_each_iterate_in_the_images_shape():
    model = conv_model()
    x, target = images(model, 5)
    result = NativeGenerator(maxiter=7).generate(model, x, target, record=True)
    assert result.path.shape == (8, 5, *SHAPE)
    assert torch.equal(result.path[0], x)


def test_every_form_of_a_domain_gives_the_same_bounds():
    low = torch.linspace(-2, -1, 12).reshape(SHAPE)
    high = low + 3
    expected = torch.stack([low.flatten(), high.flatten()], 1).double()
    forms = [
        (low, high),
        (low.numpy(), high.numpy()),
        torch.stack([low, high], -1),  # (*shape, 2)
        expected,  # (n_features, 2)
        list(zip(low.flatten().tolist(), high.flatten().tolist(), strict=True)),
    ]
    for form in forms:
        torch.testing.assert_close(domain_bounds(form, SHAPE), expected, rtol=0, atol=1e-6)
    pair = domain_bounds((-1.0, 2.0), SHAPE)
    assert pair.shape == (12, 2) and bool((pair == torch.tensor([-1.0, 2.0])).all())
    c = make_constraints((low, high), NESTED, SHAPE, device="cpu")
    assert c.lower.shape == c.immutable.shape == SHAPE
    assert c.immutable.flatten().tolist() == [v == "none" for v in FLAT]
    with pytest.raises(ValueError, match=re.escape("one sample's shape (1, 3, 4)")):
        domain_bounds((low[0], high[0]), SHAPE)
    with pytest.raises(ValueError, match="mutability has 4 entries but the data has 12"):
        make_constraints(None, NESTED[0][0], SHAPE, device="cpu")


def test_one_hot_groups_of_images_and_one_dimensional_data_are_refused():
    model = conv_model()
    x, target = images(model, 4)
    with pytest.raises(ValueError, match=re.escape("flatten them (x.flatten(1))")):
        NativeGenerator().generate(model, x, target, categorical=[[0, 1]])
    with pytest.raises(ValueError, match=re.escape("x[:, None] for one feature per sample")):
        NativeGenerator().generate(model, x[:, 0, 0, 0], target)


def test_images_given_to_a_model_of_flat_rows_are_named():
    model = nn.Sequential(nn.Linear(12, N_CLASSES))
    x = torch.rand(4, *SHAPE)
    with pytest.raises(ValueError, match=re.escape("start the model with nn.Flatten()")):
        NativeGenerator().generate(model, x, torch.zeros(4, dtype=torch.long))


def test_the_measures_of_images_are_those_of_their_flat_rows():
    g = torch.Generator().manual_seed(0)
    a, b = torch.rand(6, *SHAPE, generator=g), torch.rand(5, *SHAPE, generator=g)
    assert torch.equal(cost(a, a.flip(0)), cost(a.flatten(1), a.flip(0).flatten(1)))
    assert implausibility(a, b) == implausibility(a.flatten(1), b.flatten(1))
    assert mmd2(a, b) == mmd2(a.flatten(1), b.flatten(1))


def test_attacks_on_images_are_the_attacks_on_their_flat_rows():
    model = conv_model()
    flat_model = nn.Sequential(nn.Unflatten(1, SHAPE), model)
    x, _ = images(model)
    y = model(x).argmax(1)
    kwargs = {"epsilons": [0.0, 0.2], "pgd_steps": 3, "domain": (-1.0, 1.0), "random_start": True}
    assert attack_accuracy(model, x, y, **kwargs) == attack_accuracy(
        flat_model, x.flatten(1), y, **kwargs
    )


def digits() -> tuple[torch.Tensor, torch.Tensor]:
    """scikit-learn's 8 x 8 digits as (N, 1, 8, 8) images in [-1, 1]."""
    data = load_digits()
    x = torch.tensor(data.images, dtype=torch.float32)[:, None] / 8 - 1
    return x, torch.tensor(data.target)


def test_ct_trains_on_digit_images_through_a_dataloader_over_a_subset():
    x, y = digits()
    torch.manual_seed(0)
    train = Subset(TensorDataset(x, y), range(600))
    model = nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 64, 10)
    )
    generator = NativeGenerator(step_size=1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning: nce is a tenth of the rows, searches converge
        trained, log = counterfactual_training(
            FullObjective(),
            model,
            generator,
            DataLoader(train, batch_size=100, shuffle=True),
            torch.optim.Adam(model.parameters(), lr=1e-2),
            device="cpu",
            nepochs=4,
            burnin=0.5,
            nce=60,
            domain=(-1.0, 1.0),
            verbose=0,
        )
    assert trained is model
    assert [r.percent_valid is None for r in log] == [True, True, False, False]
    assert log[-1].percent_valid > 0.5  # the searches reach their targets
    assert log[-1].implaus is not None
    with torch.no_grad():
        assert float((model(x[1000:1300]).argmax(1) == y[1000:1300]).float().mean()) > 0.8
    found = generator.generate(model, x[1000:1010], (y[1000:1010] + 1) % 10, domain=(-1.0, 1.0))
    assert found.counterfactual.shape == (10, 1, 8, 8)
    assert bool((found.counterfactual.abs() <= 1).all())


def test_the_paper_protocol_on_images_is_the_protocol_on_their_flat_rows():
    model = conv_model()
    flat_model = nn.Sequential(nn.Unflatten(1, SHAPE), model)
    g = torch.Generator().manual_seed(5)
    x = torch.rand(90, *SHAPE, generator=g) * 2 - 1
    y = torch.arange(90) % N_CLASSES
    protocol = PaperProtocol(
        rounds=3, individuals=6, energy_weights=(1.0,), maxiter=10, ip_draws=10, mmd_samples=5
    )
    shaped = paper_evaluate({"m": model}, x, y, protocol, domain=(-1.5, 1.5))
    flat = paper_evaluate({"m": flat_model}, x.flatten(1), y, protocol, domain=(-1.5, 1.5))
    assert shaped["per_round"] == flat["per_round"]
    validity = shaped["per_round"]["m"]["validity"]
    assert all(v is not None and v > 0 for v in validity)
