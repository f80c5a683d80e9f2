"""The paper's evaluation protocol (``cfbook.evaluation.protocol``) on small models."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from torch import nn

from cfbook.evaluation import protocol as protocol_module
from cfbook.evaluation.measures import compared_measures
from cfbook.evaluation.metrics import ip_star, mmd2
from cfbook.evaluation.protocol import PaperProtocol, _run_measures, paper_evaluate
from cfbook.evaluation.statistics import compare_models
from cfbook.search.generators import NativeGenerator
from cfbook.search.interface import CounterfactualResult, Generator


def _by_sign(column: int, scale: float = 4.0) -> nn.Module:
    """A two-class linear model that predicts class 1 where x[column] > 0."""
    model = nn.Linear(2, 2)
    with torch.no_grad():
        model.weight.zero_()
        model.bias.zero_()
        model.weight[1, column], model.weight[0, column] = scale, -scale
    return model


@pytest.fixture
def toy():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(200, 2, generator=g)
    y = (x[:, 0] > 0).long()  # the true labels follow x1
    return x, y


def _spy_on_searches(monkeypatch, weight_of) -> list:
    """Record each search the protocol runs: (model, x0, target, ``weight_of(self, kwargs)``,
    tau)."""
    calls = []
    original = NativeGenerator.generate

    def spy(self, model, x0, target, **kwargs):
        calls.append((model, x0.clone(), target.clone(), weight_of(self, kwargs), self.tau))
        return original(self, model, x0, target, **kwargs)

    monkeypatch.setattr(NativeGenerator, "generate", spy)
    return calls


def test_individuals_keep_their_classes_across_runs_and_models(toy, monkeypatch):
    x, y = toy
    # The second model predicts by x2: its factuals differ from the first model's.
    models = {"ct": _by_sign(0), "baseline": _by_sign(1)}
    calls = _spy_on_searches(monkeypatch, lambda self, kwargs: self.lambda_energy)
    protocol = PaperProtocol(rounds=6, individuals=20, energy_weights=(0.1, 5.0), tau=0.9)
    out = paper_evaluate(models, x, y, protocol)
    assert len(calls) == 2 * 2  # one batched search per model and energy weight
    for i, (model, x0, target, weight, tau) in enumerate(calls):
        assert x0.shape == (120, 2) and weight in (0.1, 5.0) and tau == 0.9
        first = target[:20]
        assert 0 < int(first.sum()) < 20  # classes are mixed within a run
        for r in range(6):
            part = slice(20 * r, 20 * r + 20)
            assert torch.equal(target[part], first)  # fixed across runs
            factual = 1 - target[part]  # two classes: the factual class is the other one
            assert (model(x0[part]).argmax(1) == factual).all()  # predicted as the factual
        # Both models of one energy weight search for the same individuals.
        assert torch.equal(target, calls[i ^ 1][2])
    assert not torch.equal(calls[0][2], calls[2][2])  # each energy weight draws its own
    for name in models:
        for values in out["per_round"][name].values():
            assert len(values) == 6
        assert all(0.0 <= v <= 1.0 for v in out["per_round"][name]["validity"])
    assert [w["energy_weight"] for w in out["by_weight"]["ct"]] == [0.1, 5.0]


class _Step(nn.Module):
    """Class 1 where x1 > 1.5; ``overshoot`` is how far beyond the target class's x1 the stub
    search below puts its counterfactuals, per unit of energy weight."""

    def __init__(self, overshoot: float) -> None:
        super().__init__()
        self.overshoot = overshoot

    def forward(self, x):
        z = (x[:, :1] - 1.5) * 10
        return torch.cat([-z, z], 1)


def test_a_hand_computed_evaluation(monkeypatch):
    # Test points: class 0 at (0, 0), (0, 1); class 1 at (3, 0), (3, 1). The stub search moves
    # x1 to the target class's 3 or 0, and the baseline's a further w (the energy weight) past
    # it. CT: cost 3, and IP = mean L1 to the target class, |y - 0| + |y - 1| = 1 over two
    # references: 0.5. Baseline at weight w: cost 3 + w, IP w + 0.5. Weights 1 and 2: the run's
    # figures are their means, 4.5 and 2.0 (the last weight alone would give 5 and 2.5; IP against
    # the factual class would give CT 3.5).
    x = torch.tensor([[0.0, 0.0], [0.0, 1.0], [3.0, 0.0], [3.0, 1.0]])
    y = torch.tensor([0, 0, 1, 1])

    def stub(self, model, x0, target, **kwargs):
        shift = 3.0 + model.overshoot * self.lambda_energy
        cf = x0.clone()
        cf[:, 0] = torch.where(target == 1, shift, 3.0 - shift)
        return type("Found", (), {"counterfactual": cf})()

    monkeypatch.setattr(NativeGenerator, "generate", stub)
    protocol = PaperProtocol(rounds=3, individuals=4, energy_weights=(1.0, 2.0), ip_draws=2)
    out = paper_evaluate({"ct": _Step(0.0), "baseline": _Step(1.0)}, x, y, protocol)
    ct, baseline = out["per_round"]["ct"], out["per_round"]["baseline"]
    assert ct["validity"] == [1.0] * 3 and baseline["validity"] == [1.0] * 3
    assert ct["cost"] == pytest.approx([3.0] * 3) and ct["ip"] == pytest.approx([0.5] * 3)
    assert baseline["cost"] == pytest.approx([4.5] * 3)
    assert baseline["ip"] == pytest.approx([2.0] * 3)
    weights = out["by_weight"]["baseline"]
    assert [w["cost"] for w in weights] == pytest.approx([4.0, 5.0])
    table = compare_models(out["per_round"], "ct", "baseline")
    assert table["cost"]["reduction"] == pytest.approx(100 * (1 - 3.0 / 4.5))
    assert table["ip"]["reduction"] == pytest.approx(75.0)


class _Towards(Generator):
    """A search of one's own, no ``NativeGenerator``: each row moves ``share`` of the way to the
    test point of its target class nearest to it (L1)."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, share: float) -> None:
        self.x, self.y, self.share = x, y, share

    def generate(self, model, x, target, *, domain=None, mutability=None):
        distance = torch.cdist(x, self.x, p=1)
        distance[self.y[None, :] != target[:, None]] = float("inf")
        cf = x + self.share * (self.x[distance.argmin(1)] - x)
        n = x.shape[0]
        return CounterfactualResult(cf, cf, torch.ones(n, dtype=torch.bool), torch.ones(n))

    def settings(self):
        return {**super().settings(), "share": self.share}


def test_a_search_of_ones_own_is_evaluated_at_each_energy_weight():
    # Test points: class 0 at (0, 0), (0, 1); class 1 at (3, 0), (3, 1), the model's boundary
    # at x1 = 1.5. At weight 0.25 the search goes a quarter of the way to the nearest test
    # point of the target class, short of the boundary: nothing valid, no cost, no IP. At 1.0
    # it reaches that point: all valid, cost 3, IP 0.5 (L1 0 and 1 to the class's two points).
    # A run's figures are the means over the weights of those it has.
    x = torch.tensor([[0.0, 0.0], [0.0, 1.0], [3.0, 0.0], [3.0, 1.0]])
    y = torch.tensor([0, 0, 1, 1])
    protocol = PaperProtocol(rounds=3, individuals=4, energy_weights=(0.25, 1.0), ip_draws=2)
    out = paper_evaluate(
        {"ct": _Step(0.0)}, x, y, protocol, search=lambda w: _Towards(x, y, share=w)
    )
    rounds = out["per_round"]["ct"]
    assert rounds["validity"] == [0.5] * 3
    assert rounds["cost"] == pytest.approx([3.0] * 3)
    assert rounds["ip"] == pytest.approx([0.5] * 3)
    low, high = out["by_weight"]["ct"]
    assert (low["validity"], low["cost"], low["ip"]) == (0.0, None, None)
    assert (high["validity"], high["cost"], high["ip"]) == pytest.approx((1.0, 3.0, 0.5))
    assert [s["share"] for s in out["search"]] == [0.25, 1.0]  # what ran, recorded
    assert "search" not in paper_evaluate({"ct": _Step(0.0)}, x, y, protocol)


def test_the_measures_are_the_registrys_in_its_order(toy):
    x, y = toy
    protocol = PaperProtocol(rounds=2, individuals=4, energy_weights=(1.0,), length_scales=(2, 0.3))
    out = paper_evaluate({"ct": _by_sign(0)}, x, y, protocol)
    keys = ["validity", "cost", "ip", "ip_star_2", "ip_star_0.3"]
    assert list(out["per_round"]["ct"]) == [m.key for m in protocol.measures()] == keys
    assert list(out["by_weight"]["ct"][0]) == ["energy_weight", *keys]
    assert [m.valid_only for m in protocol.measures()] == [False, True, True, True, True]
    # The tables compare IP, IP* at the first length scale (or at each) and cost, in that order.
    assert [m.key for m in compared_measures((2, 0.3))] == ["ip", "ip_star_2", "cost"]
    both = compared_measures((2, 0.3), sensitivities=True)
    assert [m.key for m in both] == ["ip", "ip_star_2", "ip_star_0.3", "cost"]
    assert [m.label for m in compared_measures()] == ["IP", "IP*", "cost"]


def test_measures_use_valid_counterfactuals_against_the_test_set(toy):
    x, y = toy
    models = {"ct": _by_sign(0), "baseline": _by_sign(0, scale=0.5)}
    out = paper_evaluate(models, x, y, PaperProtocol(rounds=4, individuals=8, ip_draws=50))
    for name in models:
        rounds = out["per_round"][name]
        # A linear boundary is crossed within 50 steps: every counterfactual is valid, so every
        # round has a cost, an IP and both IP* figures (at least two valid counterfactuals).
        assert rounds["validity"] == [1.0] * 4
        assert all(v is not None and v > 0 for v in rounds["cost"] + rounds["ip"])
        assert all(v is not None and v >= 0 for v in rounds["ip_star_5"] + rounds["ip_star_0.5"])
    # The flatter model needs longer steps to reach p >= 0.95: it is costlier.
    table = compare_models(out["per_round"], "ct", "baseline")
    assert set(table) == {"cost", "ip", "ip_star_5", "ip_star_0.5"}
    assert table["cost"]["reduction"] > 0 and table["cost"]["significant"]


def test_the_protocols_record_is_the_shipped_evaluations():
    # Records compare settings to decide what to run again: the shipped ones must still match.
    path = Path(__file__).resolve().parents[1] / "data/reproduction/evaluations/moons-s0.json"
    shipped = json.loads(path.read_text(encoding="utf-8"))["unconstrained"]["protocol"]
    record = PaperProtocol(rounds=100, individuals=250, seed=0).config()
    assert json.loads(json.dumps(record)) == shipped
    assert record != PaperProtocol(rounds=100, individuals=250, seed=1).config()


def test_protocol_rejects_nonsense():
    with pytest.raises(ValueError, match="rounds must be a positive integer, got 0"):
        PaperProtocol(rounds=0)
    with pytest.raises(TypeError, match="individuals must be a positive integer, got 2.0"):
        PaperProtocol(individuals=2.0)
    with pytest.raises(ValueError, match="energy_weights"):
        PaperProtocol(energy_weights=())


def test_one_hot_groups_reach_the_search_and_the_result(toy, monkeypatch):
    x, y = toy
    seen = []
    original = NativeGenerator.generate

    def spy(self, model, x0, target, **kwargs):
        seen.append(kwargs.get("categorical", "absent"))
        return original(self, model, x0, target, **kwargs)

    monkeypatch.setattr(NativeGenerator, "generate", spy)
    models = {"ct": _by_sign(0), "baseline": _by_sign(1)}
    protocol = PaperProtocol(rounds=2, individuals=4, energy_weights=(1.0,))
    plain = paper_evaluate(models, x, y, protocol)
    assert seen == ["absent", "absent"] and plain["categorical"] is None
    seen.clear()
    onehot = torch.nn.functional.one_hot(y, 2).float()  # a one-hot pair beside two numbers
    wide = torch.cat([x, onehot], 1)
    grouped = {name: nn.Sequential(nn.Linear(4, 2, bias=False), nn.Identity()) for name in models}
    for net, old in zip(grouped.values(), models.values(), strict=True):
        with torch.no_grad():
            net[0].weight.zero_()
            net[0].weight[:, :2] = old.weight
    out = paper_evaluate(grouped, wide, y, protocol, categorical=[[2, 3]])
    assert seen == [[[2, 3]]] * 2 and out["categorical"] == [[2, 3]]


def test_two_copies_of_one_model_meet_the_same_reference_points_in_every_run(toy, monkeypatch):
    # CT and the baseline are paired: each run gives both the same individuals and the same
    # reference points (fewer than the test set holds, so a second draw would differ). Each
    # model draws its own factuals, so the stub search puts every counterfactual at one point
    # per target class: two copies of one model must then get the same IP and IP* run by run.
    x, y = toy

    def stub(self, model, x0, target, **kwargs):
        cf = torch.stack([target * 4.0 - 2.0, torch.zeros_like(target, dtype=x0.dtype)], 1)
        return type("Found", (), {"counterfactual": cf})()

    monkeypatch.setattr(NativeGenerator, "generate", stub)
    protocol = PaperProtocol(rounds=5, individuals=12, energy_weights=(0.1, 1.0), ip_draws=20)
    protocol = replace(protocol, mmd_samples=6)
    out = paper_evaluate({"ct": _by_sign(0), "baseline": _by_sign(0)}, x, y, protocol)
    ct, baseline = out["per_round"]["ct"], out["per_round"]["baseline"]
    assert ct["validity"] == [1.0] * 5
    assert len(set(ct["ip"])) == 5  # each run draws its own reference points
    for key in ("ip", "ip_star_5", "ip_star_0.5"):
        assert ct[key] == baseline[key]


class Points:
    """Reference points given per class as (IP's points, IP*'s points)."""

    def __init__(self, points: dict[int, tuple[torch.Tensor, torch.Tensor]]):
        self._points = points

    def near(self, c: int) -> torch.Tensor:
        return self._points[c][0]

    def sample(self, c: int) -> torch.Tensor:
        return self._points[c][1]


def test_one_runs_measures_number_by_number():
    # Five individuals, two features. Valid: rows 0, 1, 2, 4 (targets 1, 1, 0, 1); row 3 is not.
    x0 = torch.tensor([[0.0, 0.0], [1.0, 0.0], [4.0, 4.0], [9.0, 9.0], [2.0, 0.0]])
    cf = torch.tensor([[3.0, 0.0], [3.0, 1.0], [0.0, 4.0], [5.0, 5.0], [3.0, 2.0]])
    valid = torch.tensor([True, True, True, False, True])
    target = torch.tensor([1, 1, 0, 1, 1])
    ones = torch.tensor([[3.0, 0.0], [3.0, 2.0], [5.0, 5.0]])
    zero = torch.tensor([[0.0, 0.0]])  # one point: IP but no IP* for class 0
    references = {0: (zero, zero), 1: (ones[:2], ones)}
    protocol = replace(PaperProtocol(), length_scales=(1.0,))
    got = _run_measures(x0, cf, valid, target, Points(references), protocol, torch.Generator())
    assert got["validity"] == pytest.approx(0.8)
    assert got["cost"] == pytest.approx((3 + 3 + 4 + 3) / 4)  # the invalid row left out
    # IP, each valid counterfactual's mean L1 to its target class's points: row 0 to (3, 0) and
    # (3, 2): 0 and 2, so 1; row 1: 1 and 1; row 4: 2 and 0; row 2 to (0, 0): 4.
    assert got["ip"] == pytest.approx((1 + 1 + 4 + 1) / 4)
    # IP*: class 1 only, all three of its valid counterfactuals against its three points.
    assert got["ip_star_1"] == pytest.approx(ip_star(cf[[0, 1, 4]], ones, 1.0))
    # Nothing valid: validity 0 and no other measure.
    none = _run_measures(
        x0, cf, valid & False, target, Points(references), protocol, torch.Generator()
    )
    assert none == {"validity": 0.0, "cost": None, "ip": None, "ip_star_1": None}
    # Two valid counterfactuals of a class are enough for its IP*.
    two = valid & (torch.arange(5) != 4)
    got = _run_measures(x0, cf, two, target, Points(references), protocol, torch.Generator())
    assert got["ip_star_1"] == pytest.approx(ip_star(cf[:2], ones, 1.0))


def test_ip_star_is_measured_at_each_of_the_protocols_length_scales():
    # Counterfactuals well away from their class's points: IP* is positive at both scales, and
    # neither is the median heuristic's value.
    cf = torch.tensor([[2.0, 2.0], [2.0, 3.0], [3.0, 2.0]])
    ones = torch.tensor([[0.0, 0.0], [0.0, 1.0], [1.0, 0.0]])
    protocol = replace(PaperProtocol(), length_scales=(1.0, 3.0))
    valid, target = torch.ones(3, dtype=torch.bool), torch.ones(3, dtype=torch.long)
    got = _run_measures(
        cf, cf, valid, target, Points({1: (ones, ones)}), protocol, torch.Generator()
    )
    assert got["ip_star_1"] == pytest.approx(ip_star(cf, ones, 1.0))
    assert got["ip_star_3"] == pytest.approx(ip_star(cf, ones, 3.0))
    median = mmd2(cf, ones)
    assert min(got["ip_star_1"], got["ip_star_3"], median) > 0.05
    assert len({round(v, 3) for v in (got["ip_star_1"], got["ip_star_3"], median)}) == 3


def test_ip_star_subsamples_the_valid_counterfactuals_with_the_protocols_generator(toy):
    # Valid counterfactuals beyond mmd_samples are subsampled with the seeded generator: the
    # global RNG plays no part.
    x, y = toy
    protocol = PaperProtocol(rounds=2, individuals=30, energy_weights=(1.0,), mmd_samples=4)
    torch.manual_seed(0)
    first = paper_evaluate({"ct": _by_sign(0)}, x, y, protocol)
    torch.manual_seed(1)
    assert paper_evaluate({"ct": _by_sign(0)}, x, y, protocol) == first
    with pytest.raises(ValueError, match="mmd_samples must be at least 2"):
        PaperProtocol(mmd_samples=1)
    assert PaperProtocol(mmd_samples=2).mmd_samples == 2


def test_the_test_time_search_is_the_papers():
    # ECCo with no cost term, the protocol's tau, steps and categorical rule, at each energy weight.
    protocol = PaperProtocol(
        tau=0.5, maxiter=7, step_size=0.3, categorical_gradient="straight_through"
    )
    search = protocol.generator(5.0)
    assert (search.lambda_cost, search.lambda_energy, search.tau) == (0.0, 5.0, 0.5)
    assert (search.maxiter, search.step_size) == (7, 0.3)
    assert search.categorical_gradient == "straight_through"
    assert PaperProtocol().step_size == 0.1  # Flux's Descent() default, which CT.jl runs


def test_each_run_is_measured_on_its_own_rows(toy, monkeypatch):
    # The batched search holds every run's rows one after another: run r is measured on its
    # own `individuals` rows, the same individuals (targets) in every run.
    x, y = toy
    seen = []
    original = protocol_module._run_measures

    def spy(x0, cf, valid, target, *args):
        seen.append((x0.clone(), target.clone()))
        return original(x0, cf, valid, target, *args)

    monkeypatch.setattr(protocol_module, "_run_measures", spy)
    protocol = PaperProtocol(rounds=3, individuals=5, energy_weights=(1.0,))
    result = paper_evaluate({"ct": _by_sign(0)}, x, y, protocol)
    assert [x0.shape[0] for x0, _ in seen] == [5, 5, 5]
    assert result["protocol"] == protocol.config()  # the result says how it was measured
    assert all(torch.equal(target, seen[0][1]) for _, target in seen)
    assert not torch.equal(seen[0][0], seen[1][0])  # each run draws its own rows


def test_the_test_time_search_keeps_the_mutability(toy):
    # A model that decides by x1 alone: with x1 immutable no search can cross its boundary.
    x, y = toy
    protocol = PaperProtocol(rounds=2, individuals=10, energy_weights=(1.0,))
    free = paper_evaluate({"ct": _by_sign(0)}, x, y, protocol)
    frozen = paper_evaluate({"ct": _by_sign(0)}, x, y, protocol, mutability=["none", "both"])
    assert all(v > 0.5 for v in free["per_round"]["ct"]["validity"])
    assert frozen["per_round"]["ct"]["validity"] == [0.0, 0.0]


def test_ip_star_averages_the_classes_that_have_two_points_a_side():
    # Class 0: two valid counterfactuals, two reference points; class 1: two counterfactuals
    # but a single reference point (of two features): it has no IP*, and the figure is class
    # 0's alone. With both classes measurable it is the mean of the two.
    cf = torch.tensor([[2.0, 2.0], [2.0, 3.0], [5.0, 5.0], [6.0, 5.0]])
    target = torch.tensor([0, 0, 1, 1])
    valid = torch.ones(4, dtype=torch.bool)
    zeros, ones = torch.tensor([[0.0, 0.0], [0.0, 1.0]]), torch.tensor([[4.0, 4.0], [4.0, 6.0]])
    protocol = replace(PaperProtocol(), length_scales=(1.0,))
    one_point = {0: (zeros, zeros), 1: (ones[:1], ones[:1])}
    got = _run_measures(cf, cf, valid, target, Points(one_point), protocol, torch.Generator())
    assert got["ip_star_1"] == pytest.approx(ip_star(cf[:2], zeros, 1.0))
    both = {0: (zeros, zeros), 1: (ones, ones)}
    got = _run_measures(cf, cf, valid, target, Points(both), protocol, torch.Generator())
    expected = (ip_star(cf[:2], zeros, 1.0) + ip_star(cf[2:], ones, 1.0)) / 2
    assert min(ip_star(cf[:2], zeros, 1.0), ip_star(cf[2:], ones, 1.0)) > 0.05
    assert got["ip_star_1"] == pytest.approx(expected)


def test_whole_class_distances_give_the_gathered_points_numbers_exactly(monkeypatch):
    # Classes of 30, 70 and 100 test points with ip_draws 60: IP of the first two is read from
    # one distance matrix per search (their whole class; 60 of the second's 70 columns per
    # run), of the third from gathered points. Both ways give the same numbers to the last
    # bit, run by run.
    assert protocol_module.WHOLE_CLASS * 60 < 100
    g = torch.Generator().manual_seed(3)
    x = torch.randn(200, 5, generator=g)
    y = torch.cat([torch.zeros(30), torch.ones(70), torch.full((100,), 2)]).long()
    x = x + 1.5 * nn.functional.one_hot(y, 5).float()
    model = nn.Linear(5, 3)
    with torch.no_grad():
        model.weight.copy_(torch.eye(3, 5) + 0.3 * torch.randn(3, 5, generator=g))
        model.bias.zero_()
    protocol = PaperProtocol(
        rounds=4,
        individuals=12,
        energy_weights=(0.5, 2.0),
        ip_draws=60,
        mmd_samples=5,
    )
    held = []
    original = protocol_module._WholeClasses.distances

    def counted(self, c, rows, references):
        out = original(self, c, rows, references)
        held.append((c, out is not None))
        return out

    monkeypatch.setattr(protocol_module._WholeClasses, "distances", counted)
    fast = paper_evaluate({"ct": model}, x, y, protocol)
    assert {c for c, whole in held if whole} == {0, 1}
    assert {c for c, whole in held if not whole} == {2}
    monkeypatch.setattr(protocol_module._WholeClasses, "distances", lambda *args: None)
    slow = paper_evaluate({"ct": model}, x, y, protocol)
    assert fast == slow
    assert len(set(fast["per_round"]["ct"]["ip"])) == 4
