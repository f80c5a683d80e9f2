"""Tests for the paper's evaluation rounds and its bootstrap confidence interval."""

from __future__ import annotations

import pytest
import torch

from cfbook.evaluation.bootstrap import bootstrap_ci, draw_round


def test_a_round_searches_what_each_model_predicts_as_the_factual_class():
    ct = torch.tensor([0, 0, 1, 1, 2, 2, 2])
    baseline = torch.tensor([1, 0, 0, 2, 2, 1, 1])
    rng = torch.Generator().manual_seed(0)
    seen = set()
    for _ in range(200):
        r = draw_round({"ct": ct, "baseline": baseline}, [0, 1, 2], 5, rng)
        assert r.target != r.factual and {r.factual, r.target} <= {0, 1, 2}
        assert (ct[r.rows["ct"]] == r.factual).all()
        assert (baseline[r.rows["baseline"]] == r.factual).all()
        assert r.rows["ct"].shape == (5,) == r.rows["baseline"].shape
        seen.add((r.factual, r.target))
    assert len(seen) == 6  # every ordered pair of distinct classes occurs
    # With replacement: 5 rows from the two that CT predicts as class 0 repeat some.
    r = draw_round({"ct": ct}, [0, 1], 5, torch.Generator().manual_seed(1))
    assert r.rows["ct"].unique().numel() <= 2


def test_a_class_no_model_predicts_is_never_the_factual_class():
    predicted = {"ct": torch.tensor([1, 1, 2]), "baseline": torch.tensor([1, 2, 2])}
    rng = torch.Generator().manual_seed(0)
    factuals = {draw_round(predicted, [0, 1, 2], 3, rng).factual for _ in range(100)}
    assert factuals == {1, 2}
    with pytest.raises(ValueError, match="no class pair"):
        draw_round({"ct": torch.tensor([2, 2])}, [0, 1], 3, rng)  # predicts neither class
    with pytest.raises(ValueError, match="at least two classes"):
        draw_round({"ct": torch.tensor([0])}, [0], 1, rng)


def test_bootstrap_ci_by_hand():
    # a = [0, 2]: its resampled mean is 0, 1 or 2 with probability 1/4, 1/2, 1/4; b = [0] is
    # always 0. The 0.5 % and 99.5 % quantiles of the difference are therefore 0 and 2.
    assert bootstrap_ci([0.0, 2.0], [0.0]) == (0.0, 2.0)
    assert bootstrap_ci([0.0], [0.0, 2.0]) == (-2.0, 0.0)  # both sides are resampled
    assert bootstrap_ci([3.0, 3.0], [1.0, 1.0, 1.0]) == (2.0, 2.0)  # no spread: the difference
    low, high = bootstrap_ci([0.0, 2.0], [0.0], level=0.4)  # the 30 % and 70 % quantiles
    assert (low, high) == (1.0, 1.0)


def test_bootstrap_ci_narrows_with_more_data_and_excludes_zero_for_a_clear_shift():
    g = torch.Generator().manual_seed(0)
    small = bootstrap_ci(torch.randn(20, generator=g) + 1, torch.randn(20, generator=g))
    large = bootstrap_ci(torch.randn(2000, generator=g) + 1, torch.randn(2000, generator=g))
    assert large[1] - large[0] < (small[1] - small[0]) / 5
    assert large[0] > 0.8 and large[1] < 1.2
    assert bootstrap_ci([1.0], [1.0, 2.0], seed=3) == bootstrap_ci([1.0], [1.0, 2.0], seed=3)
    with pytest.raises(ValueError, match="at least one value"):
        bootstrap_ci([], [1.0])
