"""Tables, text and figures comparing two evaluations: they must say what the numbers say."""

from __future__ import annotations

import pytest

from cfbook.book.figures.evaluation import gallery_figure, gallery_text, robustness_figure
from cfbook.evaluation.protocol import mean_se
from cfbook.evaluation.report import compare_robustness, comparison_table

BLANK = "00" * 784  # an all-background digit
INK = "ff" * 784


def fake(
    objective: str,
    ip: list[float],
    cost: list[float],
    acc: list[float],
    fgsm: list[float],
    valid: list[bool],
) -> dict:
    """An evaluation with one run per entry of ``ip`` (one model per run)."""
    runs = [
        {
            "run": r,
            "per_lambda": {
                "1": {
                    "n": 10,
                    "n_valid": 10,
                    "validity": 1.0,
                    "cost": c,
                    "ip": i,
                    "ip_star": 0.1,
                    "n_ip_star": 10,
                }
            },
            "pooled": {"validity": 1.0, "cost": c, "ip": i, "ip_star": 0.1},
        }
        for r, (i, c) in enumerate(zip(ip, cost, strict=True))
    ]
    per_model = [
        {"clean": a, "fgsm": {"0.03": f}, "pgd": {"0.03": f - 0.1}}
        for a, f in zip(acc, fgsm, strict=True)
    ]
    summary = {
        key: mean_se([run["pooled"][key] for run in runs])
        for key in ("validity", "cost", "ip", "ip_star")
    }
    summary["per_lambda"] = {
        "1": {key: summary[key] for key in ("validity", "cost", "ip", "ip_star")}
    }
    return {
        "config": {"runs": len(ip)},
        "runs": runs,
        "summary": summary,
        "robustness": {
            "per_model": per_model,
            "summary": {
                "clean": mean_se(acc),
                "fgsm": {"0.03": mean_se(fgsm)},
                "pgd": {"0.03": mean_se([f - 0.1 for f in fgsm])},
            },
        },
        "gallery": {
            "lambda_energy": 1.0,
            "index": [5, 9],
            "label": [0, 1],
            "target": [3, 7],
            "valid": valid,
            "domain": [-1.0, 1.0],
            "factual": [BLANK, BLANK],
            "counterfactual": [INK, BLANK],
        },
        "meta": {"profile": "cpu", "objective": objective},
    }


@pytest.fixture
def pair() -> tuple[dict, dict]:
    full = fake(
        "FullObjective",
        ip=[90.0, 95.0, 100.0],
        cost=[60.0, 66.0, 66.0],
        acc=[0.90, 0.91, 0.89],
        fgsm=[0.80, 0.82, 0.84],
        valid=[True, False],
    )
    vanilla = fake(
        "VanillaObjective",
        ip=[100.0, 100.0, 100.0],
        cost=[50.0, 50.0, 60.0],
        acc=[0.92, 0.93, 0.91],
        fgsm=[0.70, 0.72, 0.74],
        valid=[True, True],
    )
    return full, vanilla


def test_accuracy_changes_are_paired_per_seed_in_percentage_points(pair):
    robust = {row.key: row for row in compare_robustness(*pair)}
    # FGSM accuracy, higher is better: +14.3, +13.9, +13.5 % relative, +10 pp each.
    assert robust["fgsm_0.03"].change["mean"] == pytest.approx(
        100 * (0.10 / 0.70 + 0.10 / 0.72 + 0.10 / 0.74) / 3
    )
    assert robust["fgsm_0.03"].change["pp"] == pytest.approx([10.0, 10.0, 10.0])
    assert robust["clean"].ct_better is False
    table = comparison_table(list(robust.values()))
    fgsm = next(line for line in table.splitlines() if "FGSM accuracy, eps 0.03" in line)
    assert fgsm.endswith("| +10.0 pp ± 0.0 |")


def test_evaluations_of_different_runs_are_refused(pair):
    full, vanilla = pair
    vanilla["meta"]["profile"] = "smoke"
    with pytest.raises(ValueError, match="different profiles"):
        compare_robustness(full, vanilla)
    vanilla["meta"]["profile"] = "cpu"
    vanilla["config"] = {"runs": 5}
    with pytest.raises(ValueError, match="different protocols"):
        compare_robustness(full, vanilla)


def test_gallery_figure_rows_columns_and_validity_marks(pair):
    fig = gallery_figure(*pair)
    assert len(fig.data) == 2 * 5
    titles = [a.text for a in fig.layout.annotations]
    assert titles[:5] == ["0 → 3", "baseline ✓", "CT ✓", "baseline change", "CT change"]
    assert titles[6:8] == ["baseline ✓", "CT ✗ invalid"]
    ct_cf, ct_change = fig.data[2], fig.data[4]
    assert ct_cf.z[0][0] == 255 and ct_change.z[0][0] == 255  # all ink added
    assert fig.layout.coloraxis.cmax == 255 and fig.layout.coloraxis2.cmin == -255
    pair[1]["gallery"]["target"] = [4, 7]
    with pytest.raises(ValueError, match="different digits or targets"):
        gallery_figure(*pair)


def test_robustness_figure_plots_both_models(pair):
    robust = robustness_figure(*pair)
    fgsm_ct = robust.data[0]
    assert list(fgsm_ct.x) == [0.0, 0.03]
    assert list(fgsm_ct.y) == pytest.approx([0.90, 0.82])


def test_gallery_text_counts_valid_searches_and_changed_pixels(pair):
    text = gallery_text(*pair)
    # CT: one of two valid, every pixel inked (784 changed, L1 784 * 2); baseline: both valid.
    assert "the CT model's searches reached their target for 1 of 2 digits" in text
    assert "the baseline model's searches reached their target for 2 of 2 digits" in text
