import pytest

from cfbook import (
    AdversarialObjective,
    EnergyDifferentialObjective,
    FullObjective,
    Objective,
    VanillaObjective,
)


def weights(objective):
    return [objective.lambda_clf, objective.lambda_div, objective.lambda_reg, objective.lambda_adv]


def test_default_weights_follow_the_algorithm():
    assert weights(FullObjective()) == [1.0, 0.5, 0.1, 0.25]
    assert weights(EnergyDifferentialObjective()) == [1.0, 0.5, 0.1, 0.0]
    assert weights(AdversarialObjective()) == [1.0, 0.0, 0.0, 0.25]
    assert weights(VanillaObjective()) == [1.0, 0.0, 0.0, 0.0]
    assert weights(FullObjective(lambda_reg=0.01))[2] == 0.01


def test_which_objectives_need_counterfactuals():
    assert FullObjective().needs_counterfactuals
    assert EnergyDifferentialObjective().needs_counterfactuals
    assert AdversarialObjective().needs_counterfactuals
    assert not VanillaObjective().needs_counterfactuals  # CT.jl: needs_ce = false
    assert VanillaObjective(needs_ce=True).needs_counterfactuals
    assert not VanillaObjective().uses_counterfactual_terms
    assert FullObjective().name == "FullObjective"


def test_negative_weight_is_named():
    with pytest.raises(ValueError, match="lambda_adv must be a non-negative number, got -1.0"):
        FullObjective(lambda_adv=-1.0)
    with pytest.raises(ValueError, match="lambda_reg must be a non-negative number, got nan"):
        FullObjective(lambda_reg=float("nan"))
    for wrong in ("0.5", True, None):  # a string, a bool, nothing: not a number
        with pytest.raises(TypeError, match="lambda_div must be a non-negative number"):
            FullObjective(lambda_div=wrong)


@pytest.mark.parametrize(
    "objective,weight",
    [
        (VanillaObjective, "lambda_div"),
        (VanillaObjective, "lambda_adv"),
        (AdversarialObjective, "lambda_reg"),
        (EnergyDifferentialObjective, "lambda_adv"),
    ],
)
def test_a_weight_the_objective_does_not_use_is_an_error(objective, weight):
    uses = ", ".join(objective.uses)
    with pytest.raises(
        ValueError, match=f"{objective.__name__} has no {weight} term \\(it uses {uses}\\)"
    ):
        objective(**{weight: 0.5})
    assert objective(**{weight: 0.0}).lambdas == objective().lambdas


def test_the_base_objective_takes_any_mix():
    assert Objective(lambda_clf=2.0, lambda_adv=0.3).lambdas == (2.0, 0.0, 0.0, 0.3)
