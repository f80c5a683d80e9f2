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
