import os
import re
import time
import warnings

import pytest
import torch

from cfbook import (
    AdversarialObjective,
    CounterfactualResult,
    EnergyDifferentialObjective,
    FullObjective,
    LowValidityWarning,
    NativeGenerator,
    ReferenceGenerator,
    VanillaObjective,
    counterfactual_training,
)
from cfbook.data import DeviceLoader, load_mnist
from cfbook.evaluation.metrics import accuracy, predict
from cfbook.models import mlp
from cfbook.search import Generator
from cfbook.search.generators import PAPER_SEARCH
from cfbook.search.targets import draw_targets, label_levels
from cfbook.training.checkpoint import load_checkpoint
from cfbook.training.counterfactuals import (
    NeighbourSampler,
    chunk_bounds,
    epoch_counterfactuals,
    epoch_search,
)
from cfbook.training.data import training_tensors

N_FEATURES, N_CLASSES = 10, 3


def toy_data(n: int = 90, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % N_CLASSES
    centres = torch.randn(N_CLASSES, N_FEATURES, generator=g)
    x = (centres[y] + 0.3 * torch.randn(n, N_FEATURES, generator=g)).clamp(-3, 3)
    return x, y


def assert_warned_here(records: list[warnings.WarningMessage]) -> None:
    """One warning, naming a line of this file (the caller of cfbook), not cfbook's own. Under
    mutmut the caller of a mutated function is its trampoline, so there only the count holds."""
    assert len(records) == 1
    if "MUTANT_UNDER_TEST" not in os.environ:
        assert records[0].filename == __file__


def toy_run(objective, generator=None, *, nepochs=4, seed=0, loader_seed=0, **kwargs):
    x, y = toy_data()
    torch.manual_seed(seed)
    model = mlp(N_FEATURES, (16,), N_CLASSES)
    optimizer = torch.optim.Adam(model.parameters(), 1e-2)
    loader = DeviceLoader(x, y, batch_size=30, seed=loader_seed)
    kwargs.setdefault("domain", (-3.0, 3.0))
    kwargs.setdefault("verbose", 0)
    kwargs.setdefault("device", "cpu")
    return counterfactual_training(
        objective,
        model,
        generator or NativeGenerator(maxiter=10, step_size=0.5),
        loader,
        optimizer,
        nepochs=nepochs,
        **kwargs,
    )


class ForbiddenGenerator(Generator):
    def generate(self, *args, **kwargs):
        raise AssertionError("the generator must not be called")


class SpyGenerator(Generator):
    """A generator of its own that searches with ``NativeGenerator(**settings)`` and records, at
    call time, the factuals, the model's predictions, the targets and what the search returned."""

    def __init__(self, **settings):
        self.inner = NativeGenerator(**settings)
        self.calls: list[dict] = []

    def settings(self):
        return self.inner.settings()

    def generate(self, model, x, target, *, domain=None, mutability=None):
        result = self.inner.generate(model, x, target, domain=domain, mutability=mutability)
        self.calls.append(
            {
                "x": x.clone(),
                "pred": predict(model, x),
                "target": target.clone(),
                "result": result,
            }
        )
        return result


# --- a loss computed by hand ----------------------------------------------------------------------
#
# Two classes, each with two identical samples: (1, 0) labelled 0 and (0, 1) labelled 1. The model
# is the identity (logits = x), so every prediction is right and each factual's target is the other
# class. The stub search returns 2 * (the target's sample) as counterfactual, the factual itself as
# nascent point, and calls the first three of the four rows valid. Whatever the random draws:
#   CE(f(x), y) = log(1 + e^-1) for every sample                                  = 0.3132617
#   valid rows:   z_cf = 2 (target logit of the CF), z_nb = 1 (of the neighbour)
#   invalid row:  the CF is replaced by its neighbour, so z_cf = z_nb = 1
#   implaus  = mean(z_cf - z_nb)       = (1 + 1 + 1 + 0) / 4                        = 0.75
#   reg_loss = mean(z_nb^2 + z_cf^2)   = (5 + 5 + 5 + 2) / 4                        = 4.25
#   adv_loss = CE(f(nascent), label)   = CE(f(x), y)                                = 0.3132617
#   implaus_valid = mean over the 3 valid rows of (z_cf - z_nb)                     = 1.0
CE = 0.31326169
HAND = {"implaus": 0.75, "reg_loss": 4.25, "adv_loss": CE, "implaus_valid": 1.0}


class StubSearch(Generator):
    """A search whose output is fixed by hand (see above); it advances ``clock`` by 100 s.
    ``valid``: how many of the first rows each call (epoch) calls valid, 3 unless given."""

    def __init__(self, valid: tuple[int, ...] = ()) -> None:
        self.valid = list(valid)

    def generate(self, model, x, target, *, domain=None, mutability=None):
        cf = 2.0 * torch.nn.functional.one_hot(target, 2).float()
        valid = torch.arange(len(x)) < (self.valid.pop(0) if self.valid else 3)
        STUB_CLOCK[0] += 100.0
        return CounterfactualResult(cf, x.clone(), valid, torch.full((len(x),), 7))


STUB_CLOCK = [0.0]


def hand_run(objective, *, batch_size=4, lr=0.1, search=None, nepochs=1, **kwargs):
    x = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0]])
    y = torch.tensor([0, 0, 1, 1])
    model = torch.nn.Linear(2, 2)
    with torch.no_grad():
        model.weight.copy_(torch.eye(2))
        model.bias.zero_()
    return counterfactual_training(
        objective,
        model,
        search or StubSearch(),
        DeviceLoader(x, y, batch_size=batch_size),
        torch.optim.SGD(model.parameters(), lr=lr),
        device="cpu",
        nepochs=nepochs,
        domain=None,
        nce=4,
        verbose=0,
        **kwargs,
    )


@pytest.mark.parametrize(
    "objective",
    [
        FullObjective(lambda_clf=2.0),
        FullObjective(lambda_div=0.3, lambda_reg=0.7, lambda_adv=1.5),
        EnergyDifferentialObjective(),
        AdversarialObjective(),
        VanillaObjective(lambda_clf=3.0, needs_ce=True),
    ],
    ids=lambda o: f"{o.name}{o.lambdas}",
)
def test_one_batch_loss_matches_the_hand_computation(objective):
    _, log = hand_run(objective)
    (record,) = log
    expected = (
        objective.lambda_clf * CE
        + objective.lambda_div * HAND["implaus"]
        + objective.lambda_reg * HAND["reg_loss"]
        + objective.lambda_adv * HAND["adv_loss"]
    )
    assert record.train_loss == pytest.approx(expected, abs=1e-5)
    # The three terms are logged whatever their weights (without gradient when the weight is 0).
    for name, value in HAND.items():
        assert getattr(record, name) == pytest.approx(value, abs=1e-5), name
    assert record.percent_valid == 0.75 and record.avg_iter == 7.0
    assert record.skipped_batches == 0


def test_terms_with_zero_weight_never_reach_the_gradient():
    trained = {}
    for needs_ce in (False, True):
        torch.manual_seed(0)
        model, log = toy_run(
            VanillaObjective(needs_ce=needs_ce),
            NativeGenerator(maxiter=3),
            nce=30,
            nepochs=2,
            seed=0,
        )
        trained[needs_ce] = [p.detach().clone() for p in model.parameters()]
        assert all((r.implaus is not None) == needs_ce for r in log)
        assert all((r.adv_loss is not None) == needs_ce for r in log)
    for a, b in zip(trained[False], trained[True], strict=True):
        assert torch.equal(a, b)


def test_epoch_time_includes_the_search(monkeypatch):
    # A clock that only the stub search advances: the epoch's time is the search's 100 s exactly
    # when the clock starts before the search (and 0 if it started after it).
    monkeypatch.setattr(time, "perf_counter", lambda: STUB_CLOCK[0])
    _, log = hand_run(FullObjective())
    assert log[0].time_taken == 100.0


def test_vanilla_never_calls_the_generator():
    _, log = toy_run(VanillaObjective(), ForbiddenGenerator(), burnin=0.0)
    assert len(log) == 4
    assert all(r.implaus is None and r.adv_loss is None and r.implaus_valid is None for r in log)
    # No search, no figure: CT.jl logs nothing where cfbook once logged 1.0 and 0.0.
    assert all(r.percent_valid is None and r.avg_iter is None for r in log)


def test_log_has_none_exactly_where_it_should():
    _, log = toy_run(
        FullObjective(),
        nepochs=5,
        burnin=0.4,
        accuracy_every=2,
        nce=30,
        val_loader=DeviceLoader(*toy_data(30, seed=1), batch_size=10),
    )
    assert [r.epoch for r in log] == [1, 2, 3, 4, 5]
    assert [r.acc is None for r in log] == [True, False, True, False, True]
    assert [r.acc_val is None for r in log] == [True, False, True, False, True]
    for r in log[:2]:  # burn-in
        assert (r.implaus, r.reg_loss, r.adv_loss, r.implaus_valid) == (None,) * 4
        assert (r.percent_valid, r.avg_iter) == (None, None)
    for r in log[2:]:
        assert None not in (r.implaus, r.reg_loss, r.adv_loss)
        assert 0.0 <= r.percent_valid <= 1.0 and r.avg_iter > 0
    assert all(r.time_taken > 0 and r.train_loss > 0 for r in log)
    assert log.meta["burnin_epochs"] == 2 and log.meta["objective"] == "FullObjective"
    assert log.meta["lambdas"] == [1.0, 0.5, 0.1, 0.25]
    assert log.meta["generator"] == NativeGenerator(maxiter=10, step_size=0.5).settings()


def test_logged_validity_and_iterations_are_the_searchs_own():
    spy = SpyGenerator(maxiter=6, tau=0.5, step_size=0.5)
    _, log = toy_run(FullObjective(), spy, nepochs=3, nce=60)
    for record, call in zip(log, spy.calls, strict=True):
        result = call["result"]
        assert 0 < int(result.valid.sum()) < 60  # both outcomes, or the check is weak
        assert record.percent_valid == pytest.approx(float(result.valid.float().mean()))
        assert record.avg_iter == pytest.approx(float(result.iterations.float().mean()))


def test_factuals_are_a_fresh_random_draw_each_epoch():
    x, _ = toy_data()
    spy = SpyGenerator(maxiter=2)
    toy_run(FullObjective(), spy, nepochs=3, nce=10)
    drawn = []
    for call in spy.calls:
        rows = (call["x"][:, None, :] == x[None]).all(2).float().argmax(1)
        assert len(set(rows.tolist())) == 10  # without replacement
        drawn.append(set(rows.tolist()))
    assert drawn[0] != drawn[1] != drawn[2]
    assert max(max(d) for d in drawn) >= 10  # not the first nce rows


def test_accuracy_is_measured_on_the_training_set_and_acc_val_on_the_held_out_one():
    x, y = toy_data()
    x_val, y_val = toy_data(30, seed=1)
    y_val = (y_val + 1) % N_CLASSES  # wrong labels: a held-out accuracy far from the training one
    model, log = toy_run(VanillaObjective(), nepochs=3, val_loader=DeviceLoader(x_val, y_val, 10))
    assert log[-1].acc == accuracy(model, x, y)
    assert log[-1].acc_val == accuracy(model, x_val, y_val)
    assert log[-1].acc > log[-1].acc_val + 0.3


def test_nce_defaults_to_one_counterfactual_per_batch():
    spy = SpyGenerator(maxiter=2)
    _, log = toy_run(FullObjective(), spy, nepochs=1)
    assert log.meta["nce"] == 3 and spy.calls[0]["target"].shape == (3,)


def test_targets_are_drawn_from_the_labels_present_minus_the_prediction():
    rng = torch.Generator().manual_seed(0)
    levels = torch.tensor([0, 2, 5])
    cases = [(0, {2, 5}), (2, {0, 5}), (5, {0, 2}), (1, {0, 2, 5}), (6, {0, 2, 5})]
    for predicted, allowed in cases:
        target = draw_targets(torch.full((3000,), predicted), levels, rng)
        counts = torch.bincount(target, minlength=6)
        assert {int(c) for c in target.unique()} == allowed
        share = counts[sorted(allowed)].float() / 3000
        assert bool((share - 1 / len(allowed)).abs().max() < 0.04)  # uniform
    with pytest.raises(ValueError, match="the training labels hold 1 class.*at least two"):
        label_levels(torch.tensor([3, 3, 3]))
    with pytest.raises(ValueError, match="the test set holds 0 class"):
        label_levels(torch.tensor([], dtype=torch.long), "the test set")


def test_targets_drawn_ahead_cover_the_ends_of_the_unit_interval():
    levels = torch.tensor([0, 2, 5])
    u = torch.tensor([0.0, 1.0, 0.0, 1.0, 0.5])
    predicted = torch.tensor([0, 0, 1, 1, 2])
    assert draw_targets(predicted, levels, u).tolist() == [2, 5, 0, 5, 5]


def test_targets_are_drawn_from_the_given_generator_alone():
    levels, predicted = torch.arange(10), torch.arange(10).repeat(50)
    draws = []
    for global_seed in (1, 2):
        torch.manual_seed(global_seed)
        draws.append(draw_targets(predicted, levels, torch.Generator().manual_seed(0)))
    assert torch.equal(draws[0], draws[1])


def test_targets_exclude_the_predicted_class():
    spy = SpyGenerator(maxiter=3, cf_batchsize=16)
    toy_run(FullObjective(), spy, nepochs=3, nce=60)
    assert len(spy.calls) == 3 and spy.inner.cf_batchsize == 16
    for call in spy.calls:
        target = call["target"]
        assert target.shape == (60,)
        assert bool((call["pred"] != target).all())
        assert set(target.tolist()) <= set(range(N_CLASSES))


def _epoch_search(model, x, y, generator, *, mutability=None, mature="neighbour"):
    return epoch_search(
        generator,
        x,
        y,
        nce=40,
        domain=None,
        mutability=mutability,
        mature=mature,
        n_batches=1,
        n_classes=N_CLASSES,
    )


def test_counterfactual_batch_replaces_invalid_and_protects_neighbours():
    x, y = toy_data()
    torch.manual_seed(0)
    model = mlp(N_FEATURES, (16,), N_CLASSES)
    mutability = ["none", "increase", "decrease"] + ["both"] * (N_FEATURES - 3)
    generator = NativeGenerator(maxiter=8, step_size=2.0, tau=0.5)
    search = _epoch_search(model, x, y, generator, mutability=mutability)
    cf = epoch_counterfactuals(model, x, y, search, torch.Generator().manual_seed(0))
    assert 0 < int(cf.valid.sum()) < 40  # both branches are exercised
    mature = cf.counterfactual
    # an invalid CF becomes its neighbour on every mutable feature, keeping the protected ones
    invalid = ~cf.valid
    assert torch.equal(mature[invalid][:, 3:], cf.neighbour[invalid][:, 3:])
    # protection edits the neighbour, relative to the counterfactual
    assert torch.equal(cf.neighbour[:, 0], mature[:, 0])
    assert bool((cf.neighbour[:, 1] >= mature[:, 1]).all())
    assert bool((cf.neighbour[:, 2] <= mature[:, 2]).all())
    # neighbours are real training samples of the target class (on their free features)
    for row, target in zip(cf.neighbour, cf.target, strict=True):
        matches = (x[:, 3:] == row[3:]).all(1)
        assert bool(matches.any()) and bool((y[matches] == target).all())


def test_an_epochs_draws_come_from_the_runs_generator_alone():
    # Factuals, targets and neighbours: drawn from the run's generator in that order, for every
    # row before the search (so processes seeded alike share them), never from torch's global one.
    x, y = toy_data()
    torch.manual_seed(0)
    model = mlp(N_FEATURES, (16,), N_CLASSES)
    search = _epoch_search(model, x, y, NativeGenerator(maxiter=8, step_size=2.0, tau=0.5))
    batches = []
    for global_seed in (1, 2):
        torch.manual_seed(global_seed)
        rng = torch.Generator().manual_seed(0)
        batches.append(epoch_counterfactuals(model, x, y, search, rng))
    rng = torch.Generator().manual_seed(0)
    idx = torch.randperm(x.shape[0], generator=rng)[:40]
    u_target, u_neighbour = torch.rand(40, generator=rng), torch.rand(40, generator=rng)
    target = draw_targets(predict(model, x[idx]), search.levels, u_target)
    neighbour = x[search.neighbours(target, u_neighbour)]
    for cf in batches:
        assert torch.equal(cf.factual_index, idx) and torch.equal(cf.target, target)
        assert torch.equal(cf.neighbour, neighbour)  # no mutability: nothing to protect


def _epoch_counterfactuals_of(mature: str):
    x, y = toy_data()
    torch.manual_seed(0)
    model = mlp(N_FEATURES, (16,), N_CLASSES)
    generator = NativeGenerator(maxiter=8, step_size=2.0, tau=0.5)
    search = _epoch_search(model, x, y, generator, mature=mature)
    cf = epoch_counterfactuals(model, x, y, search, torch.Generator().manual_seed(0))
    found = generator.generate(model, x[cf.factual_index], cf.target)
    return cf, found


def test_raw_semantics_keep_the_last_iterate_of_every_search():
    raw, found = _epoch_counterfactuals_of("raw")
    neighbour, _ = _epoch_counterfactuals_of("neighbour")
    assert 0 < int(raw.valid.sum()) < 40  # both valid and invalid rows
    # "raw": every row is the search's result, the invalid ones included (CT.jl's Native
    # branch); "neighbour": the invalid rows are their neighbours instead.
    assert torch.allclose(raw.counterfactual, found.counterfactual)
    invalid = ~raw.valid
    assert torch.equal(neighbour.counterfactual[invalid], neighbour.neighbour[invalid])
    assert not torch.allclose(raw.counterfactual[invalid], neighbour.counterfactual[invalid])
    assert torch.equal(raw.counterfactual[raw.valid], neighbour.counterfactual[raw.valid])
    with pytest.raises(ValueError, match="mature must be one of 'neighbour', 'raw'"):
        toy_run(FullObjective(), nepochs=1, mature="last")


def test_mostly_invalid_counterfactuals_warn_once_under_the_neighbour_rule():
    # One step of 0.01 towards tau 0.99: no search converges.
    hopeless = NativeGenerator(maxiter=1, step_size=0.01, tau=0.99)
    with pytest.warns(LowValidityWarning, match=r"only 0% of the counterfactuals") as caught:
        _, log = toy_run(FullObjective(), hopeless, nepochs=3, nce=30)
    low = [w for w in caught if w.category is LowValidityWarning]
    assert len(low) == 1  # once per run
    assert_warned_here(low)  # at the call of counterfactual_training (in toy_run)
    assert log.meta["mature"] == "neighbour"
    assert all(r.percent_valid == 0 and r.implaus == 0 for r in log)  # the no-op it warns about
    with warnings.catch_warnings():
        warnings.simplefilter("error", LowValidityWarning)
        _, raw = toy_run(FullObjective(), hopeless, nepochs=3, nce=30, mature="raw")
        # Searches that mostly converge (87 % and 97 % valid): no warning.
        toy_run(FullObjective(), NativeGenerator(maxiter=30, step_size=2.0, tau=0.5), nce=30)
        toy_run(VanillaObjective(), hopeless, nepochs=2)  # no search at all: no warning
    assert raw.meta["mature"] == "raw"
    # Under "raw" the energy differential is trained on even though nothing is valid.
    assert all(r.percent_valid == 0 and r.implaus != 0 for r in raw)


def test_neighbour_sampler_draws_from_the_target_class():
    y = torch.tensor([2, 0, 1, 2, 2, 0, 1, 1, 2])
    sampler = NeighbourSampler(y, 4)  # class 3 has no samples
    rng = torch.Generator().manual_seed(0)
    classes = torch.tensor([0, 1, 2] * 50)
    idx = sampler(classes, rng)
    assert torch.equal(y[idx], classes)
    assert len(set(idx[classes == 2].tolist())) == 4  # every member of the class is reachable
    fallback = sampler(torch.tensor([3] * 20), rng)
    assert bool(((fallback >= 0) & (fallback < len(y))).all())


def test_neighbour_draws_map_to_the_class_in_data_order_and_fall_back_to_any_row():
    y = torch.tensor([1, 0, 1, 3, 1, 0])  # class 2 absent; rows by class: 1, 5 | 0, 2, 4 | 3
    sampler = NeighbourSampler(y, 4)
    classes = torch.tensor([1, 1, 1, 1, 0, 3, 2, 2])
    u = torch.tensor([0.0, 0.5, 0.9, 1.0, 0.99, 0.0, 0.5, 1.0])
    # Class 1: u in [0, 1/3) gives row 0, [1/3, 2/3) row 2, the rest row 4 (u = 1, drawn
    # ahead, too). Absent class 2: the row at int(u * 6) of all rows sorted by class.
    assert sampler(classes, u).tolist() == [0, 2, 4, 4, 5, 3, 2, 3]


def test_chunks_cover_all_counterfactuals_once():
    chunks = chunk_bounds(10, 3)
    assert [(c.start, c.stop) for c in chunks] == [(0, 4), (4, 7), (7, 10)]


def test_fused_forwards_match_separate_ones_without_batchnorm():
    _, separate = toy_run(FullObjective(), nce=30, fuse_cf_forwards=False)
    _, fused = toy_run(FullObjective(), nce=30, fuse_cf_forwards=True)
    for a, b in zip(separate, fused, strict=True):
        assert a.train_loss == pytest.approx(b.train_loss, rel=1e-4)
        assert a.implaus == pytest.approx(b.implaus, rel=1e-4, abs=1e-6)


def test_reference_generator_trains_too():
    _, log = toy_run(FullObjective(), ReferenceGenerator(maxiter=3), nepochs=2, nce=6)
    assert log[-1].avg_iter > 0


@pytest.mark.parametrize(
    "kwargs,error,message",
    [
        ({"nce": 1000}, ValueError, "nce=1000 is larger than the training set"),
        ({"domain": [(-1, 1)] * 3}, ValueError, "domain has 3 entries"),
        ({"mutability": ["frozen"] * N_FEATURES}, ValueError, "mutability values"),
        ({"burnin": 1.5}, ValueError, "burnin"),
        ({"accuracy_every": 0}, ValueError, "accuracy_every"),
    ],
)
def test_bad_arguments_are_named(kwargs, error, message):
    with pytest.raises(error, match=message):
        toy_run(FullObjective(), nepochs=1, **kwargs)


def test_the_arguments_edges_are_accepted(capsys):
    # burnin = 1: every epoch a burn-in epoch, so no search at all; verbose = 1: a line an epoch.
    _, log = toy_run(FullObjective(), ForbiddenGenerator(), nepochs=2, burnin=1.0, verbose=1)
    assert [r.implaus for r in log] == [None, None]
    assert capsys.readouterr().out.count("epoch") >= 2


@pytest.mark.parametrize(
    ("x", "got"),
    [(toy_data()[0][:, 0], "got shape (90,)"), (toy_data()[0].long(), "got int64")],
)
def test_training_data_of_another_shape_or_type_are_named(x, got):
    need = "the training data must be a floating-point tensor of shape (n_samples, n_features) "
    need += "or (n_samples, ...), "
    with pytest.raises(ValueError, match=re.escape(need + got)):
        train_one_epoch_on(x, toy_data()[1])


def test_labels_out_of_range_are_named():
    x, y = toy_data()
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 2\]"):
        train_one_epoch_on(x, y + 1)


def train_one_epoch_on(x: torch.Tensor, y: torch.Tensor) -> None:
    """One epoch of CT on (x, y) with the toy model, for the checks of the training data."""
    model = mlp(N_FEATURES, (16,), N_CLASSES)
    counterfactual_training(
        FullObjective(),
        model,
        NativeGenerator(),
        DeviceLoader(x, y, batch_size=30),
        torch.optim.Adam(model.parameters()),
        device="cpu",
        nepochs=1,
        domain=None,
        verbose=0,
    )


def test_an_epochs_figures_are_means_over_its_batches():
    # The hand computation in two batches of two, the model frozen (lr 0): one batch holds two
    # valid counterfactuals and the other one, so the batches' terms differ (implaus 1 and 0.5),
    # and the epoch's figures are their means, the one-batch figures.
    _, one = hand_run(FullObjective(), lr=0.0)
    _, two = hand_run(FullObjective(), batch_size=2, lr=0.0)
    figures = ("train_loss", "implaus", "reg_loss", "adv_loss", "implaus_valid", "percent_valid")
    for name in (*figures, "avg_iter"):
        assert getattr(two[0], name) == pytest.approx(getattr(one[0], name)), name
    assert two[0].implaus == pytest.approx(HAND["implaus"])
    assert two[0].reg_loss == pytest.approx(HAND["reg_loss"])


def test_low_validity_warns_at_the_first_epoch_below_half_whatever_came_before():
    # 4, 2 and 1 of 4 counterfactuals valid: half is enough, a quarter warns, and an earlier
    # epoch that did not warn does not use up the run's one warning.
    with pytest.warns(LowValidityWarning) as caught:
        _, log = hand_run(FullObjective(), search=StubSearch(valid=(4, 2, 1, 0)), nepochs=4)
    assert [r.percent_valid for r in log] == [1.0, 0.5, 0.25, 0.0]
    (warning,) = [w for w in caught if w.category is LowValidityWarning]
    message = str(warning.message)
    assert message.startswith("epoch 3: only 25% of the counterfactuals were valid")
    assert "the energy differential was exactly zero for 75% of them" in message


def test_nce_from_one_per_batch_to_every_row_is_kept_and_one_more_refused():
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="nce=")
        _, fewest = toy_run(FullObjective(), nepochs=1, nce=3)  # 90 rows in batches of 30
        _, most = toy_run(FullObjective(), nepochs=1, nce=90)
    assert (fewest.meta["nce"], most.meta["nce"]) == (3, 90)
    with pytest.raises(ValueError, match=r"nce=91 is larger than the training set \(90 samples\)"):
        toy_run(FullObjective(), nepochs=1, nce=91)


def test_small_nce_is_raised_to_one_per_batch():
    with pytest.warns(UserWarning, match="raised to 3") as caught:
        _, log = toy_run(FullObjective(), nepochs=1, nce=2)
    assert log.meta["nce"] == 3
    raised = [w for w in caught if "raised to 3" in str(w.message)]
    assert_warned_here(raised)  # the caller's line, not cfbook's


class _NanBelow(torch.nn.Module):
    """The identity on the toy data (within [-3, 3]); NaN for a feature below -10: a finite
    sample whose loss is not (training data holding NaN are refused at the start)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + 0.0 * torch.sqrt(x + 10.0)


def test_non_finite_loss_skips_the_update_and_is_counted():
    x, y = toy_data(60)
    x[0, 0] = -20.0
    torch.manual_seed(0)
    model = torch.nn.Sequential(_NanBelow(), mlp(N_FEATURES, (16,), N_CLASSES))
    before = [p.detach().clone() for p in model.parameters()]
    # Unshuffled: the NaN sample is in batch 0 of 2; only batch 1 updates the weights.
    loader = DeviceLoader(x, y, batch_size=30, shuffle=False)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    skipped = "non-finite loss in epoch 1, batch 0: update skipped"
    with pytest.warns(UserWarning, match=skipped) as caught:
        _, log = counterfactual_training(
            VanillaObjective(),
            model,
            NativeGenerator(),
            loader,
            optimizer,
            device="cpu",
            nepochs=1,
            domain=None,
            verbose=0,
        )
    assert_warned_here(caught)
    assert log[0].skipped_batches == 1
    assert log[0].train_loss != log[0].train_loss  # the mean covers every batch: NaN, as in CT.jl
    torch.manual_seed(0)
    reference = mlp(N_FEATURES, (16,), N_CLASSES)
    assert all(torch.equal(a, b) for a, b in zip(before, reference.parameters(), strict=True))
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    torch.nn.functional.cross_entropy(reference(x[30:]), y[30:]).backward()
    ref_opt.step()
    for a, b in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(a, b)


def _interrupted_run(tmp_path, **kwargs):
    class Interrupt(Exception):
        pass

    def stop_after_two(record, *_):
        if record.epoch == 2:
            raise Interrupt

    with pytest.raises(Interrupt):
        toy_run(
            FullObjective(),
            nepochs=4,
            burnin=0.25,
            nce=30,
            checkpoint_dir=tmp_path,
            callback=stop_after_two,
            **kwargs,
        )


def test_interrupted_run_resumes_to_the_same_weights_and_log(tmp_path):
    model_a, log_a = toy_run(FullObjective(), nepochs=4, burnin=0.25, nce=30)
    _interrupted_run(tmp_path)
    # A fresh process would build a new model, optimizer and loader: different seeds prove the
    # checkpoint (weights, optimizer, RNG and loader states) alone decides the outcome.
    model_b, log_b = toy_run(
        FullObjective(),
        nepochs=4,
        burnin=0.25,
        nce=30,
        seed=7,
        loader_seed=9,
        checkpoint_dir=tmp_path,
    )
    for a, b in zip(model_a.state_dict().values(), model_b.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    strip = [{k: v for k, v in vars(r).items() if k != "time_taken"} for r in log_a]
    assert strip == [{k: v for k, v in vars(r).items() if k != "time_taken"} for r in log_b]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="fp16 autocast needs CUDA")
def test_fp16_resume_restores_the_grad_scaler(tmp_path):
    kwargs = {"nepochs": 4, "burnin": 0.25, "nce": 30, "amp": "fp16", "device": "cuda"}
    model_a, _ = toy_run(FullObjective(), **kwargs)
    _interrupted_run(tmp_path, amp="fp16", device="cuda")
    saved = torch.load(tmp_path / "checkpoint.pt", weights_only=True)["scaler"]
    assert saved["scale"] > 0 and saved["_growth_tracker"] > 0
    model_b, _ = toy_run(FullObjective(), seed=7, loader_seed=9, checkpoint_dir=tmp_path, **kwargs)
    for a, b in zip(model_a.state_dict().values(), model_b.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.parametrize(
    "objective,generator,kwargs,named",
    [
        (AdversarialObjective(), None, {}, "objective: 'FullObjective' in the checkpoint"),
        (FullObjective(lambda_reg=0.01), None, {}, "lambdas: [1.0, 0.5, 0.1, 0.25]"),
        (FullObjective(), None, {"nce": 60}, "nce: 30 in the checkpoint, 60 now"),
        (FullObjective(), None, {"burnin": 0.5}, "burnin_epochs: 1 in the checkpoint, 2 now"),
        (
            FullObjective(),
            NativeGenerator(maxiter=10, step_size=0.5, tau=0.9),
            {},
            "'tau': 0.75 in the checkpoint, 0.9 now",
        ),
        (FullObjective(), None, {"amp": "bf16"}, "amp: None in the checkpoint, 'bf16' now"),
    ],
    ids=["objective", "lambdas", "nce", "burnin", "generator", "amp"],
)
def test_resume_refuses_another_run(tmp_path, objective, generator, kwargs, named):
    _interrupted_run(tmp_path)
    kwargs = {"nce": 30, "burnin": 0.25, **kwargs}
    with pytest.raises(ValueError, match="belongs to another run") as info:
        toy_run(objective, generator, nepochs=4, checkpoint_dir=tmp_path, **kwargs)
    assert named in str(info.value)


def _resume_differently(tmp_path, **kwargs):
    """Interrupt a run after two epochs, then resume it with ``kwargs`` changed."""
    _interrupted_run(tmp_path)
    kwargs = {"nce": 30, "burnin": 0.25, **kwargs}
    with pytest.raises(ValueError, match="belongs to another run") as info:
        toy_run(FullObjective(), nepochs=4, checkpoint_dir=tmp_path, **kwargs)
    return str(info.value)


@pytest.mark.parametrize(
    "kwargs,named",
    [
        ({"domain": (-2.0, 2.0)}, "domain: not the same"),
        ({"mutability": ["none"] * N_FEATURES}, "mutability: None in the checkpoint, ['none'"),
        ({"accumulate": 2}, "accumulate: 1 in the checkpoint, 2 now"),
        ({"fuse_cf_forwards": True}, "fuse_cf_forwards: False in the checkpoint, True now"),
    ],
    ids=["domain", "mutability", "accumulate", "fuse"],
)
def test_resume_refuses_other_constraints_and_update_rules(tmp_path, kwargs, named):
    message = _resume_differently(tmp_path, **kwargs)
    assert named in message and "another checkpoint_dir" in message and "--force" in message
    # Only the field that changed is named.
    others = {"domain", "mutability", "accumulate", "fuse_cf_forwards", "data"} - {*kwargs}
    assert not any(f"{name}:" in message for name in others)


def _resume_with(tmp_path, *, model=None, optimizer=None, loader=None, nepochs=4):
    """Interrupt a run after two epochs, then resume it with its model, optimizer or loader
    built otherwise (a callable of the model for the optimizer)."""
    _interrupted_run(tmp_path)
    x, y = toy_data()
    torch.manual_seed(0)
    model = model or mlp(N_FEATURES, (16,), N_CLASSES)
    return counterfactual_training(
        FullObjective(),
        model,
        NativeGenerator(maxiter=10, step_size=0.5),
        loader or DeviceLoader(x, y, batch_size=30),
        (optimizer or (lambda m: torch.optim.Adam(m.parameters(), 1e-2)))(model),
        device="cpu",
        nepochs=nepochs,
        domain=(-3.0, 3.0),
        burnin=0.25,
        nce=30,
        verbose=0,
        checkpoint_dir=tmp_path,
    )


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        (
            {"optimizer": lambda m: torch.optim.Adam(m.parameters(), 0.5)},
            "optimizer: 'lr': 0.01 in the checkpoint, 0.5 now",
        ),
        (
            {"optimizer": lambda m: torch.optim.SGD(m.parameters(), 1e-2)},
            "optimizer: 'class': 'Adam' in the checkpoint, 'SGD' now",
        ),
        ({"model": mlp(N_FEATURES, (32,), N_CLASSES)}, "model: "),
        (
            {"loader": DeviceLoader(*toy_data(), batch_size=15)},
            "loader: 'batch_size': 30 in the checkpoint, 15 now",
        ),
        (
            {"loader": DeviceLoader(*toy_data(), batch_size=30, shuffle=False)},
            "loader: 'shuffle': True in the checkpoint, False now",
        ),
    ],
    ids=["learning rate", "optimizer", "model width", "batch size", "shuffling"],
)
def test_resume_refuses_another_optimizer_model_or_batching(tmp_path, kwargs, named):
    with pytest.raises(ValueError, match="belongs to another run") as info:
        _resume_with(tmp_path, **kwargs)
    assert named in str(info.value)
    others = {"optimizer", "model", "loader", "data", "nce", "generator"} - {*kwargs}
    assert not any(f"; {name}:" in str(info.value) for name in others)


def test_a_finished_run_returns_its_model_trains_on_or_refuses_fewer_epochs(tmp_path, capsys):
    _resume_with(tmp_path)  # interrupted after two epochs, then finished: four
    finished = torch.load(tmp_path / "checkpoint.pt", weights_only=True)["model"]
    with pytest.raises(ValueError, match=r"finished 4 epochs, more than nepochs=3: ask for"):
        toy_run(FullObjective(), nepochs=3, burnin=0.25, nce=30, checkpoint_dir=tmp_path)
    # Called again as it was: nothing trains; the saved model and log come back, and it says so.
    trained = []
    model, log = toy_run(
        FullObjective(),
        nepochs=4,
        burnin=0.25,
        nce=30,
        checkpoint_dir=tmp_path,
        callback=lambda r, *_: trained.append(r.epoch),
        verbose=1,
    )
    assert trained == [] and [r.epoch for r in log] == [1, 2, 3, 4]
    assert all(torch.equal(v, finished[k]) for k, v in model.state_dict().items())
    assert "holds all 4 epochs: returning its model and log" in capsys.readouterr().out
    # With burn-in 0 (so its length does not move with nepochs), more epochs train on.
    toy_run(FullObjective(), nepochs=2, nce=30, checkpoint_dir=tmp_path / "b")
    _, log = toy_run(FullObjective(), nepochs=3, nce=30, checkpoint_dir=tmp_path / "b")
    assert [r.epoch for r in log] == [1, 2, 3]


def test_resume_refuses_other_training_data(tmp_path):
    _interrupted_run(tmp_path)
    x, y = toy_data()
    for other in (x * 100, x[:60]):  # other values, or fewer rows
        torch.manual_seed(0)
        model = mlp(N_FEATURES, (16,), N_CLASSES)
        with pytest.raises(ValueError, match="belongs to another run: data: not the same"):
            counterfactual_training(
                FullObjective(),
                model,
                NativeGenerator(maxiter=10, step_size=0.5),
                DeviceLoader(other, y[: len(other)], batch_size=30),
                torch.optim.Adam(model.parameters(), 1e-2),
                device="cpu",
                nepochs=4,
                domain=(-3.0, 3.0),
                burnin=0.25,
                nce=30,
                verbose=0,
                checkpoint_dir=tmp_path,
            )


def test_the_same_run_resumes_where_it_stopped(tmp_path):
    _interrupted_run(tmp_path)
    trained = []
    _, log = toy_run(
        FullObjective(),
        nepochs=4,
        burnin=0.25,
        nce=30,
        checkpoint_dir=tmp_path,
        callback=lambda record, *_: trained.append(record.epoch),
    )
    assert trained == [3, 4] and [r.epoch for r in log] == [1, 2, 3, 4]


class HalfwayToTheTarget(Generator):
    """A generator of one's own: each counterfactual is the factual moved halfway towards the
    mean of its target class's training samples, in one step; valid when the model agrees."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor):
        self.means = torch.stack([x[y == c].mean(0) for c in range(int(y.max()) + 1)])

    def generate(self, model, x, target, *, domain=None, mutability=None):
        cf = x + 0.5 * (self.means[target] - x)
        valid = predict(model, cf) == target
        return CounterfactualResult(cf, x.clone(), valid, torch.ones(len(x), dtype=torch.long))


def test_a_hand_written_generator_trains():
    x, y = toy_data()
    generator = HalfwayToTheTarget(x, y)
    model, log = toy_run(FullObjective(), generator, nepochs=3, nce=30)
    assert log.meta["generator"] == {"generator": f"{__name__}.HalfwayToTheTarget"}
    assert all(r.avg_iter == 1.0 and r.implaus is not None for r in log)
    assert 0 < log[-1].percent_valid <= 1
    # The run trained on its counterfactuals: without them the weights end elsewhere.
    plain, _ = toy_run(VanillaObjective(), nepochs=3)
    assert any(
        not torch.equal(a, b) for a, b in zip(model.parameters(), plain.parameters(), strict=True)
    )


def test_a_generator_without_generate_is_named():
    class Nothing:
        pass

    with pytest.raises(TypeError, match="the generator Nothing has no generate, settings"):
        toy_run(FullObjective(), Nothing(), nepochs=1)


def test_corrupt_checkpoint_is_named(tmp_path):
    (tmp_path / "checkpoint.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="corrupt checkpoint"):
        toy_run(FullObjective(), nepochs=1, checkpoint_dir=tmp_path)
    # A readable file without the epoch or the weights is no checkpoint either.
    for state in ({"epoch": 1}, {"model": {}}):
        torch.save(state, tmp_path / "checkpoint.pt")
        with pytest.raises(ValueError, match="missing epoch/model entries"):
            load_checkpoint(tmp_path)


def test_verbose_2_prints_every_epoch(capsys):
    toy_run(VanillaObjective(), nepochs=2, verbose=2)
    out = capsys.readouterr()
    assert "epoch=1" in out.out + out.err and "epoch=2" in out.out + out.err


def test_bf16_training_step_runs():
    _, log = toy_run(FullObjective(), nepochs=2, nce=30, amp="bf16")
    assert all(r.train_loss == r.train_loss for r in log)  # finite, not NaN
    with pytest.raises(ValueError, match="fp16"):
        toy_run(FullObjective(), nepochs=1, amp="fp16")


def _mnist_run(data, seed: int, lambda_div: float):
    torch.manual_seed(seed)
    model = mlp(hidden=(64,))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        # Its first search epochs are mostly invalid: the warning is expected there.
        warnings.simplefilter("ignore", LowValidityWarning)
        _, log = counterfactual_training(
            FullObjective(lambda_div=lambda_div),
            model,
            NativeGenerator(**PAPER_SEARCH, tau=0.5, step_size=1.0),
            data.loader(100),
            torch.optim.Adam(model.parameters(), 1e-2),
            device="cpu",
            nepochs=12,
            domain=data.domain,
            burnin=0.34,
            nce=120,
            verbose=0,
        )
    return log


def test_training_on_the_energy_differential_lowers_it_on_mnist():
    # Paired runs on 600 digits of the training split: the same seed, with and without the
    # energy term's weight (the term is still logged at weight 0). One seed's difference can be
    # tiny (0.050 against 0.051 was seen), so the claim is over five seeds: the trained run ends
    # lower in at least four, and lower on average. A sign error in the term makes it higher.
    data = load_mnist(600, verbose=False)
    assert "training split" in data.source
    ends = []
    for seed in range(5):
        pair = []
        for lambda_div in (0.5, 0.0):
            log = _mnist_run(data, seed, lambda_div)
            cf_epochs = [r for r in log if r.implaus is not None]
            assert len(cf_epochs) == 8  # 4 of 12 epochs of burn-in
            for r in cf_epochs:
                # Invalid counterfactuals count 0 in implaus, so it is implaus_valid scaled by
                # the share of valid counterfactuals (and 0 when none is valid).
                valid = r.implaus_valid * r.percent_valid if r.percent_valid else 0.0
                assert r.implaus == pytest.approx(valid, abs=1e-4)
                assert r.reg_loss > 0 and r.adv_loss > 0
            pair.append(sum(r.implaus for r in cf_epochs[4:]) / 4)
        ends.append(pair)
    lower = [trained < untrained for trained, untrained in ends]
    assert sum(lower) >= 4, ends
    assert sum(t - u for t, u in ends) < 0, ends


def test_few_counterfactuals_an_epoch_warn_as_ct_jl_does():
    # 90 rows in batches of 30: the default, one per batch, is 3 (3.3 %), below CT.jl's 10 %.
    with pytest.warns(UserWarning, match=r"3 counterfactuals an epoch \(the default, one per") as w:
        toy_run(FullObjective(), nepochs=1)
    assert "3.3% of the 90 training rows" in str(w[0].message) and "nce=9 or more" in str(
        w[0].message
    )
    with pytest.warns(UserWarning, match=r"\(nce=8\) are 8.9%"):
        toy_run(FullObjective(), nepochs=1, nce=8)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        toy_run(FullObjective(), nepochs=1, nce=9)  # 10 %: no warning
        toy_run(VanillaObjective(), nepochs=1)  # no search, no counterfactuals to count
    assert not [w for w in caught if "counterfactuals an epoch" in str(w.message)]


class _Weighted(torch.utils.data.Dataset):
    """A data set of one's own whose items are (x, y, weight), as many pipelines' are."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.x, self.y = x, y

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> tuple:
        return self.x[i].numpy(), int(self.y[i]), 1.0


def test_any_map_style_dataset_trains_and_its_factuals_come_from_all_of_it():
    x, y = toy_data()
    full = torch.utils.data.TensorDataset(x, y)
    part, _ = torch.utils.data.random_split(full, [60, 30], torch.Generator().manual_seed(0))
    for dataset, rows in ((part, part.indices), (_Weighted(x, y), list(range(90)))):
        loader = torch.utils.data.DataLoader(dataset, batch_size=30, shuffle=True)
        gathered_x, gathered_y = training_tensors(loader)
        assert torch.equal(gathered_x, x[rows]) and torch.equal(gathered_y, y[rows])
        torch.manual_seed(0)
        model = mlp(N_FEATURES, (16,), N_CLASSES)
        _, log = counterfactual_training(
            FullObjective(),
            model,
            NativeGenerator(maxiter=10, step_size=0.5),
            loader,
            torch.optim.Adam(model.parameters(), 1e-2),
            device="cpu",
            nepochs=2,
            nce=len(rows) // 3,
            domain=(-3.0, 3.0),
            verbose=0,
        )
        assert len(log) == 2 and log[-1].percent_valid is not None


def test_a_dataset_where_a_loader_belongs_and_a_stream_are_refused():
    x, y = toy_data()
    dataset = torch.utils.data.TensorDataset(x, y)
    with pytest.raises(
        TypeError, match=r"is a TensorDataset, a data set, not a loader .*DataLoader"
    ):
        training_tensors(dataset)

    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self):
            return iter(zip(x, y, strict=True))

    with pytest.raises(ValueError, match="map-style Dataset"):
        training_tensors(torch.utils.data.DataLoader(Stream(), batch_size=30))

    class Unlabelled(torch.utils.data.Dataset):
        def __len__(self):
            return 3

        def __getitem__(self, i):
            return x[i]

    with pytest.raises(ValueError, match=r"item 0 of the training set is a Tensor, not an \(x, y"):
        training_tensors(torch.utils.data.DataLoader(Unlabelled(), batch_size=3))


def test_a_device_loader_takes_numpy_arrays():
    x, y = toy_data()
    loader = DeviceLoader(x.numpy(), y.numpy(), batch_size=30)
    assert torch.equal(loader.tensors[0], x) and torch.equal(loader.tensors[1], y)
