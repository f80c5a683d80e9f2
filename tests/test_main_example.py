"""The book's main example: the per-seed verdicts read from the grid's results, the text written
from them, and the shipped MLPs whose gallery the chapter searches live."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from cfbook.book.main_example import (
    VALIDITY_GAP,
    Measure,
    SeedVerdict,
    calibration_table,
    load_main_models,
    main_example_galleries,
    seed_verdicts,
    verdict_table,
    verdict_text,
)
from cfbook.evaluation.metrics import accuracy
from cfbook.paper.settings import load_experiment_data

DATA = Path(__file__).resolve().parents[1] / "data"


def _verdict(seed: int, ip: float, star: float, valid_ct: float = 1.0) -> SeedVerdict:
    return SeedVerdict(
        seed=seed,
        rounds=100,
        validity_ct=valid_ct,
        validity_baseline=1.0,
        ip=Measure(90.0, 100.0, ip, ip > 5),
        ip_star=Measure(0.01, 0.02, star, False),
    )


def test_the_shipped_grid_shows_ct_working_on_the_mnist_mlp() -> None:
    """The chapter's claim, on the shipped results: validity within the gap and IP lower in
    every seed, significantly."""
    verdicts = seed_verdicts(json.loads((DATA / "reproduction" / "results.json").read_text()))
    assert [v.seed for v in verdicts] == [0, 1, 2]
    for v in verdicts:
        assert v.validity_baseline - v.validity_ct <= VALIDITY_GAP
        assert v.ip.ct < v.ip.baseline and v.ip.reduction > 0 and v.ip.significant
    text = verdict_text(verdicts)
    assert "IP is lower with CT in every seed, and significantly so" in text
    assert "excludes zero) in every seed" in text
    assert len(verdict_table(verdicts).splitlines()) == 2 + len(verdicts)


def test_the_text_counts_seeds_from_the_verdicts() -> None:
    verdicts = [_verdict(0, 7.0, 3.0), _verdict(1, -2.0, -1.0), _verdict(2, 6.0, 2.0, 0.9)]
    text = verdict_text(verdicts)
    assert "within 0.05, in 2 of 3 seeds (lowest: 0.900 against 1.000)" in text
    assert "IP is lower with CT in 2 of 3 seeds, and significantly so" in text
    assert "excludes zero) in 2 of 3 seeds. IP\\*" in text
    assert "IP\\* is lower with CT in 2 of 3 seeds" in text
    # A lower IP that is not significant counts as lower but not as significantly lower.
    weak = [replace(v, ip=replace(v.ip, significant=False)) for v in verdicts]
    assert "excludes zero) in 0 of 3 seeds. IP\\*" in verdict_text(weak)
    # Significance against CT (a positive reduction is required) is not counted for CT.
    against = [replace(v, ip=replace(v.ip, reduction=-3.0, significant=True)) for v in verdicts]
    assert "IP is lower with CT in 0 of 3 seeds" in verdict_text(against)
    assert "excludes zero) in 0 of 3 seeds. IP\\*" in verdict_text(against)


def test_the_calibration_table_keeps_one_model_and_says_when_nothing_was_recorded() -> None:
    cell = lambda v: {"text": str(v), "value": v}  # noqa: E731
    columns = ["model", "step", "τ", "λ_reg", "mature", "valid %", "s / epoch"]
    rows = [
        [cell(m), cell(1), cell(0.5), cell(0.1), cell("raw"), cell(v), cell(2.0)]
        for m, v in (("mlp", 11), ("resnet18", 97))
    ]
    block = {
        "tables": [{"columns": columns, "rows": rows}],
        "provenance": {"when": "then", "machine": "a CPU"},
    }
    table = calibration_table({"cpu/calibration": block})
    assert "| 0.5 | 0.1 | raw | 97 | 2.0 |" in table and "| 11 |" not in table
    assert "then on a CPU" in table
    assert "not been recorded" in calibration_table({})


@pytest.fixture(scope="module")
def mnist():
    return load_experiment_data("mnist", "cpu")


def test_the_shipped_weights_are_the_recorded_models_and_search_the_same_digits(mnist) -> None:
    folder = DATA / "main_example"
    provenance = json.loads((folder / "provenance.json").read_text())
    models = load_main_models(folder, mnist, torch.device("cpu"))
    for training, model in models.items():
        measured = accuracy(model, mnist.x_test, mnist.y_test)
        assert measured == pytest.approx(provenance["test_accuracy"][training], abs=1e-4)
    ct, baseline = main_example_galleries(models, mnist)
    assert ct["gallery"]["index"] == baseline["gallery"]["index"]
    assert ct["gallery"]["target"] == baseline["gallery"]["target"]
    assert sorted(ct["gallery"]["label"]) == list(range(10))
    # On this model CT's searches reach their target as the baseline's do.
    assert sum(ct["gallery"]["valid"]) >= sum(baseline["gallery"]["valid"]) - 1


def test_missing_weights_name_the_command_that_trains_them(mnist, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="python -m cfbook.commands.paper --cell"):
        load_main_models(tmp_path, mnist, torch.device("cpu"))
