"""The book's main example: the per-seed verdicts read from the grid's results, the text written
from them, and the shipped MLPs whose gallery the chapter searches live."""

from __future__ import annotations

import json
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


def _measure(difference: float, half_width: float) -> Measure:
    """CT's mean ``difference`` away from a baseline of 100, with a 99 % interval of
    ``difference ± half_width``."""
    return Measure(
        100.0 + difference,
        100.0,
        -difference,
        difference - half_width,
        difference + half_width,
    )


def _verdict(seed: int, ip: float, star: float, valid_ct: float = 1.0) -> SeedVerdict:
    """A seed whose IP and IP* differ from the baseline's by ``ip`` and ``star`` (negative:
    CT lower), IP with an interval of ± 5 and IP* of ± 50."""
    return SeedVerdict(
        seed=seed,
        rounds=100,
        validity_ct=valid_ct,
        validity_baseline=1.0,
        ip=_measure(ip, 5.0),
        ip_star=_measure(star, 50.0),
    )


def test_the_shipped_grid_shows_ct_working_on_the_mnist_mlp() -> None:
    """The chapter's claim, on the shipped results: validity within the gap and IP lower in
    every seed, significantly."""
    verdicts = seed_verdicts(json.loads((DATA / "reproduction" / "results.json").read_text()))
    assert [v.seed for v in verdicts] == [0, 1, 2]
    for v in verdicts:
        assert v.validity_baseline - v.validity_ct <= VALIDITY_GAP
        assert v.ip.ct < v.ip.baseline and v.ip.reduction > 0 and v.ip.significantly_lower
    text = verdict_text(verdicts)
    assert "IP is lower with CT in every seed, and significantly so" in text
    assert "lies below zero) in every seed" in text
    assert len(verdict_table(verdicts).splitlines()) == 2 + len(verdicts)


def test_the_text_counts_seeds_from_the_verdicts() -> None:
    verdicts = [_verdict(0, -7.0, -3.0), _verdict(1, 2.0, 1.0), _verdict(2, -3.0, -2.0, 0.9)]
    text = verdict_text(verdicts)
    assert "at most 0.05 below the baseline's in 2 of 3 seeds." in text
    # Seeds 0 and 2 are lower; only seed 0's interval (-12 to -2) lies below zero.
    assert "IP is lower with CT in 2 of 3 seeds, and significantly so" in text
    assert "lies below zero) in 1 of 3 seeds. IP\\*" in text
    assert "IP\\* is lower with CT in 2 of 3 seeds" in text
    assert text.endswith("lies below zero) in 0 of 3 seeds.")
    # An interval that excludes zero above it is significant, but not in CT's favour.
    against = [_verdict(0, 7.0, 0.0)]
    assert against[0].ip.significant and not against[0].ip.significantly_lower
    assert "IP is lower with CT in 0 of 1 seed, and significantly so" in verdict_text(against)
    assert "lies below zero) in 0 of 1 seed. IP\\*" in verdict_text(against)
    table = verdict_table(verdicts)
    assert table.splitlines()[2].count("✱") == 1 and "✱" not in table.splitlines()[3]


def test_the_calibration_table_keeps_one_model_and_says_when_nothing_was_recorded(
    tmp_path: Path,
) -> None:
    cell = lambda v: {"text": str(v), "value": v}  # noqa: E731
    columns = ["model", "step", "τ", "λ_reg", "mature", "valid %", "s / epoch"]
    rows = [
        [cell(m), cell(1), cell(0.5), cell(0.1), cell("raw"), cell(v), cell(2.0)]
        for m, v in (("mlp", 11), ("resnet18", 97))
    ]
    block = {
        "tables": [{"columns": columns, "rows": rows}],
        "provenance": {"when": "2026-01-02 03:04 UTC", "machine": "CPU: AMD EPYC, 2 cores"},
    }
    results = tmp_path / "results.json"
    results.write_text(json.dumps({"format": 1, "blocks": {"cpu/calibration": block}}))
    table = calibration_table(results=results)
    assert "| 0.5 | 0.1 | raw | 97 | 2.0 |" in table and "| 11 |" not in table
    assert "Measured on 2-core CPU, 2026-01-02" in table
    assert "not been recorded" in calibration_table(results=tmp_path / "none.json")


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
