"""The measures, one implementation each (``cfbook.evaluation.metrics``), by hand and against
brute-force references."""

import math

import pytest
import torch
from torch import nn

from cfbook.evaluation.metrics import (
    accuracy,
    cost,
    implausibility,
    ip_star,
    ip_stars,
    is_valid,
    mmd2,
    mmd2_at,
    predict,
    target_probability,
)


def linear_model() -> nn.Module:
    model = nn.Linear(2, 2, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.eye(2))  # class = index of the larger feature
    return model


def test_predict_accuracy_and_validity():
    model = linear_model()
    x = torch.tensor([[1.0, 0.0], [0.0, 1.0], [2.0, 1.0], [0.0, 3.0]])
    assert predict(model, x, batch_size=3).tolist() == [0, 1, 0, 1]
    assert accuracy(model, x, torch.tensor([0, 1, 1, 1])) == pytest.approx(0.75)
    target = torch.tensor([1, 1, 1, 1])
    # softmax of (a, b): p(1) = 1 / (1 + e^(a - b))
    expected = [1 / (1 + math.exp(a - b)) for a, b in x.tolist()]
    assert target_probability(model, x, target).tolist() == pytest.approx(expected)
    assert is_valid(model, x, target).tolist() == [False, True, False, True]
    tie = torch.tensor([[1.0, 1.0]])  # p = 0.5 exactly: valid (the threshold is >= 0.5)
    assert is_valid(model, tie, torch.tensor([1])).tolist() == [True]
    with pytest.raises(ValueError, match="at least one sample"):
        accuracy(model, x[:0], torch.tensor([], dtype=torch.long))


def test_cost_and_implausibility_by_hand():
    x = torch.zeros(2, 3)
    cf = torch.tensor([[1.0, -1.0, 0.0], [0.0, 0.0, 2.0]])
    assert cost(x, cf).tolist() == [2.0, 2.0]
    reference = torch.tensor([[1.0, -1.0, 0.0], [1.0, -1.0, 2.0]])
    # L1 distances: row 0 -> 0 and 2, row 1 -> 4 and 2: the mean over every pair is 2.
    assert implausibility(cf, reference) == pytest.approx(2.0)
    with pytest.raises(ValueError, match="at least one"):
        implausibility(cf, reference[:0])


def brute_force_mmd2(a: torch.Tensor, b: torch.Tensor, scale: float) -> float:
    """The unbiased MMD^2 as a double loop over pairs, straight from its definition."""

    def k(u: torch.Tensor, v: torch.Tensor) -> float:
        return math.exp(-float(((u - v) ** 2).sum()) / (2 * scale**2))

    n, m = len(a), len(b)
    kaa = sum(k(a[i], a[j]) for i in range(n) for j in range(n) if i != j) / (n * (n - 1))
    kbb = sum(k(b[i], b[j]) for i in range(m) for j in range(m) if i != j) / (m * (m - 1))
    kab = sum(k(a[i], b[j]) for i in range(n) for j in range(m)) / (n * m)
    return kaa + kbb - 2 * kab


@pytest.mark.parametrize("scale", [0.5, 1.0, 5.0])
def test_mmd2_equals_the_brute_force_unbiased_estimate(scale):
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(7, 3, generator=g, dtype=torch.float64), torch.randn(5, 3, generator=g)
    b = b.double() + 0.5
    assert mmd2(a, b, bandwidth=scale) == pytest.approx(brute_force_mmd2(a, b, scale), abs=1e-12)


def test_several_length_scales_from_one_distance_matrix_equal_the_brute_force():
    g = torch.Generator().manual_seed(3)
    a, b = torch.randn(6, 3, generator=g, dtype=torch.float64), torch.randn(8, 3, generator=g)
    b = b.double() + 1.0
    scales = (0.5, 5.0, None)
    median = brute_force_median_bandwidth(a, b)
    expected = [brute_force_mmd2(a, b, s if s is not None else median) for s in scales]
    assert mmd2_at(a, b, scales) == pytest.approx(expected, abs=1e-12)
    # IP* clamps each scale on its own: below 0 at one scale, above at the other.
    same = torch.randn(4, 2, generator=g, dtype=torch.float64)
    near = same[[1, 0, 3, 2]] + 0.2
    values = mmd2_at(same, near, (0.1, 1.0))
    assert values[0] > 0 > values[1]
    assert ip_stars(same, near, (0.1, 1.0)) == [values[0], 0.0]


def test_ip_star_is_mmd2_clamped_at_zero():
    g = torch.Generator().manual_seed(2)
    a, b = torch.randn(6, 2, generator=g), torch.randn(6, 2, generator=g)
    assert ip_star(a, b + 4, 1.0) == pytest.approx(mmd2(a, b + 4, 1.0))
    same = torch.randn(4, 2, generator=g)
    assert mmd2(same, same[[1, 0, 3, 2]], 1.0) < 0  # unbiased: below 0 for identical samples
    assert ip_star(same, same[[1, 0, 3, 2]], 1.0) == 0.0


def test_mmd2_is_small_for_the_same_distribution_and_large_otherwise():
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(200, 4, generator=g), torch.randn(200, 4, generator=g)
    far = torch.randn(200, 4, generator=g) + 3.0
    assert abs(mmd2(a, b)) < 0.02
    assert mmd2(a, far) > 0.3
    with pytest.raises(ValueError, match="two samples"):
        mmd2(a[:1], b)


def brute_force_median_bandwidth(a: torch.Tensor, b: torch.Tensor) -> float:
    """The median heuristic from its definition: the median of the distances between distinct
    points of both samples, each pair in both orders, zero distances left out."""
    both = torch.cat([a, b]).tolist()
    distances = [math.dist(u, v) for i, u in enumerate(both) for j, v in enumerate(both) if i != j]
    positive = sorted(d for d in distances if d > 0)
    return positive[(len(positive) - 1) // 2]  # torch's median: the lower of the middle two


@pytest.mark.parametrize("spread", [0.1, 3.0])  # every distance below 1, and most above
def test_mmd2_median_heuristic_equals_the_brute_force_bandwidth(spread):
    g = torch.Generator().manual_seed(3)
    a = torch.randn(6, 2, generator=g, dtype=torch.float64) * spread
    b = torch.randn(5, 2, generator=g, dtype=torch.float64) * spread + spread
    a[1] = a[0]  # a zero distance, which the heuristic leaves out
    bandwidth = brute_force_median_bandwidth(a, b)
    assert mmd2(a, b) == pytest.approx(brute_force_mmd2(a, b, bandwidth), abs=1e-12)


def test_mmd2_of_identical_points_is_zero_whatever_the_bandwidth():
    same = torch.ones(3, 2)
    assert mmd2(same, same) == 0.0  # no positive distance: the heuristic falls back, finitely


def test_empty_inputs_are_refused_on_either_side():
    rows = torch.zeros(3, 2)
    with pytest.raises(ValueError, match="at least one counterfactual"):
        implausibility(rows[:0], rows)
    with pytest.raises(ValueError, match="two samples on each side"):
        mmd2(rows, rows[:1])
