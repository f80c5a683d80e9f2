"""The book's per-model evaluation (``cfbook.book.evaluation``): accuracy under attack and the
gallery, whose search and validity are the paper's protocol's."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

import cfbook.book.evaluation as book_evaluation
from cfbook.book.evaluation import (
    EvaluationConfig,
    decode_images,
    encode_images,
    evaluate,
    gallery,
    json_config,
)
from cfbook.data import load_mnist
from cfbook.evaluation.metrics import accuracy
from cfbook.evaluation.protocol import PaperProtocol
from cfbook.evaluation.statistics import mean_se
from cfbook.models import mlp


@pytest.fixture(scope="module")
def digits():
    data = load_mnist(1000, verbose=False)
    models = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        model = mlp()
        optimizer = torch.optim.Adam(model.parameters(), 1e-3)
        for _ in range(5):
            for xb, yb in data.loader(100, seed=seed):
                optimizer.zero_grad()
                nn.functional.cross_entropy(model(xb), yb).backward()
                optimizer.step()
        models.append(model.eval())
    return data, models


def test_gallery_shows_the_same_digits_and_targets_to_every_model(digits):
    data, models = digits
    config, protocol = EvaluationConfig(), PaperProtocol()
    first, second = (
        gallery(m, data.x_val, data.y_val, config=config, protocol=protocol, domain=(-1.0, 1.0))
        for m in models
    )
    assert first["label"] == list(range(10))
    # Each class's digit is the first of that class in the seeded order.
    order = torch.randperm(len(data.y_val), generator=torch.Generator().manual_seed(config.seed))
    labels = data.y_val[order].tolist()
    assert first["index"] == [int(order[labels.index(c)]) for c in range(10)]
    for key in ("index", "label", "target", "factual"):
        assert first[key] == second[key]
    assert all(t != label for t, label in zip(first["target"], first["label"], strict=True))
    factuals = decode_images(first["factual"], first["domain"])
    torch.testing.assert_close(factuals, data.x_val[first["index"]], atol=1 / 255, rtol=0)
    # Valid as the paper's protocol defines it: target probability >= 0.5 for the stored
    # counterfactual (its 8-bit levels move it by at most 1/255 per pixel), with the protocol's
    # test-time search.
    cf = decode_images(first["counterfactual"], first["domain"])
    with torch.no_grad():
        probs = models[0](cf).softmax(1)[torch.arange(10), torch.tensor(first["target"])]
    assert ((probs >= 0.5).tolist() == first["valid"]) and any(first["valid"])
    assert first["search"] == protocol.generator(config.gallery_lambda_energy).settings()


def test_evaluate_attacks_every_model_and_shows_the_first_ones_gallery(digits):
    data, models = digits
    config = EvaluationConfig(epsilons=(0.03, 0.1), pgd_steps=3, attack_samples=200)
    protocol = PaperProtocol(maxiter=10)
    result = evaluate(
        models, data.x_val, data.y_val, config=config, protocol=protocol, domain=(-1.0, 1.0)
    )
    assert json.loads(json.dumps(result)) == result
    assert result["n_models"] == 2
    robust = result["robustness"]
    assert len(robust["per_model"]) == 2
    for m, model in zip(robust["per_model"], models, strict=True):
        assert m["epsilons"] == [0.03, 0.1]
        assert m["clean"] == accuracy(model, data.x_val[:200], data.y_val[:200])
        assert m["fgsm"][1] <= m["fgsm"][0] <= m["clean"]
        assert m["pgd"][0] <= m["fgsm"][0] + 0.02
    summary = robust["summary"]
    assert summary["epsilons"] == [0.03, 0.1]
    means = [m["fgsm"][1] for m in robust["per_model"]]
    assert summary["fgsm"][1] == mean_se(means)
    alone = gallery(
        models[0], data.x_val, data.y_val, config=config, protocol=protocol, domain=(-1.0, 1.0)
    )
    assert result["gallery"] == alone


def test_evaluate_attacks_every_row_within_the_domain_even_for_one_model(monkeypatch):
    calls = []

    def attack(model, x, y, *, epsilons, pgd_steps, domain):
        calls.append((x.shape[0], pgd_steps, domain))
        return {"clean": 0.5, "epsilons": list(epsilons), "fgsm": [0.4], "pgd": [0.3]}

    monkeypatch.setattr(book_evaluation, "attack_accuracy", attack)
    torch.manual_seed(0)
    x, y = torch.rand(900, 4) * 2 - 1, torch.arange(900) % 3  # more rows than features
    config = EvaluationConfig(epsilons=(0.03,), pgd_steps=2)
    result = evaluate(
        [nn.Linear(4, 3)], x, y, config=config, protocol=PaperProtocol(maxiter=5), domain=(-1, 1)
    )
    assert calls == [(900, 2, (-1, 1))]
    assert result["robustness"]["summary"]["epsilons"] == [0.03]
    assert result["robustness"]["summary"]["clean"] == mean_se([0.5])
    assert (result["format"], result["version"]) == ("cfbook-evaluation", 2)
    assert result["config"] == json_config(config) and result["config"]["epsilons"] == [0.03]
    assert result["gallery"]["validity"] == "target probability >= 0.5"
    assert result["gallery"]["lambda_energy"] == config.gallery_lambda_energy


def test_gallery_images_clamp_to_the_domain_in_eight_bits():
    x = torch.tensor([[-2.0, 2.0, -1.0, 1.0, 0.0]])
    assert encode_images(x, -1.0, 1.0) == ["00ff00ff80"]


@pytest.mark.parametrize(
    "settings",
    [{"pgd_steps": True}, {"pgd_steps": 0}, {"pgd_steps": 2.0}, {"epsilons": (0.1, -0.01)}],
)
def test_bad_evaluation_settings_are_refused(settings):
    with pytest.raises(ValueError, match="pgd_steps must be a positive integer|non-negative"):
        EvaluationConfig(**settings)


def test_the_smallest_evaluation_settings_are_accepted():
    assert EvaluationConfig(epsilons=(0.0, 0.01), pgd_steps=1).pgd_steps == 1
