"""The batched search (``NativeGenerator``) and its two executors, the eager and the compiled
step, held to the per-sample reference (``ReferenceGenerator``)."""

import functools
import gc
import math
import os
import re
import warnings
import weakref
from dataclasses import replace

import pytest
import torch
from conftest import scaled_mlp
from torch import nn

from cfbook import NativeGenerator, ReferenceGenerator
from cfbook.search import compiled, generators
from cfbook.search.generators import PAPER_SEARCH, SearchParameters
from cfbook.search.step import step_scalars

N_FEATURES, N_CLASSES = 12, 4
MUTABILITY = ["both"] * 8 + ["none", "increase", "decrease", "none"]
GROUPS = [[0, 1, 2], [3, 4], [5]]  # two one-hot groups and a 0/1 column, all mutable
DOMAIN = [(-1.5, 1.5)] * N_FEATURES


# A random MLP with large enough weights that most searches converge.
small_mlp = functools.partial(scaled_mlp, N_FEATURES, N_CLASSES)


class _Image(nn.Module):
    """A convolutional model of flat rows: each row is a 3 x 4 image."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(2)
        self.conv = nn.Conv2d(1, 4, 2)
        self.head = nn.Linear(4 * 2 * 3, N_CLASSES)
        with torch.no_grad():
            for p in self.parameters():
                p.mul_(4.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.conv(x.view(-1, 1, 3, 4)).relu().flatten(1))


def _batchnorm() -> nn.Module:
    """An MLP with batch normalisation, searched in eval mode on its running statistics."""
    torch.manual_seed(1)
    model = nn.Sequential(
        nn.Linear(N_FEATURES, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, N_CLASSES)
    )
    with torch.no_grad():
        model[1].running_mean.uniform_(-0.5, 0.5)
        model[1].running_var.uniform_(0.1, 0.5)
        model[0].weight.mul_(3.0)
    return model.eval()


MODELS = {"mlp": small_mlp, "batchnorm": _batchnorm, "conv": _Image}


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
    assert fast.iterations.dtype == slow.iterations.dtype == torch.long


def count_compiled_steps(monkeypatch) -> list[bool]:
    """From now on, each call of the compiled executor: True where it stepped (not failed)."""
    calls: list[bool] = []
    original = compiled.step

    def spy(*args, **kwargs):
        out = original(*args, **kwargs)
        calls.append(out is not None)
        return out

    monkeypatch.setattr(compiled, "step", spy)
    return calls


# One matrix holds both executors to the reference: every model kind under each constraint
# layout (straight-through groups: tests/test_categorical.py). Each case: domain, mutability,
# one-hot groups (with their gradient mode), record,
# (compact_every, cf_batchsize), per-row energy weights.
CASES = {
    "free": (None, None, None, False, (5, None), False),
    "domain-mutability": (DOMAIN, MUTABILITY, None, False, (1, None), False),
    "groups-frozen": (DOMAIN, None, "frozen", False, (5, None), False),
    "groups-mutability": (None, MUTABILITY, "frozen", False, (5, None), False),
    "record": (DOMAIN, MUTABILITY, "frozen", True, (5, None), False),
    "chunks": (DOMAIN, None, None, False, (3, 7), False),
    "per-row-energy": (None, MUTABILITY, None, False, (5, None), True),
    "everything": (DOMAIN, MUTABILITY, "frozen", False, (3, 7), True),
}


# The convolutional model meets no one-hot groups: on its 0/1 group columns its probabilities
# saturate and almost no search reaches its target, which would test nothing. The compiled
# executor meets every layout with the MLP and the other models in two (each model and layout
# is a compile of seconds).
MATRIX = [
    (compile, k, c)
    for compile in (False, True)
    for k in MODELS
    for c in CASES
    if not (k == "conv" and CASES[c][2])
    and (not compile or k == "mlp" or c in ("free", "domain-mutability"))
]


@pytest.mark.parametrize(
    ("compile", "kind", "case"),
    MATRIX,
    ids=[f"{'compiled' if x else 'eager'}-{k}-{c}" for x, k, c in MATRIX],
)
def test_both_executors_agree_with_the_reference(monkeypatch, compile, kind, case):
    domain, mutability, mode, record, (compact_every, cf_batchsize), per_row = CASES[case]
    model = MODELS[kind]()
    x, target = factuals(model)
    if mode is not None:
        # The groups start one-hot; the 0/1 column starts at 0 or 1.
        x[:, :3] = nn.functional.one_hot(x[:, :3].argmax(1), 3).float()
        x[:, 3:5] = nn.functional.one_hot(x[:, 3:5].argmax(1), 2).float()
        x[:, 5] = (x[:, 5] > 0).float()
    params = {"tau": 0.6, "maxiter": 30}
    if mode is not None:
        params["categorical_gradient"] = mode
    kwargs = {"domain": domain, "mutability": mutability}
    if mode is not None:
        kwargs["categorical"] = GROUPS
    if per_row:
        kwargs["lambda_energy"] = torch.tensor([0.0, 0.5, 5.0, 20.0]).repeat(len(x) // 4)
    native = NativeGenerator(
        compact_every=compact_every, cf_batchsize=cf_batchsize, compile=compile, **params
    )
    steps = count_compiled_steps(monkeypatch)
    fast = native.generate(model, x, target, record=record, **kwargs)
    slow = ReferenceGenerator(**params).generate(model, x, target, **kwargs)
    # The compiled executor ran every step it was asked for (a record is searched eagerly).
    assert (bool(steps) and all(steps)) if compile and not record else not steps
    # The case exercises both outcomes and early stopping at several steps.
    assert 0 < int(slow.valid.sum()) < len(x)
    assert len(slow.iterations.unique()) >= 3
    assert_same_search(fast, slow)
    if record:
        assert fast.path.shape == (params["maxiter"] + 1, *x.shape)
        assert torch.equal(fast.path[0], x) and torch.equal(fast.path[-1], fast.counterfactual)


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


@pytest.mark.parametrize("compile", [False, True], ids=["eager", "compiled"])
def test_no_host_sync_per_iteration(monkeypatch, compile):
    model = small_mlp(scale=0.5)  # nothing converges: the loop runs all iterations
    x, target = factuals(model)
    gen = NativeGenerator(maxiter=30, compact_every=10, compile=compile)
    gen.generate(model, x, target)  # a compile happens outside the count
    syncs = count_host_syncs(monkeypatch)
    res = gen.generate(model, x, target)
    monkeypatch.undo()
    assert int(res.iterations.min()) == 30
    # the checks of the inputs before the search (finite values, logits, target range: 3) and
    # one read per compaction point, far fewer than iterations
    assert gen.compaction_points() == [1, 2, 4, 10, 20]
    assert len(syncs) <= 3 + len(gen.compaction_points()), syncs


def test_bf16_search_stays_valid(monkeypatch):
    model = small_mlp()
    x, target = factuals(model)
    ref = NativeGenerator(tau=0.6).generate(model, x, target, domain=(-1.0, 1.0))
    res = NativeGenerator(tau=0.6, amp="bf16").generate(model, x, target, domain=(-1.0, 1.0))
    # The compiled step runs float32 only: asked to compile, a bf16 search stays eager.
    calls = count_compiled_steps(monkeypatch)
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


@pytest.mark.parametrize("compile", [False, True], ids=["eager", "compiled"])
def test_factuals_that_already_reach_tau_are_returned_untouched(compile):
    model = small_mlp()
    x, target = factuals(model)
    x = x * 1.5  # partly outside the domain: an unmoved factual must not even be clamped
    search = NativeGenerator(tau=0.2, compile=compile)
    res = search.generate(model, x, target, domain=(-1.0, 1.0))
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


@pytest.mark.compiles
@pytest.mark.parametrize("domain", [(-1.0, 1.0), None], ids=["domain", "no-domain"])
def test_compiled_search_agrees_with_reference_on_nan_rows_and_chunks(domain):
    # Rows of huge finite inputs, whose logits overflow to NaN (inf - inf): their gradient is
    # NaN, stepped by 0. The same MLP as the other compiled tests, so no graph compiles again.
    model = small_mlp()
    x, target = factuals(model)
    x[[3, 10]] = 3e38
    params = {"tau": 0.6, "maxiter": 30}
    # Chunks of 47 and 1 rows: the single row is searched eagerly (the compiled step needs two).
    fast = NativeGenerator(compile=True, cf_batchsize=47, **params).generate(
        model, x, target, domain=domain
    )
    slow = ReferenceGenerator(**params).generate(model, x, target, domain=domain)
    assert_same_search(fast, slow)
    if domain is None:  # never moved, never converged
        assert not bool(slow.valid[[3, 10]].any()) and bool((slow.iterations[[3, 10]] == 30).all())
        assert torch.equal(fast.counterfactual[[3, 10]], x[[3, 10]])
        assert torch.equal(fast.nascent[[3, 10]], x[[3, 10]])
    else:  # the domain's clamp brings them back, where they search as any row
        assert bool((fast.counterfactual[[3, 10]].abs() <= 1).all())


@pytest.mark.parametrize("generator", [NativeGenerator(), ReferenceGenerator()], ids=type)
def test_nan_and_infinite_inputs_are_refused_as_in_training(generator):
    model = small_mlp()
    x, target = factuals(model, 8)
    x[3, 2], x[5, 0] = float("nan"), float("inf")
    message = "x holds 1 NaN value and 1 infinite value (rows 3, 5): drop or impute them first"
    with pytest.raises(ValueError, match=re.escape(message)):
        generator.generate(model, x, target)


@pytest.mark.compiles
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


def _graphs() -> int:
    """How many graphs torch.compile has built in this process."""
    return torch._dynamo.utils.counters["stats"]["unique_graphs"]


@pytest.mark.compiles
def test_a_chunked_compiled_search_compiles_one_graph():
    """Chunks are views of the rows, compacted rows are copies, the first step's state is the
    factuals: none of it may compile a second graph."""
    torch.manual_seed(9)
    model = nn.Sequential(nn.Linear(N_FEATURES, 7), nn.Tanh(), nn.Linear(7, N_CLASSES))
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(4.0)
    x, target = factuals(model)
    before = _graphs()
    search = NativeGenerator(compile=True, tau=0.6, cf_batchsize=20, compact_every=2)
    found = search.generate(model, x, target, domain=(-1.0, 1.0))
    assert _graphs() == before + 1
    assert len(found.iterations.unique()) > 2  # rows left at several compaction points


@pytest.mark.compiles
def test_compiled_search_reuses_its_graph_across_settings_sizes_and_models():
    """A training run searches every epoch, with shrinking working sets: once compiled, new
    sizes, tau, lambdas and step sizes must not compile again."""
    model = small_mlp()
    x, target = factuals(model)
    NativeGenerator(compile=True, tau=0.6).generate(model, x, target, domain=(-1.0, 1.0))
    before = _graphs()
    other = small_mlp(seed=3)  # another model of the same architecture: the same graph
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
    assert _graphs() == before


@pytest.mark.compiles
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


@pytest.mark.compiles
def test_a_forward_hook_added_after_the_compile_compiles_again():
    model = small_mlp(seed=12)
    x, target = factuals(model)
    NativeGenerator(compile=True, tau=0.6).generate(model, x, target)
    model.register_forward_hook(lambda module, args, out: 3 * out)  # sharper probabilities
    fast = NativeGenerator(compile=True, tau=0.6).generate(model, x, target)
    slow = ReferenceGenerator(tau=0.6).generate(model, x, target)
    assert_same_search(fast, slow)


@pytest.mark.compiles
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


@pytest.mark.compiles
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
    assert len(syncs) <= 3 + len(gen.compaction_points()), syncs  # 3: the input checks


class _DataDependent(nn.Module):
    """An MLP whose forward branches on the values of its input: no graph can hold it."""

    def __init__(self) -> None:
        super().__init__()
        self.net = small_mlp()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x) if bool(x.abs().sum() >= 0) else -self.net(x)


@pytest.mark.compiles
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

    monkeypatch.setattr(compiled, "_compiled", no_compiler)
    model = small_mlp(seed=5)
    x, target = factuals(model)
    with pytest.warns(RuntimeWarning, match="no working C\\+\\+ compiler"):
        fast = NativeGenerator(compile=True, tau=0.6).generate(model, x, target, domain=(-1, 1))
    eager = NativeGenerator(compile=False, tau=0.6).generate(model, x, target, domain=(-1, 1))
    assert_same_search(fast, eager, atol=0)


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
    # A search takes its rows in those chunks.
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


@pytest.mark.compiles
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


@pytest.mark.compiles
def test_compiled_lazy_nascent_points_match_the_reference():
    """The step keeps nascent points lazily (see SearchState): rows still within epsilon at
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


@pytest.mark.compiles
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


@pytest.mark.compiles
def test_a_compiled_model_is_freed():
    """A training script that builds a model per seed must not keep every model alive."""
    model = small_mlp(seed=11)
    x, target = factuals(model)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the compiled step must really run
        NativeGenerator(compile=True, tau=0.6).generate(model, x, target)
    alive = weakref.ref(model)
    del model
    gc.collect()
    assert alive() is None


class _Odd(nn.Module):
    """A model whose input gradient at the origin is -inf, +inf and NaN in the first three
    features (sqrt(x) - sqrt(y) + sqrt(z**2)) and finite in the fourth."""

    def forward(self, x):
        z = x[:, 0].sqrt() - x[:, 1].sqrt() + (x[:, 2] ** 2).sqrt() + x[:, 3]
        return torch.stack([z, -z], 1)


@pytest.mark.parametrize("compile", [False, True], ids=["eager", "compiled"])
def test_infinite_and_nan_gradients_step_by_nan_to_num_s_rule(compile):
    """A NaN gradient is no step; an infinite one, without a domain, the largest finite float."""
    x0 = torch.tensor([[0.0, 0.0, 0.0, 0.5]] * 2)
    target = torch.zeros(2, dtype=torch.long)
    search = NativeGenerator(maxiter=1, tau=0.99, lambda_cost=0.0, compile=compile)
    x = search.generate(_Odd(), x0, target).counterfactual
    largest = torch.finfo(torch.float32).max
    assert x[:, 0].eq(0.1 * largest).all() and x[:, 1].eq(-0.1 * largest).all()
    assert x[:, 2].eq(0.0).all() and (x[:, 3] > 0.5).all()


@pytest.mark.parametrize("compile", [False, True, None], ids=["eager", "compiled", "reference"])
def test_a_point_on_the_epsilon_ball_is_within_it(compile):
    """The domain stops both features exactly at epsilon from the factual, one above and one
    below: that point is still a nascent point (|x - x0| <= epsilon)."""
    model = nn.Linear(2, 2)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[1.0, -1.0], [0.0, 0.0]]))
        model.bias.zero_()
    x = torch.zeros(3, 2)
    target = torch.zeros(3, dtype=torch.long)
    settings = {"maxiter": 8, "step_size": 0.2, "tau": 0.99, "epsilon": 0.25}
    if compile is None:
        gen = ReferenceGenerator(**settings)
    else:
        gen = NativeGenerator(**settings, compile=compile)
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


def test_the_step_scalars_take_the_search_s_dtype_whatever_the_default_dtype():
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        scalars = step_scalars(0.75, 0.1, 0.1, 0.3, torch.zeros(2, 3, dtype=torch.float32))
    finally:
        torch.set_default_dtype(default)
    assert scalars.dtype == torch.float32 and scalars.tolist() == pytest.approx(
        [0.75, 0.1, 0.1, 0.3]
    )
    wide = step_scalars(0.6, 0.1, 0.1, 0.3, torch.zeros(2, 3, dtype=torch.float64))
    assert wide.dtype == torch.float64 and wide.tolist() == [0.6, 0.1, 0.1, 0.3]  # exactly


@pytest.mark.compiles
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

    monkeypatch.setattr(compiled, "_compiled", failing)
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


def test_compile_is_a_bool_and_part_of_the_settings_only_when_true():
    """A compiled search differs from an eager one in its last bits, so a run's identity names
    it; an eager run's settings stay as they were before the setting existed."""
    assert "compile" not in NativeGenerator().settings()
    assert NativeGenerator(compile=True).settings()["compile"] is True
    for bad in ("auto", 1, None):
        with pytest.raises(ValueError, match="compile must be True or False"):
            NativeGenerator(compile=bad)
