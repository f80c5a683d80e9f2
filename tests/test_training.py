import warnings

import pytest
import torch

from cfbook import (
    AdversarialObjective,
    EnergyDifferentialObjective,
    FullObjective,
    NativeGenerator,
    ReferenceGenerator,
    VanillaObjective,
    counterfactual_training,
)
from cfbook.constraints import make_constraints
from cfbook.data import DeviceLoader, load_mnist
from cfbook.metrics import predict
from cfbook.models import mlp
from cfbook.training import _chunk_bounds, _counterfactuals, _NeighbourSampler

N_FEATURES, N_CLASSES = 10, 3


def toy_data(n: int = 90, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % N_CLASSES
    centres = torch.randn(N_CLASSES, N_FEATURES, generator=g)
    x = (centres[y] + 0.3 * torch.randn(n, N_FEATURES, generator=g)).clamp(-3, 3)
    return x, y


def toy_run(objective, generator=None, *, nepochs=4, seed=0, loader_seed=0, **kwargs):
    x, y = toy_data()
    torch.manual_seed(seed)
    model = mlp(N_FEATURES, (16,), N_CLASSES)
    optimizer = torch.optim.Adam(model.parameters(), 1e-2)
    loader = DeviceLoader(x, y, batch_size=30, seed=loader_seed)
    kwargs.setdefault("domain", (-3.0, 3.0))
    kwargs.setdefault("verbose", 0)
    return counterfactual_training(
        objective, model, generator or NativeGenerator(maxiter=10, step_size=0.5), loader,
        optimizer, device="cpu", nepochs=nepochs, **kwargs,
    )


class ForbiddenGenerator(NativeGenerator):
    def generate(self, *args, **kwargs):
        raise AssertionError("the generator must not be called")


class SpyGenerator(NativeGenerator):
    """Records, at call time, the model's predictions next to the requested targets."""

    calls: list

    def generate(self, model, x, target, **kwargs):
        object.__setattr__(self, "calls", getattr(self, "calls", []))
        self.calls.append((predict(model, x), target.clone(), kwargs.get("cf_batchsize")))
        return super().generate(model, x, target, **kwargs)


def test_vanilla_never_calls_the_generator():
    _, log = toy_run(VanillaObjective(needs_ce=False), ForbiddenGenerator(), burnin=0.0)
    assert len(log) == 4
    assert all(r.implaus is None and r.adv_loss is None for r in log)
    assert all(r.percent_valid == 1.0 and r.avg_iter == 0.0 for r in log)


def test_vanilla_with_needs_ce_searches_but_adds_no_terms():
    spy = SpyGenerator(maxiter=5)
    _, log = toy_run(VanillaObjective(needs_ce=True), spy, nce=30)
    assert len(spy.calls) == 4
    assert all(r.implaus is None and r.reg_loss is None and r.adv_loss is None for r in log)
    assert all(r.avg_iter > 0 for r in log)


def test_log_has_none_exactly_where_it_should():
    _, log = toy_run(FullObjective(), nepochs=5, burnin=0.4, accuracy_every=2, nce=30,
                     val_loader=DeviceLoader(*toy_data(30, seed=1), batch_size=10))
    assert [r.epoch for r in log] == [1, 2, 3, 4, 5]
    assert [r.acc is None for r in log] == [True, False, True, False, True]
    assert [r.acc_val is None for r in log] == [True, False, True, False, True]
    for r in log[:2]:  # burn-in
        assert (r.implaus, r.reg_loss, r.adv_loss) == (None, None, None)
        assert (r.percent_valid, r.avg_iter) == (1.0, 0.0)
    for r in log[2:]:
        assert None not in (r.implaus, r.reg_loss, r.adv_loss)
        assert 0.0 <= r.percent_valid <= 1.0 and r.avg_iter > 0
    assert all(r.time_taken > 0 and r.train_loss > 0 for r in log)
    assert log.meta["burnin_epochs"] == 2 and log.meta["objective"] == "FullObjective"

    _, adv = toy_run(AdversarialObjective(), nepochs=2, nce=30)
    assert all(r.implaus is None and r.reg_loss is None and r.adv_loss is not None for r in adv)
    _, energy = toy_run(EnergyDifferentialObjective(), nepochs=2, nce=30)
    assert all(r.implaus is not None and r.adv_loss is None for r in energy)


def test_targets_exclude_the_predicted_class_and_chunking_is_passed_on():
    spy = SpyGenerator(maxiter=3)
    toy_run(FullObjective(), spy, nepochs=3, nce=60, cf_batchsize=16)
    assert len(spy.calls) == 3
    for pred, target, cf_batchsize in spy.calls:
        assert target.shape == (60,) and cf_batchsize == 16
        assert bool((pred != target).all())
        assert set(target.tolist()) <= set(range(N_CLASSES))


def test_counterfactual_batch_replaces_invalid_and_protects_neighbours():
    x, y = toy_data()
    torch.manual_seed(0)
    model = mlp(N_FEATURES, (16,), N_CLASSES)
    mutability = ["none", "increase", "decrease"] + ["both"] * (N_FEATURES - 3)
    constraints = make_constraints(None, mutability, N_FEATURES, device="cpu")
    rng = torch.Generator().manual_seed(0)
    cf = _counterfactuals(
        model, NativeGenerator(maxiter=8, step_size=2.0, tau=0.5), x, y, 40, N_CLASSES,
        _NeighbourSampler(y, N_CLASSES), constraints, None, mutability, None, rng,
    )
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


def test_neighbour_sampler_draws_from_the_target_class():
    y = torch.tensor([2, 0, 1, 2, 2, 0, 1, 1, 2])
    sampler = _NeighbourSampler(y, 4)  # class 3 has no samples
    rng = torch.Generator().manual_seed(0)
    classes = torch.tensor([0, 1, 2] * 50)
    idx = sampler(classes, rng)
    assert torch.equal(y[idx], classes)
    assert len(set(idx[classes == 2].tolist())) == 4  # every member of the class is reachable
    fallback = sampler(torch.tensor([3] * 20), rng)
    assert bool(((fallback >= 0) & (fallback < len(y))).all())


def test_chunks_cover_all_counterfactuals_once():
    chunks = _chunk_bounds(10, 3)
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


def test_labels_out_of_range_are_named():
    x, y = toy_data()
    model = mlp(N_FEATURES, (16,), N_CLASSES)
    loader = DeviceLoader(x, y + 1, batch_size=30)
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 2\]"):
        counterfactual_training(FullObjective(), model, NativeGenerator(), loader,
                                torch.optim.Adam(model.parameters()), device="cpu", nepochs=1,
                                domain=None, verbose=0)


def test_small_nce_is_raised_to_one_per_batch():
    with pytest.warns(UserWarning, match="raised to 3"):
        _, log = toy_run(FullObjective(), nepochs=1, nce=2)
    assert log.meta["nce"] == 3


def test_non_finite_loss_skips_the_update():
    x, y = toy_data(30)
    x[0, 0] = float("nan")
    torch.manual_seed(0)
    model = mlp(N_FEATURES, (16,), N_CLASSES)
    before = [p.detach().clone() for p in model.parameters()]
    loader = DeviceLoader(x, y, batch_size=30)
    with pytest.warns(UserWarning, match="non-finite loss in epoch 1, batch 0: update skipped"):
        counterfactual_training(VanillaObjective(needs_ce=False), model, NativeGenerator(), loader,
                                torch.optim.Adam(model.parameters()), device="cpu", nepochs=1,
                                domain=None, verbose=0)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def test_interrupted_run_resumes_to_the_same_weights_and_log(tmp_path):
    model_a, log_a = toy_run(FullObjective(), nepochs=4, burnin=0.25, nce=30)

    class Interrupt(Exception):
        pass

    def stop_after_two(record):
        if record.epoch == 2:
            raise Interrupt

    with pytest.raises(Interrupt):
        toy_run(FullObjective(), nepochs=4, burnin=0.25, nce=30, checkpoint_dir=tmp_path,
                callback=stop_after_two)
    # A fresh process would build a new model, optimizer and loader: different seeds prove the
    # checkpoint (weights, optimizer, RNG and loader states) alone decides the outcome.
    model_b, log_b = toy_run(FullObjective(), nepochs=4, burnin=0.25, nce=30, seed=7,
                             loader_seed=9, checkpoint_dir=tmp_path)
    for a, b in zip(model_a.state_dict().values(), model_b.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    strip = [{k: v for k, v in vars(r).items() if k != "time_taken"} for r in log_a]
    assert strip == [{k: v for k, v in vars(r).items() if k != "time_taken"} for r in log_b]
    with pytest.raises(ValueError, match="belongs to FullObjective"):
        toy_run(AdversarialObjective(), nepochs=4, checkpoint_dir=tmp_path)


def test_corrupt_checkpoint_is_named(tmp_path):
    (tmp_path / "checkpoint.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="corrupt checkpoint"):
        toy_run(FullObjective(), nepochs=1, checkpoint_dir=tmp_path)


def test_verbose_2_prints_every_epoch(capsys):
    toy_run(VanillaObjective(needs_ce=False), nepochs=2, verbose=2)
    out = capsys.readouterr()
    assert "epoch=1" in out.out + out.err and "epoch=2" in out.out + out.err


def test_bf16_training_step_runs():
    _, log = toy_run(FullObjective(), nepochs=2, nce=30, amp="bf16")
    assert all(r.train_loss == r.train_loss for r in log)  # finite, not NaN
    with pytest.raises(ValueError, match="fp16"):
        toy_run(FullObjective(), nepochs=1, amp="fp16")


def test_full_training_lowers_the_energy_differential_on_mnist():
    data = load_mnist(600, verbose=False)
    torch.manual_seed(0)
    model = mlp(hidden=(64,))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _, log = counterfactual_training(
            FullObjective(), model, NativeGenerator(tau=0.5, step_size=1.0), data.loader(100),
            torch.optim.Adam(model.parameters(), 1e-2), device="cpu", nepochs=12,
            domain=data.domain, burnin=0.34, nce=120, verbose=0,
        )
    implaus = [r.implaus for r in log if r.implaus is not None]
    assert len(implaus) == 8
    first, last = implaus[: len(implaus) // 2], implaus[len(implaus) // 2 :]
    assert sum(last) / len(last) < sum(first) / len(first) - 0.2
    assert log[-1].percent_valid > 0.5
