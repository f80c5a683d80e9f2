"""One-hot (categorical) features in the counterfactual search: each group decoded to its largest
entry at every step, as CounterfactualExplanations.jl's ``reconstruct_cat_encoding`` does."""

import functools

import pytest
import torch
from conftest import scaled_mlp
from torch import nn

from cfbook import NativeGenerator, ReferenceGenerator
from cfbook.data.tabular import build
from cfbook.search.constraints import make_constraints

# 3 numeric columns, two one-hot groups, a 0/1 column, and an immutable group.
N_NUMERIC, N_CLASSES = 3, 3
GROUPS = [[3, 4, 5], [6, 7, 8, 9], [10], [11, 12]]
N_FEATURES = 13
MUTABILITY = ["both", "none", "increase"] + ["both"] * 8 + ["none", "none"]
MODES = ("frozen", "straight_through")


person_mlp = functools.partial(scaled_mlp, N_FEATURES, N_CLASSES, scale=8.0)


def persons(model: nn.Module, n: int = 40, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Factuals whose groups are exact one-hot vectors, and targets other than the prediction."""
    g = torch.Generator().manual_seed(seed)
    x = torch.zeros(n, N_FEATURES)
    x[:, :N_NUMERIC] = torch.rand(n, N_NUMERIC, generator=g) * 2 - 1
    rows = torch.arange(n)
    for group in (GROUPS[0], GROUPS[1], GROUPS[3]):
        x[rows, group[0] + torch.randint(0, len(group), (n,), generator=g)] = 1.0
    x[:, 10] = (torch.rand(n, generator=g) > 0.5).float()
    with torch.no_grad():
        pred = model(x).argmax(1)
    target = (pred + torch.randint(1, N_CLASSES, (n,), generator=g)) % N_CLASSES
    return x, target


def assert_persons(points: torch.Tensor) -> None:
    """Every group an exact one-hot vector, the 0/1 column exactly 0 or 1."""
    for group in (GROUPS[0], GROUPS[1], GROUPS[3]):
        part = points[:, group]
        assert bool(((part == 0) | (part == 1)).all()), part
        assert torch.equal(part.sum(1), torch.ones(len(points)))
    assert bool(((points[:, 10] == 0) | (points[:, 10] == 1)).all())


def test_decode_takes_the_first_largest_entry_and_rounds_a_binary_column():
    c = make_constraints(None, None, 6, device="cpu", categorical=[[0, 1, 2], [3], [4, 5]])
    x = torch.tensor([[0.2, 0.7, 0.7, 0.6, -1.0, -2.0], [-1.0, -3.0, -0.5, 0.5, 3.0, 3.1]])
    assert c.decode(x).tolist() == [[0, 1, 0, 1, 1, 0], [0, 0, 1, 0, 0, 1]]
    assert x[0, 1] == 0.7  # decode returns a new tensor
    # A domain that excludes 1 for a level: that level is never chosen.
    domain = [(0.0, 1.0), (0.0, 0.5), (0.0, 1.0)] + [(0.0, 1.0)] * 3
    c = make_constraints(domain, None, 6, device="cpu", categorical=[[0, 1, 2]])
    assert c.decode(torch.tensor([[0.1, 0.9, 0.2, 0.25, 0.25, 0.25]])).tolist() == [
        [0.0, 0.0, 1.0, 0.25, 0.25, 0.25]
    ]


def test_groups_are_checked():
    for bad, match in (
        ([[0, 1], [1, 2]], "two groups"),
        ([[0, 7]], "outside"),
        ([[]], "at least one"),
        ([0, 1], "sequence of groups"),
        ("01", "not a string"),
    ):
        with pytest.raises(ValueError, match=match):
            make_constraints(None, None, 3, device="cpu", categorical=bad)
    with pytest.raises(ValueError, match="wholly"):
        make_constraints(None, ["none", "both", "both"], 3, device="cpu", categorical=[[0, 1]])
    with pytest.raises(ValueError, match="wholly"):
        make_constraints(None, ["increase"] * 3, 3, device="cpu", categorical=[[0, 1]])
    with pytest.raises(ValueError, match="categorical_gradient"):
        NativeGenerator(categorical_gradient="soft")
    # Wholly immutable groups are not decoded; no groups left: nothing to decode.
    c = make_constraints(None, ["none", "none", "both"], 3, device="cpu", categorical=[[0, 1]])
    assert c.categorical is None


def _toy(w_last: float) -> nn.Module:
    """Two classes, logits (0, w . x - 3) with w = (0, 4 | 0, 0, w_last): the groups are columns
    [0, 1] and [2, 3, 4]."""
    model = nn.Linear(5, 2)
    with torch.no_grad():
        model.weight.zero_()
        model.weight[1] = torch.tensor([0.0, 4.0, 0.0, 0.0, w_last])
        model.bias.copy_(torch.tensor([0.0, -3.0]))
    return model


TOY_GROUPS = [[0, 1], [2, 3, 4]]
TOY = {"tau": 0.5, "lambda_cost": 0.0, "lambda_energy": 0.0, "step_size": 0.1, "maxiter": 30}


@pytest.mark.parametrize("generator", [NativeGenerator, ReferenceGenerator])
def test_hand_computed_toy(generator):
    """By hand: at x0 = (1, 0 | 1, 0, 0) the target logit is -3, p = sigmoid(-3) = 0.0474, and a
    step adds 0.1 (1 - p) w = (0, 0.381 | 0, 0, 0.572) to the state (no cost, no energy).

    - Without groups one step already reaches p >= 0.5 (logit 0.381 * 4 + 0.572 * 6 - 3 = 1.95)
      at a point that is no person: (1, 0.381 | 1, 0, 0.572).
    - Decoded, that point is x0 again: the prediction flips back. Straight through, the state
      keeps the steps: after two, column 4 holds 1.143 > 1, the group decodes to its third level,
      the logit is 6 - 3 = 3 and the search stops at (1, 0 | 0, 0, 1), valid, after 2 steps
      (column 1, at 0.762, has not passed column 0).
    - Frozen, the state is overwritten by x0 after every step: it never moves, and the search
      ends invalid at x0 after maxiter steps ...
    - ... unless one step carries a level past the current one: with w_last = 20 the first step
      adds 1.905 to column 4 and the search stops after 1 step at (1, 0 | 0, 0, 1).
    """
    x0 = torch.tensor([[1.0, 0.0, 1.0, 0.0, 0.0]])
    target = torch.tensor([1])
    model = _toy(6.0)
    p = torch.sigmoid(torch.tensor(-3.0))
    raw = generator(**TOY).generate(model, x0, target)
    expected = torch.tensor([[1.0, 0.4 * (1 - p), 1.0, 0.0, 0.6 * (1 - p)]])
    torch.testing.assert_close(raw.counterfactual, expected)
    assert bool(raw.valid) and int(raw.iterations) == 1

    through = generator(**TOY, categorical_gradient="straight_through").generate(
        model, x0, target, categorical=TOY_GROUPS
    )
    assert through.counterfactual.tolist() == [[1.0, 0.0, 0.0, 0.0, 1.0]]
    assert bool(through.valid) and int(through.iterations) == 2

    frozen = generator(**TOY, categorical_gradient="frozen").generate(
        model, x0, target, categorical=TOY_GROUPS
    )
    assert torch.equal(frozen.counterfactual, x0)
    assert not bool(frozen.valid) and int(frozen.iterations) == TOY["maxiter"]

    big = generator(**TOY).generate(_toy(20.0), x0, target, categorical=TOY_GROUPS)
    assert big.counterfactual.tolist() == [[1.0, 0.0, 0.0, 0.0, 1.0]]
    assert bool(big.valid) and int(big.iterations) == 1


def _compare(fast, slow, atol: float = 1e-5) -> None:
    for name in ("counterfactual", "nascent"):
        torch.testing.assert_close(getattr(fast, name), getattr(slow, name), atol=atol, rtol=0)
    assert torch.equal(fast.valid, slow.valid)
    assert torch.equal(fast.iterations, slow.iterations)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    "compile,compact_every,cf_batchsize",
    [(False, 1, None), (False, 5, 7), (True, 3, None)],
    ids=["eager", "eager-chunked", "compiled"],
)
def test_batched_agrees_with_reference(mode, compile, compact_every, cf_batchsize):
    model = person_mlp()
    x, target = persons(model)
    kwargs = {"domain": [(-1.5, 1.5)] * N_FEATURES, "mutability": MUTABILITY, "categorical": GROUPS}
    params = {"tau": 0.6, "categorical_gradient": mode}
    native = NativeGenerator(
        compile=compile, compact_every=compact_every, cf_batchsize=cf_batchsize, **params
    )
    fast = native.generate(model, x, target, **kwargs)
    slow = ReferenceGenerator(**params).generate(model, x, target, **kwargs)
    # Both outcomes, and stops at many different steps, or the comparison is weak.
    assert 0 < int(slow.valid.sum()) < len(x)
    assert len(slow.iterations.unique()) >= 5
    _compare(fast, slow)
    for found in (fast, slow):
        assert_persons(found.counterfactual)
        assert_persons(found.nascent)
        cf = found.counterfactual
        assert torch.equal(cf[:, 11:], x[:, 11:])  # the immutable group
        assert torch.equal(cf[:, 1], x[:, 1]) and bool((cf[:, 2] >= x[:, 2]).all())
        assert float(cf.min()) >= -1.5 and float(cf.max()) <= 1.5
        changed = (cf[:, 3:10] != x[:, 3:10]).any(1)
        assert bool(changed.any())  # categories did change
        # validity is that of the decoded counterfactual
        with torch.no_grad():
            p = model(cf).softmax(1).gather(1, target[:, None]).squeeze(1)
        assert torch.equal(found.valid, p >= 0.6)


def test_gradient_modes_differ_with_groups_only():
    model = person_mlp()
    x, target = persons(model)
    found = {
        mode: NativeGenerator(tau=0.6, categorical_gradient=mode, compile=False).generate(
            model, x, target, categorical=GROUPS
        )
        for mode in MODES
    }
    assert not torch.equal(found["frozen"].counterfactual, found["straight_through"].counterfactual)
    # Straight through, small steps accumulate: categories change more often.
    changes = {m: int((f.counterfactual[:, 3:11] != x[:, 3:11]).sum()) for m, f in found.items()}
    assert changes["straight_through"] > changes["frozen"]
    plain = [
        NativeGenerator(tau=0.6, categorical_gradient=mode, compile=False).generate(
            model, x, target
        )
        for mode in MODES
    ]
    assert torch.equal(plain[0].counterfactual, plain[1].counterfactual)


def test_settings_name_the_mode_when_it_is_not_the_default():
    assert "categorical_gradient" not in NativeGenerator().settings()
    assert "categorical_gradient" not in ReferenceGenerator().settings()
    through = NativeGenerator(categorical_gradient="straight_through")
    assert through.settings() == {
        **NativeGenerator().settings(),
        "categorical_gradient": "straight_through",
    }
    assert NativeGenerator(**through.settings()) == through


def test_tabular_groups_with_and_without_substring_match():
    table = {
        "edu": ["a", "b", "a", "c", "b"],
        "edu_num": ["1", "2", "1", "3", "2"],
        "sex": ["f", "m", "m", "f", "f"],
        "age": ["30", "40", "50", "60", "70"],
    }
    labels = torch.tensor([0, 1, 0, 1, 0]).numpy()
    data = build("toy", table, labels, ("edu", "sex"), source="test")
    assert data.columns == ["edu=a", "edu=b", "edu=c", "edu_num", "sex=f", "sex=m", "age"]
    assert data.one_hot == {"edu": [0, 1, 2], "sex": [4, 5]}
    assert data.categorical_groups(substring_match=False) == [[0, 1, 2], [4, 5]]
    assert data.categorical_groups() == [[0, 1, 2, 3], [4, 5]]  # as TaijaData's get_cats


def test_adult_education_group_takes_education_num_as_in_ct_jl():
    from cfbook.data.tabular import load_adult

    adult = load_adult()
    exact, matched = adult.categorical_groups(False), adult.categorical_groups()
    assert len(exact) == 8 and exact == list(adult.one_hot.values())
    education = list(adult.one_hot).index("education")
    num = adult.features["education_num"]
    assert matched[education] == exact[education] + num
    assert [g for i, g in enumerate(matched) if i != education] == [
        g for i, g in enumerate(exact) if i != education
    ]


@pytest.mark.compiles
def test_one_model_compiled_in_both_gradient_modes_keeps_them_apart():
    # The compiled step of each mode is its own graph: the second mode's search on the same model
    # must not reuse the first mode's.
    model = person_mlp()
    x, target = persons(model)
    kwargs = {"domain": [(-1.5, 1.5)] * N_FEATURES, "categorical": GROUPS}
    for mode in MODES:
        fast = NativeGenerator(tau=0.6, categorical_gradient=mode, compile=True).generate(
            model, x, target, **kwargs
        )
        slow = ReferenceGenerator(tau=0.6, categorical_gradient=mode).generate(
            model, x, target, **kwargs
        )
        _compare(fast, slow)
