"""How often a search reaches its target on a model: ``probe_validity``, ``calibrate_search``
and the probe training runs before its first search epoch."""

import re
import warnings

import pytest
import torch
from test_training import N_CLASSES, N_FEATURES, toy_data, toy_run

from cfbook import FullObjective, Generator, NativeGenerator, ReferenceGenerator, mlp
from cfbook.search import calibrate_search, probe_validity
from cfbook.search.calibration import STEP_SIZES
from cfbook.training import SearchProbeWarning


def model_and_data():
    """The toy MLP after 60 full-batch steps of cross-entropy (an untrained model's small
    logits are hard to move), and its data."""
    x, y = toy_data()
    torch.manual_seed(0)
    model = mlp(N_FEATURES, (16,), N_CLASSES)
    optimizer = torch.optim.Adam(model.parameters(), 1e-2)
    for _ in range(60):
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
    return model, x


def test_calibration_takes_the_smallest_step_that_is_enough():
    model, x = model_and_data()
    generator, measured = calibrate_search(
        model, x, generator=NativeGenerator(maxiter=10), validity=0.8, domain=(-3.0, 3.0)
    )
    steps = [m.step_size for m in measured]
    assert steps == list(STEP_SIZES[: len(steps)])  # smallest first, stopping when enough
    assert len(steps) == 2  # the second step is the first that is enough
    assert measured[-1].validity >= 0.8 > max(m.validity for m in measured[:-1])
    assert generator == NativeGenerator(maxiter=10, step_size=measured[-1].step_size)
    # The measurement is the probe's: the same share for the chosen generator.
    again = probe_validity(generator, model, x, domain=(-3.0, 3.0), rows=256)
    assert again == measured[-1].validity
    # Out of reach: the best step, and the shares say how far short it falls.
    best, tried = calibrate_search(model, x, generator=NativeGenerator(maxiter=1), validity=1.0)
    assert len(tried) == len(STEP_SIZES) and max(m.validity for m in tried) < 1.0
    assert best.step_size == max(tried, key=lambda m: m.validity).step_size
    with pytest.raises(TypeError, match="tunes the step of cfbook's generators"):
        calibrate_search(model, x, generator=object())


def test_a_hopeless_search_is_named_before_training_with_a_step_measured_to_work():
    run = {"nepochs": 8, "burnin": 0.875, "nce": 30}  # seven epochs of cross-entropy first
    with pytest.warns(SearchProbeWarning) as caught:
        toy_run(FullObjective(), NativeGenerator(maxiter=30, step_size=0.01), **run)
    (warning,) = [w for w in caught if w.category is SearchProbeWarning]
    message = str(warning.message)
    assert message.startswith("epoch 8: a probe search of 64 training rows")
    found = re.search(r"With step_size=([\d.]+) the same searches reached (\d+)%", message)
    step, shown = float(found.group(1)), int(found.group(2))
    assert step in STEP_SIZES and shown >= 50
    # Measured to work: the same run with that step finds mostly valid counterfactuals in the
    # epoch the probe looked ahead to (the model stands where it stood at the probe).
    with warnings.catch_warnings():
        warnings.simplefilter("error", SearchProbeWarning)
        _, log = toy_run(FullObjective(), NativeGenerator(maxiter=30, step_size=step), **run)
    assert log[-1].percent_valid >= 0.4
    # A search hopeless at every step says so, with the other ways out.
    with pytest.warns(SearchProbeWarning, match="No step size up to 2.0 reached 50%"):
        toy_run(FullObjective(), NativeGenerator(maxiter=1, step_size=0.01), nepochs=1, nce=30)


class Wrapped(Generator):
    """NativeGenerator behind a generator of one's own: searched alike, but never probed."""

    def __init__(self, inner):
        self.inner = inner

    def generate(self, *args, **kwargs):
        return self.inner.generate(*args, **kwargs)

    def settings(self):
        return self.inner.settings()


def test_the_probe_leaves_the_runs_results_alone():
    search = NativeGenerator(maxiter=10, step_size=0.05)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, probed = toy_run(FullObjective(), search, nepochs=3, burnin=0.34, nce=30)
        _, unprobed = toy_run(FullObjective(), Wrapped(search), nepochs=3, burnin=0.34, nce=30)
    assert [r.train_loss for r in probed] == [r.train_loss for r in unprobed]
    assert [r.percent_valid for r in probed] == [r.percent_valid for r in unprobed]


def test_a_search_that_converges_is_not_warned_about():
    with warnings.catch_warnings():
        warnings.simplefilter("error", SearchProbeWarning)
        toy_run(FullObjective(), NativeGenerator(maxiter=30, step_size=2.0, tau=0.5), nce=30)
        toy_run(FullObjective(), ReferenceGenerator(maxiter=30, step_size=2.0, tau=0.5), nce=30)
