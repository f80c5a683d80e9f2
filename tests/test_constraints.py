import pytest
import torch

from cfbook.search.constraints import infer_domain, make_constraints


def test_mask_step_follows_mutability():
    c = make_constraints(None, ["both", "none", "increase", "decrease"], 4, device="cpu")
    step = torch.tensor([[1.0, 1.0, 1.0, 1.0], [-1.0, -1.0, -1.0, -1.0]])
    assert c.mask_step(step).tolist() == [[1.0, 0.0, 1.0, 0.0], [-1.0, 0.0, 0.0, -1.0]]


def test_all_free_mutability_skips_masking():
    c = make_constraints(None, ["both"] * 3, 3, device="cpu")
    assert not c.has_mutability
    step = torch.randn(2, 3)
    assert c.mask_step(step) is step


def test_domain_forms_and_clamping():
    pair = make_constraints((-1.0, 1.0), None, 3, device="cpu")
    listed = make_constraints([(-1, 1), (0, 2), (-5, -4)], None, 3, device="cpu")
    x = torch.tensor([[3.0, -3.0, 0.0]])
    assert pair.clamp(x).tolist() == [[1.0, -1.0, 0.0]]
    assert listed.clamp(x).tolist() == [[1.0, 0.0, -4.0]]
    with pytest.raises(ValueError, match="domain must"):
        make_constraints("wide", None, 3, device="cpu")


def test_infer_domain_covers_the_data_and_two_corrected_sigma():
    x = torch.tensor([[0.0, 10.0], [1.0, 10.0], [2.0, 10.0]])
    bounds = infer_domain(x)
    # mean 1, corrected sd sqrt((1 + 0 + 1) / (3 - 1)) = 1 (the uncorrected one is 0.816)
    assert bounds[0].tolist() == pytest.approx([-1.0, 3.0])
    assert bounds[1].tolist() == [10.0, 10.0]
    assert infer_domain(torch.tensor([[4.0, 5.0]])).tolist() == [[4.0, 4.0], [5.0, 5.0]]


def test_protect_neighbours():
    c = make_constraints(None, ["both", "none", "increase", "decrease"], 4, device="cpu")
    cf = torch.tensor([[0.5, 0.5, 0.5, 0.5]])
    nb = torch.tensor([[0.0, 0.0, 0.0, 0.0]])
    assert c.protect_neighbours(nb, cf).tolist() == [[0.0, 0.5, 0.5, 0.0]]
    assert c.protect_neighbours(torch.ones(1, 4), cf).tolist() == [[1.0, 0.5, 1.0, 0.5]]


def test_step_bounds_clamp_like_mask_step():
    c = make_constraints(None, ["both", "none", "increase", "decrease"], 4, device="cpu")
    step = torch.tensor([[0.5, 0.5, 0.5, 0.5], [-0.5, -0.5, -0.5, -0.5], [0.0, -0.0, 2.0, -3.0]])
    assert torch.equal(step.clamp(*c.step_bounds(torch.float32)), c.mask_step(step))
    assert make_constraints(None, ["both"] * 4, 4, device="cpu").step_bounds(torch.float32) is None


def _code(**kwargs):
    return make_constraints(device="cpu", **kwargs).categorical


def test_step_bounds_take_the_dtype_asked_for():
    c = make_constraints(None, ["both", "none", "increase", "decrease"], 4, device="cpu")
    low, high = c.step_bounds(torch.float64)
    assert low.dtype == high.dtype == torch.float64
    assert low.tolist() == [-torch.inf, 0.0, 0.0, -torch.inf]
    assert high.tolist() == [torch.inf, 0.0, torch.inf, 0.0]


def test_group_checks_name_each_mistake():
    for categorical, message in [
        (["34"], "got the entry '34'"),
        ([[2, 6]], "column 6 is outside the data's 6 features"),
        ([[2, 2]], "column 2 belongs to two groups"),
        ([[1, 2], [2, 3]], "column 2 belongs to two groups"),
        ([[]], "at least one column"),
        ("0,1", "not a string"),
    ]:
        with pytest.raises(ValueError, match=message):
            make_constraints(None, None, 6, device="cpu", categorical=categorical)


def test_an_immutable_group_is_left_out_and_the_groups_after_it_kept():
    code = _code(
        domain=None,
        mutability=["none", "none", "both", "both", "both"],
        shape=5,
        categorical=[[0, 1], [2, 3], [4]],
    )
    x = torch.tensor([[0.3, 0.9, 0.2, 0.7, 0.2]])
    assert torch.equal(code.decode(x), torch.tensor([[0.3, 0.9, 0.0, 1.0, 0.0]]))


def test_decoding_respects_the_bounds_of_each_column():
    # Column 0 may not be 1 (its upper bound 0.5), column 1 may (bounds (1, 1)), column 2 may
    # (bounds (0, 2)), column 3 may not (lower bound 1.5); column 4, binary, is clipped to 0.5.
    domain = [(0.0, 0.5), (1.0, 1.0), (0.0, 2.0), (1.5, 3.0), (0.0, 0.5)]
    code = _code(domain=domain, mutability=None, shape=5, categorical=[[0, 1, 2, 3], [4]])
    assert code.eligible.tolist() == [[False, True, True, False]]
    rows = torch.tensor(
        [[0.9, 0.1, 0.2, 0.3, 0.9], [0.0, 0.8, 0.1, 0.9, 0.2], [0.0, 0.1, 0.8, 0.9, 0.9]]
    )
    # The decoded values are then clipped to the bounds: columns 1 and 3 are always 1 and 1.5.
    assert code.decode(rows).tolist() == [
        [0.0, 1.0, 1.0, 1.5, 0.5],
        [0.0, 1.0, 0.0, 1.5, 0.0],
        [0.0, 1.0, 1.0, 1.5, 0.5],
    ]


def test_infer_domain_of_two_samples_uses_their_spread():
    bounds = infer_domain(torch.tensor([[0.0], [2.0]]))
    sd = 2**0.5  # corrected: sqrt(((0 - 1)^2 + (2 - 1)^2) / 1)
    assert bounds.tolist() == [[pytest.approx(1 - 2 * sd), pytest.approx(1 + 2 * sd)]]


def test_domain_shapes_and_entries_are_checked():
    for domain, message in [
        ((1.0, 2.0, 3.0), "domain must be a \\(low, high\\) pair"),
        (torch.zeros(3), "shape \\(n_features, 2\\) or \\(3, 2\\), got \\(3,\\)"),
        (torch.zeros(3, 3), "shape \\(n_features, 2\\) or \\(3, 2\\), got \\(3, 3\\)"),
        ([(0, 1), (2, 2), (3, 1)], "domain entry 2 is not"),
        ([(0, 1), (1, 0), (3, 1)], "domain entry 1 is not"),
    ]:
        with pytest.raises(ValueError, match=message):
            make_constraints(domain, None, 3, device="cpu")
    fixed = make_constraints([(0, 1), (2, 2), (3, 4)], None, 3, device="cpu")
    assert fixed.lower.tolist() == [0, 2, 3] and fixed.upper.tolist() == [1, 2, 4]


def test_domain_bounds_keep_float64_precision():
    for domain in [(0.1, 0.3), [(0.1, 0.3)] * 2]:
        c = make_constraints(domain, None, 2, device="cpu", dtype=torch.float64)
        assert c.lower.dtype == torch.float64
        assert c.lower.tolist() == [0.1, 0.1] and c.upper.tolist() == [0.3, 0.3]


def test_a_list_of_two_numbers_is_the_pair_for_every_feature():
    for n in (1, 2, 3):
        c = make_constraints([-1, 2.5], None, n, device="cpu")
        assert c.lower.tolist() == [-1.0] * n and c.upper.tolist() == [2.5] * n
    # Two features given as two pairs of a list are one pair each, not one pair for both.
    c = make_constraints([[-1, 1], [0, 2]], None, 2, device="cpu")
    assert c.lower.tolist() == [-1.0, 0.0] and c.upper.tolist() == [1.0, 2.0]
