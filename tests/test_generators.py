import functools
import gc
import math
import os
import warnings
import weakref
from dataclasses import replace

import pytest
import torch
from conftest import fresh_python, scaled_mlp
from torch import nn

from cfbook import NativeGenerator, ReferenceGenerator
from cfbook.search import compiled, generators, step
from cfbook.search.generators import PAPER_SEARCH, SearchParameters
from cfbook.search.step import StepSettings, WorkingSet, copy_rows, eager_step, fused_step

N_FEATURES, N_CLASSES = 12, 4
MUTABILITY = ["both"] * 8 + ["none", "increase", "decrease", "none"]


# A random MLP with large enough weights that most searches converge.
small_mlp = functools.partial(scaled_mlp, N_FEATURES, N_CLASSES)


def factuals(model: nn.Module, n: int = 48, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, N_FEATURES, generator=g) * 2 - 1
    with torch.no_grad():
        pred = model(x).argmax(1)
    target = (pred + torch.randint(1, N_CLASSES, (n,), generator=g)) % N_CLASSES
    return x, target


def assert_same_search(fast, slow, atol: float = 1e-5) -> None:
    """Same points (to atol, NaN where the other has NaN), same validity, same iteration counts."""
    for name in ("counterfactual", "nascent"):
        torch.testing.assert_close(
            getattr(fast, name), getattr(slow, name), atol=atol, rtol=0, equal_nan=True
        )
    assert torch.equal(fast.valid, slow.valid)
    assert torch.equal(fast.iterations, slow.iterations)


@pytest.mark.parametrize("compile", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("mutability", [None, MUTABILITY])
@pytest.mark.parametrize("compact_every,cf_batchsize", [(1, None), (5, None), (3, 7)])
def test_native_agrees_with_reference(compile, mutability, compact_every, cf_batchsize):
    model = small_mlp()
    x, target = factuals(model)
    kwargs = {"domain": [(-1.0, 1.0)] * N_FEATURES, "mutability": mutability}
    params = {"tau": 0.6, "maxiter": 30}
    native = NativeGenerator(
        compact_every=compact_every, cf_batchsize=cf_batchsize, compile=compile, **params
    )
    fast = native.generate(model, x, target, **kwargs)
    slow = ReferenceGenerator(**params).generate(model, x, target, **kwargs)
    # The scenario must exercise both outcomes and early stopping at several different steps,
    # or the comparison is weak.
    assert 0 < int(slow.valid.sum()) < len(x)
    assert int(slow.iterations.min()) < params["maxiter"]
    assert len(slow.iterations.unique()) >= 5
    assert_same_search(fast, slow)


@pytest.mark.parametrize("generator", [NativeGenerator(tau=0.6), ReferenceGenerator(tau=0.6)])
def test_constraints_validity_and_nascent(generator):
    model = small_mlp()
    x, target = factuals(model)
    low, high = -0.5, 0.75
    x = x.clamp(low, high)
    res = generator.generate(
        model, x, target, domain=[(low, high)] * N_FEATURES, mutability=MUTABILITY
    )
    cf = res.counterfactual
    assert cf.shape == x.shape and res.valid.dtype == torch.bool
    assert float(cf.min()) >= low and float(cf.max()) <= high
    assert torch.equal(cf[:, 8], x[:, 8]) and torch.equal(cf[:, 11], x[:, 11])
    assert bool((cf[:, 9] >= x[:, 9]).all()) and bool((cf[:, 10] <= x[:, 10]).all())
    assert bool((cf[:, :8] != x[:, :8]).any())  # mutable features did move
    with torch.no_grad():
        p_target = model(cf).softmax(1).gather(1, target[:, None]).squeeze(1)
    assert res.valid.any() and bool((p_target[res.valid] >= 0.6).all())
    assert bool((p_target[~res.valid] < 0.6).all())
    assert float((res.nascent - x).abs().amax()) <= generator.epsilon + 1e-6
    assert bool((res.iterations[~res.valid] == generator.maxiter).all())


def count_host_syncs(monkeypatch) -> list[str]:
    """From now on, every Tensor method that makes the host wait for the device is recorded."""
    syncs: list[str] = []
    for name in ("item", "__bool__", "__int__", "__float__", "tolist", "cpu", "nonzero", "numpy"):
        original = getattr(torch.Tensor, name)

        def counted(self, *args, _original=original, _name=name, **kwargs):
            syncs.append(_name)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counted)
    return syncs


def test_search_runs_in_eval_mode_and_restores_mode():
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(N_FEATURES, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, N_CLASSES)
    )
    model.train()
    model[1].training = True
    before = model[1].running_mean.clone()
    x, target = factuals(model.eval())
    model.train()
    model[3].eval()  # a mixed state must come back exactly as it was
    NativeGenerator(maxiter=5).generate(model, x, target)
    assert model.training and model[1].training and not model[3].training
    assert torch.equal(model[1].running_mean, before)


def test_converged_samples_stop_costing_compute():
    model = small_mlp(scale=6.0)
    x, target = factuals(model, n=64)
    rows: list[int] = []
    model.register_forward_hook(lambda _m, inp, _out: rows.append(inp[0].shape[0]))
    res = NativeGenerator(tau=0.55, compact_every=2).generate(model, x, target)
    assert int(res.iterations.max()) > 2 * int(res.iterations.float().median())
    assert sum(rows) < 0.6 * len(x) * 30  # far fewer rows than maxiter full passes


def test_no_host_sync_per_iteration(monkeypatch):
    # On a CPU the eager step reads which rows leave the epsilon ball (a read that costs no
    # device sync there); this CPU run stands in for a GPU, so it follows the GPU's rule.
    monkeypatch.setattr(step, "SYNC_FREE", True)
    model = small_mlp(scale=0.5)  # nothing converges: the loop runs all iterations
    x, target = factuals(model)
    syncs = count_host_syncs(monkeypatch)
    gen = NativeGenerator(maxiter=30, compact_every=10)
    res = gen.generate(model, x, target)
    monkeypatch.undo()
    assert int(res.iterations.min()) == 30
    # the target range check (2) and one read per compaction point, far fewer than iterations
    assert gen.compaction_points() == [1, 2, 4, 10, 20]
    assert len(syncs) <= 2 + len(gen.compaction_points()), syncs


def test_eager_nascent_points_are_the_same_stored_either_way(monkeypatch):
    """On a CPU the eager step copies only the rows that leave the epsilon ball (found by a host
    read); the sync-free way passes every row through a ``where``. Both must give the reference's
    nascent points, bit for bit the same, with rows that leave and rows that never leave. The
    sync-free search runs first, so that its buffers cannot hold the other search's results."""
    model = small_mlp(seed=2)
    x, target = factuals(model, n=64)
    params = {"tau": 0.9, "maxiter": 25, "epsilon": 0.4}
    search = NativeGenerator(compile=False, compact_every=3, **params)
    reads = count_host_syncs(monkeypatch)
    monkeypatch.setattr(step, "SYNC_FREE", True)
    dense = search.generate(model, x, target, domain=(-1, 1))
    monkeypatch.setattr(step, "SYNC_FREE", False)
    before = len(reads)
    sparse = search.generate(model, x, target, domain=(-1, 1))
    monkeypatch.undo()
    # The sync-free way reads the active rows at compaction points only; the sparse way also
    # reads the leaving rows at every iteration it runs.
    points = len(search.compaction_points())
    assert reads[:before].count("nonzero") <= points
    assert reads[before:].count("nonzero") >= points + int(sparse.iterations.max())
    ref = ReferenceGenerator(**params).generate(model, x, target, domain=(-1, 1))
    for found in (dense, sparse):
        assert_same_search(found, ref)
    assert torch.equal(sparse.counterfactual, dense.counterfactual)
    assert torch.equal(sparse.nascent, dense.nascent)
    within = (sparse.counterfactual - x).abs().amax(1) <= params["epsilon"]
    left = ~within & (sparse.nascent != x).any(1)
    assert bool(within.any()) and bool(left.any())  # both kinds of nascent point


def test_bf16_search_stays_valid(monkeypatch):
    model = small_mlp()
    x, target = factuals(model)
    ref = NativeGenerator(tau=0.6).generate(model, x, target, domain=(-1.0, 1.0))
    res = NativeGenerator(tau=0.6, amp="bf16").generate(model, x, target, domain=(-1.0, 1.0))
    # The compiled step runs float32 only: asked to compile, a bf16 search stays eager.
    calls = _count_compiles(monkeypatch)
    asked = NativeGenerator(tau=0.6, amp="bf16", compile=True)
    assert_same_search(asked.generate(model, x, target, domain=(-1.0, 1.0)), res, atol=0)
    assert not calls
    assert res.counterfactual.dtype == torch.float32
    assert abs(float(res.valid.float().mean()) - float(ref.valid.float().mean())) < 0.15
    # bf16 really runs: its rounding moves the iterates off the float32 search's
    assert not torch.allclose(res.counterfactual, ref.counterfactual, atol=1e-4)
    with pytest.raises(ValueError, match="fp16"):
        NativeGenerator(amp="fp16").generate(model, x, target)


def test_energy_weight_schedule():
    params = SearchParameters(maxiter=30, lambda_energy=5.0)
    assert params.energy_weight(0) == pytest.approx(5.0 * 0.1 * 2**-0.9)
    assert params.energy_weight(10) < params.energy_weight(0)
    assert SearchParameters(maxiter=10).energy_weight(0) == 0.0  # b = round(10/25) = 0


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"domain": [(-1, 1)] * 3}, "domain has 3 entries"),
        ({"mutability": ["both"] * (N_FEATURES - 1) + ["sideways"]}, "mutability values"),
        ({"mutability": ["both"] * 2}, "mutability has 2 entries"),
        ({"domain": [(1, -1)] * N_FEATURES}, "low <= high"),
    ],
)
def test_bad_constraints_are_named(kwargs, message):
    model = small_mlp()
    x, target = factuals(model, n=4)
    with pytest.raises(ValueError, match=message):
        NativeGenerator().generate(model, x, target, **kwargs)


def test_bad_inputs_are_named():
    model = small_mlp()
    x, target = factuals(model, n=4)
    with pytest.raises(ValueError, match="target classes"):
        NativeGenerator().generate(model, x, torch.full_like(target, N_CLASSES))  # one past
    with pytest.raises(ValueError, match=r"target must hold one class index per row of x: "):
        ReferenceGenerator().generate(model, x, target[:2])
    with pytest.raises(ValueError, match="shape"):
        NativeGenerator().generate(model, x[0], target)
    with pytest.raises(ValueError, match="tau"):
        NativeGenerator(tau=1.5)
    with pytest.raises(ValueError, match="maxiter"):
        ReferenceGenerator(maxiter=-1)


@pytest.mark.parametrize("lambda_cost", [0.1, 1.0])  # 1.0: the cost term is not skipped
def test_compiled_update_matches_eager(lambda_cost):
    model = small_mlp()
    x, target = factuals(model)
    kwargs = {"domain": (-1.0, 1.0), "mutability": MUTABILITY}
    settings = {"tau": 0.6, "lambda_cost": lambda_cost}
    eager = NativeGenerator(**settings).generate(model, x, target, **kwargs)
    fused = NativeGenerator(**settings, compile=True).generate(model, x, target, **kwargs)
    torch.testing.assert_close(fused.counterfactual, eager.counterfactual, atol=1e-6, rtol=0)
    assert torch.equal(fused.valid, eager.valid)
    assert torch.equal(fused.iterations, eager.iterations)


@pytest.mark.parametrize("sync_free", [False, True])
def test_factuals_that_already_reach_tau_are_returned_untouched(monkeypatch, sync_free):
    """Both ways of restoring the factuals (a CPU's row copy, the sync-free ``where``)."""
    monkeypatch.setattr(step, "SYNC_FREE", sync_free)
    model = small_mlp()
    x, target = factuals(model)
    x = x * 1.5  # partly outside the domain: an unmoved factual must not even be clamped
    res = NativeGenerator(tau=0.2).generate(model, x, target, domain=(-1.0, 1.0))
    done = res.iterations == 0
    assert bool(done.any()) and bool((~done).any())
    assert bool(res.valid[done].all())
    assert torch.equal(res.counterfactual[done], x[done])
    assert torch.equal(res.nascent[done], x[done])
    assert float(res.counterfactual[~done].abs().max()) <= 1.0


@pytest.mark.parametrize("generator", [NativeGenerator, ReferenceGenerator])
def test_defaults_are_those_of_ct_jl_native_generator(generator):
    # CT.jl: NativeGenerator(λ = [0.1, 1.0], opt = Descent(0.1)), maxiter 30,
    # decision_threshold 0.75, epsilon 0.3.
    assert generator().settings() | {"amp": None} == {
        "maxiter": 30,
        "tau": 0.75,
        "lambda_cost": 0.1,
        "lambda_energy": 1.0,
        "step_size": 0.1,
        "epsilon": 0.3,
        "amp": None,
    }
    assert PAPER_SEARCH == {"lambda_cost": 0.001, "lambda_energy": 5.0}


def _logit_gap_model(gap: float) -> nn.Module:
    """Two classes, logits (0, gap) whatever the input: p(class 1) = sigmoid(gap)."""
    model = nn.Linear(3, 2)
    with torch.no_grad():
        model.weight.zero_()
        model.bias.copy_(torch.tensor([0.0, gap]))
    return model


@pytest.mark.parametrize("generator", [NativeGenerator, ReferenceGenerator])
def test_a_probability_exactly_at_tau_has_converged(generator):
    x = torch.zeros(2, 3)
    target = torch.tensor([1, 1])
    at_tau = generator(tau=0.5).generate(_logit_gap_model(0.0), x, target)  # p = 0.5 exactly
    assert bool(at_tau.valid.all()) and bool((at_tau.iterations == 0).all())
    below = generator(tau=0.5).generate(_logit_gap_model(-1e-3), x, target)
    assert not bool(below.valid.any()) and bool((below.iterations == 30).all())


@pytest.mark.parametrize("generator", [NativeGenerator, ReferenceGenerator])
def test_nan_probabilities_never_count_as_converged(generator):
    class Sqrt(nn.Module):
        """Logits (0, sqrt(x_0)): NaN for a negative x_0, p = 0.5 exactly at x_0 = 0."""

        def forward(self, x):
            return torch.stack([torch.zeros_like(x[:, 0]), x[:, 0].sqrt()], 1)

    x = torch.tensor([[-1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    res = generator(tau=0.5, maxiter=5).generate(Sqrt(), x, torch.tensor([1, 1]))
    assert res.valid.tolist() == [False, True]
    assert res.iterations.tolist() == [5, 0]


def _two_steps_by_hand(x0: list[float], tau_between: bool) -> tuple[list[float], float]:
    """Two steps of the search on logits = x (identity model, 2 classes, target 1), computed with
    plain floats from the loss CE + lambda_cost |x - x0|_1 + lambda_energy phi_t (E + 1e-3 E^2),
    E = -z_target; returns the iterate after two steps and a tau that stops the search there."""
    lambda_cost, lambda_energy, eta = 0.1, 1.0, 0.1
    x, probs = list(x0), []
    for t in range(2):
        p1 = 1 / (1 + math.exp(x[0] - x[1]))
        probs.append(p1)
        phi = 0.1 * (1 + t + 1) ** -0.9  # maxiter 30: b = 1, a = 0.1
        z = x[1]
        d_logits = [1 - p1, p1 - 1 + lambda_energy * phi * (-1 + 2e-3 * z)]
        sign = [(xi > x0i) - (xi < x0i) for xi, x0i in zip(x, x0, strict=True)]
        x = [xi - eta * (g + lambda_cost * s) for xi, g, s in zip(x, d_logits, sign, strict=True)]
    p_final = 1 / (1 + math.exp(x[0] - x[1]))
    return x, (probs[1] + p_final) / 2


@pytest.mark.parametrize("generator", [NativeGenerator, ReferenceGenerator])
def test_two_search_steps_match_the_hand_computation(generator):
    model = nn.Linear(2, 2)
    with torch.no_grad():
        model.weight.copy_(torch.eye(2))
        model.bias.zero_()
    expected, tau = _two_steps_by_hand([0.5, -0.5], True)
    res = generator(tau=tau).generate(model, torch.tensor([[0.5, -0.5]]), torch.tensor([1]))
    assert res.iterations.tolist() == [2] and res.valid.tolist() == [True]
    torch.testing.assert_close(res.counterfactual, torch.tensor([expected]), atol=1e-6, rtol=0)
    torch.testing.assert_close(res.nascent, torch.tensor([expected]), atol=1e-6, rtol=0)


# The compiled step (cfbook.search.compiled). All tests below share the small MLP, so the suite
# compiles a handful of graphs (one per constraint layout), not one per test: the row count is
# compiled as a size, and tau, lambdas and the energy weight are inputs, not constants.


def _with_nan_rows(x: torch.Tensor) -> torch.Tensor:
    """Two rows the model maps to NaN logits (a NaN feature): never converged, never moved."""
    x = x.clone()
    x[3, 2] = float("nan")
    x[10, :] = float("nan")
    return x


@pytest.mark.parametrize("domain", [(-1.0, 1.0), None], ids=["domain", "no-domain"])
def test_compiled_search_agrees_with_reference_on_nan_rows_and_chunks(domain):
    model = small_mlp()
    x, target = factuals(model)
    x = _with_nan_rows(x)
    params = {"tau": 0.6, "maxiter": 30}
    # Chunks of 47 and 1 rows: the single row is searched eagerly (the compiled step needs two).
    fast = NativeGenerator(compile=True, cf_batchsize=47, **params).generate(
        model, x, target, domain=domain
    )
    slow = ReferenceGenerator(**params).generate(model, x, target, domain=domain)
    assert not bool(slow.valid[[3, 10]].any()) and bool((slow.iterations[[3, 10]] == 30).all())
    assert_same_search(fast, slow)
    nan_rows = torch.isnan(x).any(1)
    assert torch.equal(torch.isnan(fast.counterfactual), torch.isnan(x))  # NaN stays where it was
    assert torch.equal(fast.nascent[nan_rows].nan_to_num(), x[nan_rows].nan_to_num())


@pytest.mark.parametrize("n", [2, 8])
def test_compiled_search_pads_a_single_active_row(monkeypatch, n):
    """At a compaction point where one row is left, a frozen row joins it (see _at_least_two),
    even when the chunk has only two; the result must not show it."""
    padded = []

    def spy(keep, n):
        kept = at_least_two(keep, n)
        padded.append(kept.numel() > keep.numel())
        return kept

    at_least_two = generators._at_least_two
    monkeypatch.setattr(generators, "_at_least_two", spy)
    model = small_mlp()
    x, _ = factuals(model, n=n)
    with torch.no_grad():
        logits = model(x)
    # With four classes the predicted one has p >= 0.25 = tau: every row but the first, whose
    # target is its least likely class, converges before its first step.
    target = logits.argmax(1)
    target[0] = logits[0].argmin()
    params = {"tau": 0.25, "maxiter": 12}
    fast = NativeGenerator(compile=True, **params).generate(model, x, target, domain=(-1.0, 1.0))
    slow = ReferenceGenerator(**params).generate(model, x, target, domain=(-1.0, 1.0))
    assert int(slow.iterations[0]) > 2 and bool((slow.iterations[1:] == 0).all())
    assert any(padded)
    assert_same_search(fast, slow)
    assert torch.equal(fast.counterfactual[1:], x[1:])


def _count_compiles(monkeypatch) -> list[bool]:
    calls = []

    def spy(*args, **kwargs):
        calls.append(True)
        return compile_graph(*args, **kwargs)

    compile_graph = compiled._compile
    monkeypatch.setattr(compiled, "_compile", spy)
    return calls


def test_compiled_search_reuses_its_graph_across_settings_and_sizes(monkeypatch):
    """A training run searches every epoch, with shrinking working sets: once compiled, new
    sizes, tau, lambdas and step sizes must not compile again."""
    model = small_mlp()
    x, target = factuals(model)
    NativeGenerator(compile=True, tau=0.6).generate(model, x, target, domain=(-1.0, 1.0))
    compiles = _count_compiles(monkeypatch)
    other = small_mlp(seed=3)  # another model of the same architecture: traced once more
    for net in (model, other):
        for n, settings in [
            (48, {"tau": 0.8}),
            (17, {"lambda_cost": 0.5, "step_size": 0.3}),
            (33, {"epsilon": 0.1, "maxiter": 40, "lambda_energy": 2.0}),
        ]:
            with warnings.catch_warnings():
                warnings.simplefilter("error")  # the compiled step must really run
                fast = NativeGenerator(compile=True, **settings).generate(
                    net, x[:n], target[:n], domain=(-1.0, 1.0)
                )
            slow = ReferenceGenerator(**settings).generate(
                net, x[:n], target[:n], domain=(-1.0, 1.0)
            )
            assert_same_search(fast, slow)
        assert len(compiles) == (net is other)


def test_a_model_changed_after_its_compile_compiles_again():
    """No guard checks a compiled call: a module swapped in after the compile (same parameter
    shapes) must not run the old graph."""
    model = small_mlp(seed=6)
    x, target = factuals(model)
    NativeGenerator(compile=True, tau=0.6).generate(model, x, target)
    activation = next(i for i, m in enumerate(model) if not list(m.parameters()))
    model[activation] = nn.Tanh()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the compiled step must really run
        fast = NativeGenerator(compile=True, tau=0.6).generate(model, x, target)
    assert_same_search(fast, ReferenceGenerator(tau=0.6).generate(model, x, target))


def test_a_forward_hook_added_after_the_compile_compiles_again():
    model = small_mlp(seed=12)
    x, target = factuals(model)
    NativeGenerator(compile=True, tau=0.6).generate(model, x, target)
    model.register_forward_hook(lambda module, args, out: 3 * out)  # sharper probabilities
    fast = NativeGenerator(compile=True, tau=0.6).generate(model, x, target)
    slow = ReferenceGenerator(tau=0.6).generate(model, x, target)
    assert_same_search(fast, slow)


def test_compiled_search_of_a_strided_batch_agrees_with_a_contiguous_one():
    """The compiled step assumes contiguous rows and targets; views with other strides must be
    searched as their contiguous copies are."""
    model = small_mlp()
    x, target = factuals(model)
    strided = x.t().contiguous().t()
    every_other = torch.stack([target, target.flip(0)], 1)[:, 0]
    assert not strided.is_contiguous() and every_other.stride() == (2,)
    gen = NativeGenerator(compile=True, tau=0.6)
    assert_same_search(
        gen.generate(model, strided, every_other), gen.generate(model, x, target), atol=0
    )


def test_compiled_search_runs_batchnorm_in_eval_mode():
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(N_FEATURES, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, N_CLASSES)
    )
    with torch.no_grad():
        model[1].running_mean.uniform_(-0.5, 0.5)
        model[1].running_var.uniform_(0.5, 2.0)
    x, target = factuals(model.eval())
    before = model[1].running_mean.clone()
    model.train()
    fast = NativeGenerator(compile=True, tau=0.4).generate(model, x, target, domain=(-1.0, 1.0))
    slow = ReferenceGenerator(tau=0.4).generate(model, x, target, domain=(-1.0, 1.0))
    assert model.training and torch.equal(model[1].running_mean, before)
    assert_same_search(fast, slow)


def test_compiled_search_has_no_host_sync_per_iteration(monkeypatch):
    model = small_mlp(scale=0.5)  # nothing converges: the loop runs all iterations
    x, target = factuals(model)
    gen = NativeGenerator(maxiter=30, compact_every=10, compile=True)
    gen.generate(model, x, target)  # compiles outside the count
    syncs = count_host_syncs(monkeypatch)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the compiled step must really run
        res = gen.generate(model, x, target)
    monkeypatch.undo()
    assert int(res.iterations.min()) == 30
    assert len(syncs) <= 2 + len(gen.compaction_points()), syncs


class _DataDependent(nn.Module):
    """An MLP whose forward branches on the values of its input: no graph can hold it."""

    def __init__(self) -> None:
        super().__init__()
        self.net = small_mlp()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x) if bool(x.abs().sum() >= 0) else -self.net(x)


def test_a_model_that_cannot_be_compiled_falls_back_to_eager_with_a_warning():
    model = _DataDependent()
    x, target = factuals(model)
    with pytest.warns(RuntimeWarning, match="compiled search step failed for _DataDependent") as w:
        fast = NativeGenerator(compile=True, tau=0.6).generate(model, x, target, domain=(-1, 1))
    if "MUTANT_UNDER_TEST" not in os.environ:  # under mutmut, its trampoline is the caller
        assert [r.filename for r in w] == [__file__]  # names the call of generate, not cfbook
    slow = ReferenceGenerator(tau=0.6).generate(model, x, target, domain=(-1, 1))
    assert_same_search(fast, slow)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the model is remembered: no second attempt, no warning
        NativeGenerator(compile=True, tau=0.6).generate(model, x, target, domain=(-1, 1))


def test_a_missing_compiler_falls_back_to_eager_with_a_warning(monkeypatch):
    def no_compiler(*args, **kwargs):
        raise RuntimeError("no working C++ compiler found")

    monkeypatch.setattr(compiled, "_compile", no_compiler)
    model = small_mlp(seed=5)
    x, target = factuals(model)
    with pytest.warns(RuntimeWarning, match="no working C\\+\\+ compiler"):
        fast = NativeGenerator(compile=True, tau=0.6).generate(model, x, target, domain=(-1, 1))
    eager = NativeGenerator(compile=False, tau=0.6).generate(model, x, target, domain=(-1, 1))
    assert_same_search(fast, eager, atol=0)


def test_auto_compiles_large_cheap_searches_whose_planned_work_repays_the_compile(monkeypatch):
    enough = compiled.AUTO_COMPILE_STEPS["cpu"]
    cheap, costly = (
        small_mlp(seed=7),
        nn.Sequential(nn.Linear(N_FEATURES, 4096), nn.ReLU(), nn.Linear(4096, N_CLASSES)),
    )
    big = torch.zeros(compiled.AUTO_MIN_ELEMENTS // N_FEATURES + 1, N_FEATURES)
    assert compiled.auto_compiles(cheap, big, None, enough)
    assert not compiled.auto_compiles(cheap, big, None, enough - 1)  # not repaid
    assert not compiled.auto_compiles(cheap, big[:100], None, enough)  # chunks too small to pay
    assert not compiled.auto_compiles(costly, big, None, 10 * enough)  # the model dominates
    assert not compiled.auto_compiles(cheap, big, "bf16", enough)  # autocast stays eager
    assert compiled.use_fused(True, cheap, big[:2], amp=None)
    assert not compiled.use_fused(True, cheap, big[:1], amp=None)  # one row stays eager
    assert not compiled.use_fused(True, cheap, big, amp="bf16")
    assert not compiled.use_fused(False, cheap, big, amp=None)
    monkeypatch.setattr(compiled, "compiler_available", lambda: False)  # torch < 2.8
    assert not compiled.auto_compiles(cheap, big, None, 10 * enough)
    with pytest.raises(ValueError, match="compile must be"):
        NativeGenerator(compile="always")


def test_a_cpu_search_without_cf_batchsize_splits_into_equal_chunks(monkeypatch):
    rows = functools.partial(generators.chunk_rows, None)
    assert rows(torch.empty(10_000, 784)) == 5_000  # 2^22 numbers hold 5,349 rows: two chunks
    assert rows(torch.empty(5_349, 784)) == 5_349  # one batch up to the limit...
    assert rows(torch.empty(5_350, 784)) == 2_675  # ...then halves, not 5,349 + 1
    assert rows(torch.empty(20_000, 784)) == 5_000
    assert rows(torch.empty(3_000, 100_000)) == 1_000  # many features: 1,024 rows at most
    assert rows(torch.empty(0, 784)) == 1
    assert rows(torch.empty(5_000_000, 1)) == 2_500_000  # one feature: 2^22 rows a chunk
    assert rows(torch.empty(10_000, 784, device="meta")) == 10_000  # not on a CPU: one batch
    assert generators.chunk_rows(64, torch.empty(10_000, 784)) == 64  # as set
    # A search takes its rows in those chunks, and plans from one of them.
    monkeypatch.setattr(generators, "CPU_CHUNK_ELEMENTS", 20 * N_FEATURES)
    monkeypatch.setattr(generators, "CPU_CHUNK_MIN_ROWS", 2)
    sizes: list[int] = []
    search = NativeGenerator._search
    monkeypatch.setattr(
        NativeGenerator,
        "_search",
        lambda self, model, x0, *a, **k: sizes.append(len(x0)) or search(self, model, x0, *a, **k),
    )
    model = small_mlp(seed=8)
    x, target = factuals(model)  # 48 rows: three chunks of 16
    gen = NativeGenerator(tau=0.6, compile=False)
    chunked = gen.generate(model, x, target, domain=(-1.0, 1.0))
    assert sizes == [16, 16, 16]
    sizes.clear()
    whole = replace(gen, cf_batchsize=48).generate(model, x, target, domain=(-1.0, 1.0))
    assert sizes == [48]
    assert_same_search(chunked, whole)
    monkeypatch.setattr(compiled, "AUTO_MIN_ELEMENTS", 16 * N_FEATURES + 1)
    auto = NativeGenerator(tau=0.6)
    assert auto.plan(model, x, 10**9)[1]["compiled"] is False  # a chunk is too small to pay
    assert replace(auto, cf_batchsize=48).plan(model, x, 10**9)[1]["compiled"] is True


def test_a_lone_search_below_the_plans_bar_loads_no_compiler_machinery():
    # Counting the model's FLOPs (is the compiled step faster?) imports most of torch._dynamo,
    # 0.9 s of a fresh process's first search; a search too small to compile never asks.
    code = (
        "import sys, torch; from cfbook import NativeGenerator, mlp; "
        "x = torch.rand(400, 784) * 2 - 1; target = torch.randint(0, 10, (400,)); "
        "NativeGenerator(maxiter=5).generate(mlp(), x, target, domain=(-1.0, 1.0)); "
        "print('torch._dynamo' in sys.modules)"
    )
    assert fresh_python(code) == "False"
    assert compiled.AUTO_MIN_ELEMENTS <= 400 * 784  # large enough to be counted, were it asked


def test_auto_decides_a_search_from_its_own_size_and_a_run_from_its_plan(monkeypatch):
    """A generate() call plans rows x maxiter counterfactual-steps, split into chunks as it
    searches them; plan settles "auto" for a whole run's plan. Neither depends on what was
    searched before: the same call compiles, or not, every time."""
    calls = _count_compiles(monkeypatch)
    monkeypatch.setattr(compiled, "AUTO_MIN_ELEMENTS", 0)
    model = small_mlp(seed=8)
    x, target = factuals(model)
    gen = NativeGenerator(tau=0.6)  # compile="auto"
    monkeypatch.setitem(compiled.AUTO_COMPILE_STEPS, "cpu", len(x) * gen.maxiter + 1)
    first = gen.generate(model, x, target)
    for _ in range(3):  # however much it has searched before
        assert_same_search(gen.generate(model, x, target), first, atol=0)
    assert not calls
    monkeypatch.setitem(compiled.AUTO_COMPILE_STEPS, "cpu", len(x) * gen.maxiter)
    again = gen.generate(model, x, target)
    assert calls  # big enough now: compiled from its first iteration
    assert_same_search(again, first)

    def plans(generator, rows, planned_rows, saved=None):
        planned, record = generator.plan(model, rows, planned_rows, saved)
        assert planned.compile is record["compiled"]  # the planned generator is settled
        assert planned.settings() == generator.settings()  # and searches the same way
        return record["compiled"]

    assert plans(gen, x, len(x)) is True
    _, record = gen.plan(model, x, len(x))  # what a checkpoint keeps, read back on resume
    assert record == {"compile": "auto", "compiled": True, "planned_steps": len(x) * gen.maxiter}
    assert plans(gen, x, len(x) - 1) is False
    assert plans(gen, x[:1], 10**9) is False  # one-row chunks never compile
    assert plans(replace(gen, cf_batchsize=1), x, 10**9) is False
    assert plans(NativeGenerator(compile=False), x, 10**9) is False
    assert plans(NativeGenerator(compile=True), x[:1], 0) is True  # as set
    assert plans(replace(gen, amp="bf16"), x, 10**9) is False  # autocast searches eagerly
    # The chunk is the rows (48 x 12 here), not as many rows as there are features.
    monkeypatch.setattr(compiled, "AUTO_MIN_ELEMENTS", x.numel())
    assert plans(gen, x, len(x)) is True
    monkeypatch.setattr(compiled, "AUTO_MIN_ELEMENTS", 0)
    # A resumed run keeps the interrupted run's decision under "auto", only under "auto".
    saved = {"compile": "auto", "compiled": False, "planned_steps": 7}
    assert gen.plan(model, x, len(x), saved) == (replace(gen, compile=False), saved)
    saved = {"compile": "auto", "compiled": True, "planned_steps": 7}
    assert gen.plan(model, x, 1, saved) == (replace(gen, compile=True), saved)
    assert plans(NativeGenerator(compile=True), x, len(x), saved) is True
    calls.clear()  # a settled generator searches as settled, whatever its size
    assert_same_search(replace(gen, compile=False).generate(model, x, target), first, atol=0)
    assert not calls


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_compiled_search_agrees_with_eager_and_reference_on_cuda():
    model = small_mlp()
    x, target = factuals(model)
    slow = ReferenceGenerator(tau=0.6).generate(
        model, x, target, domain=(-1.0, 1.0), mutability=MUTABILITY
    )
    model, x, target = model.cuda(), x.cuda(), target.cuda()
    kwargs = {"domain": (-1.0, 1.0), "mutability": MUTABILITY}
    with warnings.catch_warnings():
        # The compiled step must really run on the GPU (torch's own warnings may pass).
        warnings.filterwarnings("error", "cfbook: the compiled", RuntimeWarning)
        fast = NativeGenerator(compile=True, tau=0.6, cf_batchsize=20).generate(
            model, x, target, **kwargs
        )
    eager = NativeGenerator(compile=False, tau=0.6, cf_batchsize=20).generate(
        model, x, target, **kwargs
    )
    assert fast.counterfactual.is_cuda
    assert_same_search(fast, eager)
    assert torch.equal(fast.valid.cpu(), slow.valid)
    assert torch.equal(fast.iterations.cpu(), slow.iterations)


def test_compiled_lazy_nascent_points_match_the_reference():
    """The fused step keeps nascent points lazily (see WorkingSet): rows still within epsilon at
    the end, rows that have left it and rows written back at a compaction point must all come out
    as the reference's."""
    model = small_mlp(seed=2)
    x, target = factuals(model, n=64)
    params = {"tau": 0.6, "maxiter": 25, "epsilon": 0.5}
    fast = NativeGenerator(compile=True, compact_every=2, **params).generate(model, x, target)
    slow = ReferenceGenerator(**params).generate(model, x, target)
    assert_same_search(fast, slow)
    within = (slow.counterfactual - x).abs().amax(1) <= params["epsilon"]
    moved = (slow.nascent != x).any(1)
    assert bool(within.any()) and bool((~within & moved).any())  # both kinds of nascent point
    assert bool((slow.iterations < params["maxiter"]).any())  # rows left at compaction points


def test_compiled_searches_with_two_architectures_in_turn_each_get_their_own_graph():
    """No guard checks a compiled call: searches with another architecture, and then the first
    one again, must not run a wrong graph. The other one has the same parameter shapes, which no
    size check in the graph would catch."""
    torch.manual_seed(4)
    tanh = nn.Sequential(nn.Linear(N_FEATURES, 16), nn.Tanh(), nn.Linear(16, N_CLASSES))
    for model in (small_mlp(), tanh, small_mlp(seed=1)):
        x, target = factuals(model)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # the compiled step must really run
            fast = NativeGenerator(compile=True, tau=0.6).generate(model, x, target)
        assert_same_search(fast, ReferenceGenerator(tau=0.6).generate(model, x, target))


def test_a_compiled_model_is_freed_with_its_graphs():
    """The graphs are kept per model, weakly: a training script that builds a model per seed
    must not keep every model (and its graph) alive."""
    model = small_mlp(seed=11)
    x, target = factuals(model)
    NativeGenerator(compile=True, tau=0.6).generate(model, x, target)
    assert model in compiled._graphs
    alive = weakref.ref(model)
    del model
    gc.collect()
    assert alive() is None


@pytest.mark.parametrize(
    "case", ["plain", "no cost", "domain", "mutability", "groups frozen", "groups straight"]
)
def test_one_fused_step_run_eagerly_is_the_eager_step(case):
    """``fused_step`` is a plain tensor function: run without the compiler, iteration by
    iteration, it must move every row as ``eager_step`` does (the compiled search's tests then
    hold the compiler to it)."""
    model = small_mlp(seed=3)
    x0, target = factuals(model, n=32, seed=4)
    domain = (-1.0, 1.0) if case in ("domain", "groups frozen") else None
    mutability = MUTABILITY if case == "mutability" else None
    groups = [[8, 9, 10], [0, 1]] if case.startswith("groups") else None
    x0, target, c = generators.prepare_search(model, x0, target, domain, mutability, groups)
    s = StepSettings(0.6, 0.0 if case == "no cost" else 0.05, 0.3, 0.3, None, 1.0)
    s = replace(s, frozen=case != "groups straight")
    eager = WorkingSet.start(x0, target, fused=False)
    fused = WorkingSet.start(x0, target, fused=True)
    if groups:  # as NativeGenerator._search starts a search with groups
        offset0 = c.decode(x0) - x0
        within0 = offset0.abs().amax(1) <= s.epsilon
        eager.offset_sign = offset0.sign()
        for ws in (eager, fused):
            ws.within, ws.nascent = within0, x0.clone()
    bounds = None if c.lower is None else (c.lower, c.upper)
    decode = None if c.categorical is None else c.decode
    for t in range(12):
        phi = 0.3 * (t + 2) ** -0.9
        eager_step(model, eager, phi, c, s)
        with torch.no_grad():
            fused_step(
                model,
                fused.x,
                fused.x0,
                fused.nascent,
                fused.within,
                fused.active,
                fused.iterations,
                fused.target,
                torch.tensor(phi),
                s.scalars(x0.device),
                bounds,
                c.step_bounds(x0.dtype),
                s.lambda_cost != 0,
                decode,
                s.frozen,
            )
        # (with groups, a row that has converged keeps its state in the fused step and its
        # decoding in the eager one: the same point)
        assert torch.allclose(c.decode(fused.x), c.decode(eager.x), atol=1e-5), t
        assert torch.equal(fused.active, eager.active) and torch.equal(
            fused.iterations, eager.iterations
        )
        lazy, eager_nascent = fused.nascent.clone(), eager.nascent.clone()
        copy_rows(lazy, c.decode(fused.x), fused.within)
        copy_rows(eager_nascent, c.decode(eager.x), eager.within)
        assert torch.allclose(lazy, eager_nascent, atol=1e-5), t
    # The case is not trivial: rows converge, rows leave the epsilon ball, rows still search.
    assert 0 < int(eager.active.sum()) < 32
    assert not torch.allclose(eager_nascent, c.decode(eager.x))
    if domain:
        assert (eager.x.abs() == 1.0).any()


class _Odd(nn.Module):
    """A model whose input gradient at the origin is -inf, +inf and NaN in the first three
    features (sqrt(x) - sqrt(y) + sqrt(z**2)) and finite in the fourth."""

    def forward(self, x):
        z = x[:, 0].sqrt() - x[:, 1].sqrt() + (x[:, 2] ** 2).sqrt() + x[:, 3]
        return torch.stack([z, -z], 1)


def test_infinite_and_nan_gradients_step_alike_in_both_steps():
    """A NaN gradient is no step; an infinite one, without a domain, the largest finite float
    (nan_to_num's rule): the fused step as the eager one."""
    x0 = torch.tensor([[0.0, 0.0, 0.0, 0.5]] * 2)
    target = torch.zeros(2, dtype=torch.long)
    _, target, c = generators.prepare_search(_Odd(), x0, target, None, None)
    s = StepSettings(0.99, 0.0, 0.1, 0.3, None, 1.0)
    eager = WorkingSet.start(x0, target, fused=False)
    fused = WorkingSet.start(x0, target, fused=True)
    eager_step(_Odd(), eager, 0.5, c, s)
    with torch.no_grad():
        fused_step(
            _Odd(),
            *(fused.x, fused.x0, fused.nascent, fused.within, fused.active, fused.iterations),
            *(fused.target, torch.tensor(0.5), s.scalars(x0.device), None, None, False),
            None,
            True,
        )
    largest = torch.finfo(torch.float32).max
    for x in (eager.x, fused.x):
        assert x[:, 0].eq(0.1 * largest).all() and x[:, 1].eq(-0.1 * largest).all()
        assert x[:, 2].eq(0.0).all() and (x[:, 3] > 0.5).all()
    assert torch.equal(eager.x, fused.x)


def test_a_point_on_the_epsilon_ball_is_within_it():
    """The domain stops both features exactly at epsilon from the factual, one above and one
    below: that point is still a nascent point (|x - x0| <= epsilon)."""
    model = nn.Linear(2, 2)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[1.0, -1.0], [0.0, 0.0]]))
        model.bias.zero_()
    x = torch.zeros(3, 2)
    target = torch.zeros(3, dtype=torch.long)
    settings = {"maxiter": 8, "step_size": 0.2, "tau": 0.99, "epsilon": 0.25}
    for gen in (
        NativeGenerator(**settings, compile=False),
        NativeGenerator(**settings, compile=True),
        ReferenceGenerator(**settings),
    ):
        res = gen.generate(model, x, target, domain=(-0.25, 0.25))
        corner = torch.tensor([[0.25, -0.25]] * 3)
        assert torch.equal(res.counterfactual, corner) and torch.equal(res.nascent, corner)


@pytest.mark.parametrize("generator", [ReferenceGenerator, NativeGenerator])
def test_the_first_nascent_point_is_the_decoded_factual_only_within_epsilon(generator):
    """With one-hot groups the model first sees the decoded factual; it is the first nascent
    point when it lies within epsilon of the factual (here exactly at it), else the factual is."""
    model = nn.Linear(3, 2)
    x = torch.tensor([[0.75, 0.25, 0.0], [0.6, 0.4, 0.0]])
    res = generator(maxiter=0, epsilon=0.25).generate(
        model, x, torch.tensor([1, 1]), categorical=[[0, 1]]
    )
    assert torch.equal(res.nascent[0], torch.tensor([1.0, 0.0, 0.0]))  # 0.25 from x: within
    assert torch.equal(res.nascent[1], x[1])  # 0.4 from its decoding: the factual itself


def test_the_fused_step_scalars_are_float32_whatever_the_default_dtype():
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        scalars = StepSettings(0.75, 0.1, 0.1, 0.3, None, 1.0).scalars(torch.device("cpu"))
    finally:
        torch.set_default_dtype(default)
    assert scalars.dtype == torch.float32 and scalars.tolist() == pytest.approx(
        [0.75, 0.1, 0.1, 0.3]
    )


def test_forward_flops_count_one_row_of_the_model():
    # A linear layer's pass costs 2 * in * out FLOPs per row, whatever the batch it is given.
    assert compiled.forward_flops(nn.Linear(4, 3), torch.zeros(5, 4)) == 24
    mlp = nn.Sequential(nn.Linear(12, 16), nn.ReLU(), nn.Linear(16, 4))
    assert compiled.forward_flops(mlp, torch.zeros(9, 12)) == 2 * 12 * 16 + 2 * 16 * 4


def test_the_compiler_is_available_from_torch_2_8_on(monkeypatch):
    for version, available in [("2.7.1", False), ("2.8.0", True), ("2.14.1", True)]:
        monkeypatch.setattr(torch, "__version__", version)
        assert compiled.compiler_available() is available, version


def test_auto_compile_thresholds_are_inclusive():
    # Exactly AUTO_MIN_ELEMENTS elements, and a model of exactly AUTO_MAX_FLOPS_PER_FEATURE
    # FLOPs per feature (2 * 64 * 256 = 512 * 64), qualify; one row or one output less do not.
    d = 64
    rows = torch.zeros(compiled.AUTO_MIN_ELEMENTS // d, d)
    at_limit, over = nn.Linear(d, compiled.AUTO_MAX_FLOPS_PER_FEATURE // 2), nn.Linear(d, 257)
    steps = compiled.AUTO_COMPILE_STEPS["cpu"]
    assert compiled.forward_flops(at_limit, rows) == compiled.AUTO_MAX_FLOPS_PER_FEATURE * d
    assert compiled.auto_compiles(at_limit, rows, None, steps)
    assert not compiled.auto_compiles(at_limit, rows[1:], None, steps)
    assert not compiled.auto_compiles(over, rows, None, steps)


def test_the_compiled_step_runs_with_mutability_and_no_domain():
    # Step bounds without a domain's bounds: the compiled step must really run (no fallback
    # warning) and search as the per-sample reference does.
    model = small_mlp(seed=11)
    x, target = factuals(model)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fast = NativeGenerator(compile=True, tau=0.6).generate(
            model, x, target, mutability=MUTABILITY
        )
    slow = ReferenceGenerator(tau=0.6).generate(model, x, target, mutability=MUTABILITY)
    assert_same_search(fast, slow)
    assert torch.equal(fast.counterfactual[:, [8, 11]], x[:, [8, 11]])  # "none" held


def test_graphs_compiled_counts_each_new_graph_once():
    model = small_mlp(seed=13)
    x, target = factuals(model)
    before = compiled.graphs_compiled()
    for _ in range(2):  # the second search reuses the graph
        NativeGenerator(compile=True, tau=0.6).generate(model, x, target, domain=(-1, 1))
    assert compiled.graphs_compiled() == before + 1
    NativeGenerator(compile=True, tau=0.6).generate(model, x, target)  # no bounds: a new graph
    assert compiled.graphs_compiled() == before + 2


@pytest.mark.parametrize(
    "error, shown",
    [
        (RuntimeError("first line\nsecond line"), "RuntimeError: first line"),
        (KeyError(), "KeyError: "),
    ],
)
def test_a_failed_compile_names_its_error_and_searches_eagerly(monkeypatch, error, shown):
    def failing(*args, **kwargs):
        raise error

    monkeypatch.setattr(compiled, "_compile", failing)
    model = small_mlp(seed=17)
    x, target = factuals(model)
    with pytest.warns(RuntimeWarning) as caught:
        fast = NativeGenerator(compile=True, tau=0.6).generate(model, x, target)
    assert [str(w.message) for w in caught] == [
        f"cfbook: the compiled search step failed for Sequential ({shown}); searching with the "
        "eager step instead (NativeGenerator(compile=False) skips the attempt)"
    ]
    assert_same_search(fast, NativeGenerator(compile=False, tau=0.6).generate(model, x, target))


def test_with_autocast_validity_is_decided_in_full_precision():
    """p(target) is 0.7499 in float32 but 0.7506 from bf16 logits (1.098 rounds to 1.1015625):
    a bf16 search's counterfactual is valid only if the model, as it is, says so."""
    model = nn.Linear(1, 2, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[0.0], [1.098]]))
    x, target = torch.ones(1, 1), torch.tensor([1])
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        rounded = model(x).float().softmax(1)[0, 1]
    assert rounded >= 0.75 > model(x).softmax(1)[0, 1]  # the case is what it says
    res = NativeGenerator(maxiter=0, tau=0.75, amp="bf16").generate(model, x, target)
    assert not bool(res.valid[0])


@pytest.mark.parametrize("generator", [ReferenceGenerator, NativeGenerator])
def test_tau_may_be_one_but_not_zero_and_a_wrong_gradient_mode_lists_the_right_ones(generator):
    assert generator(tau=1.0).tau == 1.0  # a search that never stops early
    with pytest.raises(ValueError, match=r"tau must be a number in \(0, 1\], got 0\.0"):
        generator(tau=0.0)
    with pytest.raises(ValueError, match="must be one of frozen, straight_through, got 'soft'"):
        generator(categorical_gradient="soft")


@pytest.mark.parametrize("generator", [ReferenceGenerator, NativeGenerator])
def test_no_rows_search_to_no_counterfactuals(generator):
    model = small_mlp()
    x, target = factuals(model, n=4)
    res = generator().generate(model, x[:0], target[:0], domain=(-1.0, 1.0))
    assert res.counterfactual.shape == (0, N_FEATURES) and res.valid.shape == (0,)


@pytest.mark.parametrize("generator", [ReferenceGenerator, NativeGenerator])
def test_a_float64_search_stops_at_its_float64_bounds(generator):
    """0.1 is no float32 number: bounds kept in the search's dtype stop it at 0.1 exactly."""
    model = nn.Linear(2, 2).double()
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[1.0, -1.0], [-1.0, 1.0]]))
        model.bias.zero_()
    x, target = torch.zeros(3, 2, dtype=torch.float64), torch.zeros(3, dtype=torch.long)
    res = generator(maxiter=5, step_size=1.0, tau=0.99).generate(
        model, x, target, domain=(-0.1, 0.1)
    )
    expected = torch.tensor([[0.1, -0.1]] * 3, dtype=torch.float64)
    assert torch.equal(res.counterfactual, expected)


@pytest.mark.parametrize("compile", [False, True], ids=["eager", "compiled"])
def test_per_row_energy_weights_agree_with_reference(compile):
    # Rows with their own lambda_energy (chunked, compacted, under a mutability) search as the
    # per-sample reference does with each row's weight; weight 0 turns the energy term off.
    model = small_mlp()
    x, target = factuals(model)
    weights = torch.tensor([0.0, 0.5, 5.0, 20.0]).repeat(12)
    kwargs = {"domain": [(-1.0, 1.0)] * N_FEATURES, "mutability": MUTABILITY}
    params = {"tau": 0.6, "maxiter": 30}
    native = NativeGenerator(compact_every=3, cf_batchsize=7, compile=compile, **params)
    fast = native.generate(model, x, target, lambda_energy=weights, **kwargs)
    slow = ReferenceGenerator(**params).generate(model, x, target, lambda_energy=weights, **kwargs)
    assert_same_search(fast, slow)
    plain = native.generate(model, x, target, **kwargs)  # every row at the generator's 1.0
    assert not torch.equal(plain.counterfactual, fast.counterfactual)


def test_row_energy_weights_are_the_schedule_bit_for_bit():
    for maxiter in (0, 12, 30, 50, 100):
        search = SearchParameters(maxiter=maxiter)
        weights = torch.tensor([0.0, 0.1, 1.0, 5.0, 10.0, 1 / 3])
        table = search.row_energy_weights(weights)
        assert table.shape == (6, maxiter) and table.dtype == torch.float32
        for i, w in enumerate(weights.tolist()):
            own = replace(search, lambda_energy=w)
            expected = torch.tensor([own.energy_weight(t) for t in range(maxiter)])
            assert torch.equal(table[i], expected)


def test_per_row_energy_weights_are_checked():
    model = small_mlp()
    x, target = factuals(model, n=4)
    search = NativeGenerator(maxiter=2)
    with pytest.raises(ValueError, match=r"one energy weight per row of x \(4\), got shape \(3,\)"):
        search.generate(model, x, target, lambda_energy=[1.0, 1.0, 1.0])
    with pytest.raises(ValueError, match=r"non-negative, got \[-1.0, nan\] at rows \[1, 3\]"):
        search.generate(model, x, target, lambda_energy=[1.0, -1.0, 0.0, float("nan")])
    with pytest.raises(ValueError, match=r"got \[inf\] at rows \[0\]"):
        ReferenceGenerator(maxiter=2).generate(
            model, x, target, lambda_energy=[float("inf"), 1.0, 1.0, 1.0]
        )
