"""The paper's evaluation rounds and their statistics: CT against the baseline per round, mean
and standard error."""

from __future__ import annotations

import math

import pytest
import torch

from cfbook.evaluation.rounds import draw_individuals, draw_rows
from cfbook.evaluation.statistics import (
    compare_models,
    compare_rounds,
    compare_rounds_or_none,
    fragile_significance,
    mean_se,
)


def test_each_individual_has_a_factual_and_another_target_class():
    predicted = {"ct": torch.tensor([0, 0, 1, 1, 2, 2, 2]), "baseline": torch.tensor([1, 0, 2])}
    rng = torch.Generator().manual_seed(0)
    people = draw_individuals(predicted, [0, 1, 2], 6000, rng)
    assert (people.target != people.factual).all()
    # Every ordered pair of distinct classes, each about 1/6 of the individuals.
    pairs = [tuple(p) for p in torch.stack([people.factual, people.target], 1).tolist()]
    counts = {p: pairs.count(p) for p in set(pairs)}
    assert set(counts) == {(f, t) for f in range(3) for t in range(3) if f != t}
    assert all(abs(c / 6000 - 1 / 6) < 0.02 for c in counts.values())


def test_rows_are_what_the_model_predicts_as_each_individuals_factual_class():
    ct = torch.tensor([0, 0, 1, 1, 2, 2, 2])
    rng = torch.Generator().manual_seed(0)
    factual = torch.tensor([2, 0, 1, 2, 0])
    for _ in range(50):
        rows = draw_rows(ct, factual, rng)
        assert (ct[rows] == factual).all()
    # With replacement: 40 rows for factual class 0 come from the two rows predicted as 0.
    rows = draw_rows(ct, torch.zeros(40, dtype=torch.long), rng)
    assert set(rows.tolist()) == {0, 1}


def test_a_class_some_model_never_predicts_is_never_a_factual_class():
    predicted = {"ct": torch.tensor([1, 1, 2]), "baseline": torch.tensor([1, 2, 2, 0])}
    rng = torch.Generator().manual_seed(0)
    people = draw_individuals(predicted, [0, 1, 2], 300, rng)
    assert set(people.factual.tolist()) == {1, 2}
    assert set(people.target.tolist()) == {0, 1, 2}  # targets may be any other class
    with pytest.raises(ValueError, match="no class is predicted"):
        draw_individuals({"ct": torch.tensor([2, 2])}, [0, 1], 3, rng)
    with pytest.raises(ValueError, match="at least two classes"):
        draw_individuals({"ct": torch.tensor([0])}, [0], 1, rng)
    with pytest.raises(ValueError, match="predicts class 0 for no test point"):
        draw_rows(torch.tensor([1, 1]), torch.tensor([0]), rng)


def test_compare_rounds_by_hand():
    # Rounds: CT 1, 2, 3, 6 against the baseline 2, 4, 3, 4. Ratios 0.5, 0.5, 1, 1.5 (mean 0.875,
    # so a reduction of 12.5 %; sample std 0.4787 -> SE 47.87). Differences -1, -2, 0, 2: their
    # 0.5 % and 99.5 % quantiles (linear interpolation over -2, -1, 0, 2) are -1.985 and 1.97.
    out = compare_rounds([1.0, 2.0, 3.0, 6.0], [2.0, 4.0, 3.0, 4.0])
    assert out["reduction"] == pytest.approx(12.5)
    assert out["se"] == pytest.approx(100 * 0.478713, rel=1e-5)
    assert out["ci_low"] == pytest.approx(-1.985) and out["ci_high"] == pytest.approx(1.97)
    assert not out["significant"] and out["rounds"] == 4
    assert out["ct"] == 3.0 and out["baseline"] == 3.25
    # Per-round reductions 50, 50, 0, -50: quantiles -49.25 and 50.
    assert out["reduction_low"] == pytest.approx(-49.25) and out["reduction_high"] == 50.0
    # A round without a value on one side is left out; a clear shift is significant.
    shift = compare_rounds([1.0, 1.1, None, 0.9], [2.0, 2.1, 2.0, None])
    assert shift["rounds"] == 2 and shift["significant"] and shift["ci_high"] < 0
    # A round whose baseline is 0 has no ratio: the reduction comes from the other rounds, the
    # interval of differences from all of them.
    zero = compare_rounds([1.0, 2.0, 0.5], [0.0, 4.0, 1.0])
    assert zero["ratio_rounds"] == 2 and zero["reduction"] == pytest.approx(50.0)
    assert zero["rounds"] == 3 and zero["ci_high"] == pytest.approx(0.985)
    with pytest.raises(ValueError, match="^no round has a value on both sides"):
        compare_rounds([None], [1.0])
    with pytest.raises(ValueError, match="one value per round"):
        compare_rounds([1.0], [1.0, 2.0])
    for level in (0.0, 1.0):
        with pytest.raises(ValueError, match="level must lie in"):
            compare_rounds([1.0, 2.0], [2.0, 3.0], level)


def test_compare_models_passes_its_level_on():
    per_round = {"ct": {"ip": [1.0, 2.0, 3.0, 6.0]}, "bl": {"ip": [2.0, 4.0, 3.0, 4.0]}}
    wide, narrow = compare_models(per_round, "ct", "bl"), compare_models(per_round, "ct", "bl", 0.5)
    assert wide["ip"]["ci_low"] == pytest.approx(-1.985)  # 0.99 by default
    # 25 % and 75 % quantiles of -2, -1, 0, 2: -1.25 and 0.5.
    assert narrow["ip"]["ci_low"] == pytest.approx(-1.25) and narrow["ip"]["ci_high"] == 0.5


def test_mean_and_standard_error_by_hand():
    assert mean_se([1.0, 2.0, 3.0]) == {"mean": 2.0, "se": pytest.approx(1 / math.sqrt(3)), "n": 3}
    assert mean_se([4.0, None]) == {"mean": 4.0, "se": None, "n": 1}
    assert mean_se([1.0, 3.0]) == {"mean": 2.0, "se": 1.0, "n": 2}  # sd sqrt(2), over sqrt(2)
    assert mean_se([None]) == {"mean": None, "se": None, "n": 0}


def test_compare_rounds_at_its_edges():
    # Exactly two ratios: the SE is defined (the sample std of 0.5 and 1.0, times 100).
    two = compare_rounds([1.0, 2.0], [2.0, 2.0])
    assert two["se"] == pytest.approx(100 * math.sqrt(0.125))
    # No ratio at all (every baseline 0): no reduction, no SE, no reduction interval.
    none = compare_rounds([1.0, 2.0], [0.0, 0.0])
    assert none["ratio_rounds"] == 0
    assert all(math.isnan(none[k]) for k in ("reduction", "se", "reduction_low", "reduction_high"))
    # An interval that ends at 0 on either side holds 0: not significant.
    assert not compare_rounds([1.0, 1.0, 2.0, 2.0], [1.0, 1.0, 1.0, 1.0])["significant"]
    assert not compare_rounds([0.0, 0.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0])["significant"]


def test_the_interval_covers_a_known_shift():
    # CT's rounds are the baseline's lowered by 1.0 plus noise of SD 0.1: the percentile interval
    # of the per-round differences must hold -1.0 and not 0, and the reduction be near 1 / 3.
    g = torch.Generator().manual_seed(0)
    baseline = (3.0 + 0.1 * torch.randn(300, generator=g, dtype=torch.float64)).tolist()
    ct = [b - 1.0 + 0.1 * float(torch.randn(1, generator=g)) for b in baseline]
    out = compare_rounds(ct, baseline)
    assert out["ci_low"] < -1.0 < out["ci_high"] < 0 and out["significant"]
    assert out["reduction"] == pytest.approx(100 / 3, abs=1.0)


def test_draws_come_from_the_generator_alone():
    predicted = {
        "ct": torch.tensor([0, 1, 2, 0, 1, 2]),
        "baseline": torch.tensor([2, 1, 0, 0, 1, 2]),
    }
    draws = []
    for global_seed in (0, 1):
        torch.manual_seed(global_seed)  # the global RNG plays no part
        rng = torch.Generator().manual_seed(3)
        people = draw_individuals(predicted, [0, 1, 2], 50, rng)
        draws.append(
            (people.factual, people.target, draw_rows(predicted["ct"], people.factual, rng))
        )
    for a, b in zip(*draws, strict=True):
        assert torch.equal(a, b)


def test_compare_rounds_or_none_is_none_only_where_no_round_has_both_sides():
    assert compare_rounds_or_none([None, 1.0], [2.0, None]) is None
    assert compare_rounds_or_none([None, 1.0], [2.0, 2.0]) == compare_rounds(
        [None, 1.0], [2.0, 2.0]
    )
    # Rounds of unequal count are a mistake upstream, not "nothing valid".
    with pytest.raises(ValueError):
        compare_rounds_or_none([1.0, 1.0], [2.0])


@pytest.mark.parametrize(
    ("extremes", "fragile"),
    [
        # No extreme round: every difference is 0.5 +- 0.09, far from zero with or without any one.
        ((), False),
        # One round at -2: the 0.5 % end interpolates between -2 and 0.41 (about -0.8), so the
        # interval holds 0; without that round it does not.
        ((-2.0,), True),
        # Two rounds at -2: the end stays at -2 whichever single round is left out.
        ((-2.0, -2.0), False),
    ],
)
def test_significance_is_fragile_where_one_round_decides_it(extremes, fragile):
    differences = [0.5 + 0.09 * math.sin(i) for i in range(100 - len(extremes))] + list(extremes)
    baseline = [1.0] * 100
    ct = [1.0 + d for d in differences]
    assert fragile_significance(ct, baseline) is fragile
    # The verdict it is about: the one-round case is not significant with the round, and is
    # without it.
    if fragile:
        assert not compare_rounds(ct, baseline)["significant"]
        assert compare_rounds(ct[:-1], baseline[:-1])["significant"]
