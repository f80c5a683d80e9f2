"""cfbook.book.microscope: which digit goes under the microscope, and what is kept of its search.

Two hand-made linear models on four features and a search of one factual; every kept number is
compared with ``record_search`` of the same search (tested on its own in test_search_path.py)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from cfbook.book.evaluation import encode_images
from cfbook.book.microscope import MICROSCOPE_FORMAT, look_closely
from cfbook.search.generators import NativeGenerator
from cfbook.search.path import record_search

# Row 0 is a 3; rows 1 and 2 are 4s. Feature 0 speaks for class 4, feature 3 (row 1 only) for
# class 7 in the second model, feature 2 for class 9, which the search raises.
X = torch.tensor(
    [
        [1.0, 0.0, 0.0, 0.0],
        [0.5, 0.0, 0.0, 0.5],
        [0.5, 0.0, 0.0, 0.0],
    ]
)
Y = torch.tensor([3, 4, 4])
GENERATOR = NativeGenerator(maxiter=12, tau=0.6, step_size=0.3, lambda_energy=0.0)


def _model(to_seven: float) -> nn.Module:
    model = nn.Linear(4, 10, bias=False)
    with torch.no_grad():
        model.weight.zero_()
        model.weight[4, 0] = 4.0
        model.weight[7, 3] = to_seven
        model.weight[9, 2] = 3.0
    return model


def _models(to_seven: float = 20.0) -> dict[str, nn.Module]:
    return {"vanilla": _model(0.0), "full": _model(to_seven)}


def test_the_first_digit_every_model_calls_a_four_is_searched_towards_a_nine():
    models = _models()
    result = look_closely(models, X, Y, GENERATOR)
    assert result["format"] == MICROSCOPE_FORMAT == "cfbook-microscope"
    assert result["meta"] == {
        "index": 2,  # row 1 is a 4 that the second model calls a 7
        "factual": 4,
        "target": 9,
        "classified_as_factual": True,
        "domain": [-1.0, 1.0],
        "search": GENERATOR.settings(),
    }
    assert list(result["searches"]) == ["vanilla", "full"]
    for name, model in models.items():
        record = record_search(GENERATOR, model, X[2], 9, domain=(-1.0, 1.0))
        kept = result["searches"][name]
        # The search stops before its last iteration: the frozen rest of the path is dropped.
        assert 0 < record.counterfactual_at < GENERATOR.maxiter
        assert kept["path"] == encode_images(record.path[: record.counterfactual_at + 1], -1, 1)
        assert len(kept["path"]) == record.counterfactual_at + 1
        assert kept["target_prob"] == [round(p, 4) for p in record.target_prob.tolist()]
        assert kept["distance"] == [round(d, 4) for d in record.distance.tolist()]
        assert len(kept["target_prob"]) == len(kept["distance"]) == GENERATOR.maxiter + 1
        # Four decimals, not more: the file holds what the figure needs.
        assert any(p != round(p, 4) for p in record.target_prob.tolist())
        assert any(d != round(d, 4) for d in record.distance.tolist())
        assert kept["counterfactual_at"] == record.counterfactual_at
        assert kept["adversarial_at"] == record.adversarial_at
        assert kept["valid"] is record.valid is True


def test_another_pair_of_classes_and_another_domain_are_searched_and_recorded():
    x = torch.cat([X, torch.tensor([[0.0, 0.0, 0.0, 0.0]])])
    y = torch.tensor([3, 4, 4, 0])
    models = _models()
    # Class 0 has no feature of its own: every model calls the zero row a 0 (the first of ties).
    result = look_closely(models, x, y, GENERATOR, factual=0, target=9, domain=(-2.0, 2.0))
    assert result["meta"]["index"] == 3
    assert result["meta"]["factual"] == 0
    assert result["meta"]["domain"] == [-2.0, 2.0]
    record = record_search(GENERATOR, models["full"], x[3], 9, domain=(-2.0, 2.0))
    full = result["searches"]["full"]
    assert full["path"] == encode_images(record.path[: record.counterfactual_at + 1], -2, 2)
    assert full["distance"] == [round(d, 4) for d in record.distance.tolist()]


def test_without_a_four_that_every_model_calls_a_four_the_first_four_is_taken_and_said(capsys):
    # The second model now calls both 4s a 7.
    models = {"vanilla": _model(0.0), "full": _model(20.0)}
    with torch.no_grad():
        models["full"].weight[7, 0] = 10.0
    result = look_closely(models, X, Y, GENERATOR)
    assert capsys.readouterr().out == (
        "No 4 is classified as 4 by every model; taking the first 4.\n"
    )
    assert result["meta"]["index"] == 1
    assert result["meta"]["classified_as_factual"] is False
    record = record_search(GENERATOR, models["vanilla"], X[1], 9, domain=(-1.0, 1.0))
    assert result["searches"]["vanilla"]["target_prob"] == [
        round(p, 4) for p in record.target_prob.tolist()
    ]


def test_a_digit_every_model_agrees_on_prints_nothing(capsys):
    look_closely(_models(), X, Y, GENERATOR)
    assert capsys.readouterr().out == ""


def test_digits_without_the_factual_class_are_refused_with_the_fix():
    with pytest.raises(ValueError, match=r"^the digits hold no 5; pass another factual class$"):
        look_closely(_models(), X, Y, GENERATOR, factual=5)
