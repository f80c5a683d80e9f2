import pytest

from cfbook import (
    AdversarialObjective,
    EnergyDifferentialObjective,
    FullObjective,
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
    assert VanillaObjective().needs_counterfactuals  # needs_ce=True still searches
    assert not VanillaObjective(needs_ce=False).needs_counterfactuals
    assert not VanillaObjective().uses_counterfactual_terms
    assert FullObjective().name == "FullObjective"


def test_negative_weight_is_named():
    with pytest.raises(ValueError, match="lambda_adv"):
        FullObjective(lambda_adv=-1.0)
