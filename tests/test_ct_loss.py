"""``CounterfactualLoss``: CT inside a loop of one's own is ``counterfactual_training``'s loop,
to the bit; burn-in, vanilla objectives, the callback and the Lightning example."""

import importlib.util
import re
from pathlib import Path

import pytest
import torch
from conftest import REPO
from test_images import conv_model, digits

from cfbook import (
    CounterfactualLoss,
    DeviceLoader,
    FullObjective,
    NativeGenerator,
    VanillaObjective,
    counterfactual_training,
)

GENERATOR = NativeGenerator(step_size=1.0)


def _data(rows: int = 120) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    x = torch.rand(rows, 1, 3, 4, generator=g) * 2 - 1
    return x, torch.arange(rows) % 3


def test_a_loop_of_ones_own_is_counterfactual_training_to_the_bit():
    x, y = _data()
    kwargs = {"nce": 24, "domain": (-1.5, 1.5)}

    torch.manual_seed(0)
    model = conv_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    trained, log = counterfactual_training(
        FullObjective(),
        model,
        GENERATOR,
        DeviceLoader(x, y, batch_size=40, seed=3),
        optimizer,
        device="cpu",
        nepochs=3,
        burnin=1 / 3,
        verbose=0,
        **kwargs,
    )

    torch.manual_seed(0)
    mine = conv_model()
    optimizer = torch.optim.SGD(mine.parameters(), lr=0.05)
    loader = DeviceLoader(x, y, batch_size=40, seed=3)
    ct = CounterfactualLoss(FullObjective(), GENERATOR, mine, loader, burnin_epochs=1, **kwargs)
    valid = []
    for epoch in range(1, 4):
        found = ct.start_epoch(mine, epoch)
        valid.append(None if found is None else float(found.valid.sum()) / len(found.valid))
        mine.train()
        for b, (xb, yb) in enumerate(loader):
            loss, terms = ct(mine, xb, yb, b)
            assert set(terms) == (
                set() if found is None else {"implaus", "reg_loss", "adv_loss", "implaus_valid_sum"}
            )
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    for a, b in zip(trained.parameters(), mine.parameters(), strict=True):
        assert torch.equal(a, b)
    assert valid == [r.percent_valid for r in log]
    assert valid[0] is None and valid[2] > 0.5


def test_a_vanilla_objective_never_searches():
    x, y = _data()
    model = conv_model()

    class Forbidden(NativeGenerator):
        def generate(self, *args, **kwargs):
            raise AssertionError("a vanilla objective searched")

    ct = CounterfactualLoss(VanillaObjective(), Forbidden(), model, DeviceLoader(x, y, 40))
    assert ct.nce is None and ct.start_epoch(model, 5) is None
    loss, terms = ct(model, x[:40], y[:40], 0)
    assert terms == {}
    expected = torch.nn.functional.cross_entropy(model(x[:40]), y[:40])
    assert torch.equal(loss, expected)


def test_bad_batches_epochs_and_devices_are_named():
    x, y = _data()
    model = conv_model()
    ct = CounterfactualLoss(FullObjective(), GENERATOR, model, DeviceLoader(x, y, 40), nce=12)
    ct.start_epoch(model, 1)
    with pytest.raises(IndexError, match=re.escape("mini-batch 3 of an epoch of 3")):
        ct(model, x[:40], y[:40], 3)
    with pytest.raises(TypeError, match="batch must be the mini-batch's index"):
        ct(model, x[:40], y[:40], 1.0)
    with pytest.raises(ValueError, match="epoch must be a positive integer"):
        ct.start_epoch(model, 0)
    with pytest.raises(ValueError, match=re.escape("make it after the model moves")):
        ct.start_epoch(model.to("meta"), 2)
    with pytest.raises(TypeError, match="objective must be a cfbook Objective"):
        CounterfactualLoss("full", GENERATOR, conv_model(), DeviceLoader(x, y, 40))


def test_the_callback_gets_the_record_the_model_and_the_epochs_counterfactuals():
    x, y = _data()
    model = conv_model()
    seen = []
    kwargs = {"device": "cpu", "nepochs": 2, "burnin": 0.5, "nce": 12, "verbose": 0}
    counterfactual_training(
        FullObjective(),
        model,
        GENERATOR,
        DeviceLoader(x, y, 40),
        torch.optim.Adam(model.parameters()),
        callback=lambda record, m, cf: seen.append((record.epoch, m, cf)),
        **kwargs,
    )
    assert [(epoch, m is model) for epoch, m, _ in seen] == [(1, True), (2, True)]
    assert seen[0][2] is None and seen[1][2].valid.shape == (12,)
    with pytest.raises(TypeError, match=re.escape("(record, model, counterfactuals)")):
        counterfactual_training(
            FullObjective(),
            model,
            GENERATOR,
            DeviceLoader(x, y, 40),
            torch.optim.Adam(model.parameters()),
            callback=lambda record: None,
            **kwargs,
        )


def _example(name: str):
    path = Path(REPO) / "examples" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_ct_trains_inside_a_lightning_module():
    pytest.importorskip("lightning")
    example = _example("ct_in_lightning")
    torch.manual_seed(0)
    module, trainer = example.main(max_epochs=4)
    metrics = trainer.callback_metrics
    assert float(metrics["percent_valid"]) > 0.5  # the last epoch searched, and converged
    assert float(metrics["reg_loss"]) > 0  # the CT terms were part of the loss
    x, y = digits()
    with torch.no_grad():
        accuracy = (module(x[1000:1300]).argmax(1) == y[1000:1300]).float().mean()
    assert float(accuracy) > 0.8
