"""Tables, text and figures comparing two evaluations: they must say what the numbers say."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from cfbook.book.evaluation import decode_levels
from cfbook.book.figures.evaluation import (
    gallery_figure,
    gallery_search_text,
    gallery_text,
    robustness_figure,
)
from cfbook.book.figures.training import COLOURS
from cfbook.book.report import compare_robustness, comparison_table
from cfbook.evaluation.protocol import PaperProtocol
from cfbook.evaluation.statistics import mean_se

BLANK = "00" * 784  # an all-background digit
INK = "ff" * 784


def fake(
    objective: str,
    acc: list[float],
    fgsm: list[float],
    valid: list[bool],
) -> dict:
    """An evaluation of one model per entry of ``acc``."""
    per_model = [
        {"clean": a, "epsilons": [0.03], "fgsm": [f], "pgd": [f - 0.1]}
        for a, f in zip(acc, fgsm, strict=True)
    ]
    return {
        "config": {"epsilons": [0.03]},
        "n_models": len(acc),
        "robustness": {
            "per_model": per_model,
            "summary": {
                "clean": mean_se(acc),
                "epsilons": [0.03],
                "fgsm": [mean_se(fgsm)],
                "pgd": [mean_se([f - 0.1 for f in fgsm])],
            },
        },
        "gallery": {
            "lambda_energy": 1.0,
            "search": PaperProtocol().generator(1.0).settings(),
            "validity": "target probability >= 0.5",
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
        acc=[0.90, 0.91, 0.89],
        fgsm=[0.80, 0.82, 0.84],
        valid=[True, False],
    )
    vanilla = fake(
        "VanillaObjective",
        acc=[0.92, 0.93, 0.91],
        fgsm=[0.70, 0.72, 0.74],
        valid=[True, True],
    )
    return full, vanilla


def test_accuracy_changes_are_paired_per_seed_in_percentage_points(pair):
    robust = {row.key: row for row in compare_robustness(*pair)}
    assert list(robust) == ["clean", "fgsm_0.03", "pgd_0.03"]
    # Seed by seed: clean 0.90 - 0.92 = -2 pp ...; FGSM 0.80 - 0.70 = +10 pp each.
    assert robust["clean"].pp == pytest.approx([-2.0, -2.0, -2.0])
    assert robust["fgsm_0.03"].pp == pytest.approx([10.0, 10.0, 10.0])
    assert robust["pgd_0.03"].label == "PGD accuracy, eps 0.03"
    assert robust["fgsm_0.03"].ct == pair[0]["robustness"]["summary"]["fgsm"][0]
    assert robust["fgsm_0.03"].baseline == pair[1]["robustness"]["summary"]["fgsm"][0]
    table = comparison_table(list(robust.values())).splitlines()
    assert table[:2] == [
        "| measure (higher is better) | CT | baseline | CT − baseline, pp (positive: CT better) |",
        "|---|---:|---:|---:|",
    ]
    assert table[2] == "| clean accuracy | 0.900 ± 0.0058 | 0.920 ± 0.0058 | -2.0 ± 0.0 |"
    assert table[3] == "| FGSM accuracy, eps 0.03 | 0.820 ± 0.012 | 0.720 ± 0.012 | +10.0 ± 0.0 |"
    # One seed: no standard errors; three significant digits from 1 up; no figure reads n/a.
    one = replace(robust["clean"], ct={"mean": 12.345, "se": None}, pp=[4.0])
    one = replace(one, baseline={"mean": 1.0, "se": None})
    none = replace(one, ct={"mean": None, "se": None}, pp=[])
    table = comparison_table([one, none]).splitlines()
    assert table[2:] == [
        "| clean accuracy | 12.3 | 1 | +4.0 |",
        "| clean accuracy | n/a | 1 | n/a |",
    ]


def test_evaluations_of_different_runs_are_refused(pair):
    full, vanilla = pair
    vanilla["meta"]["profile"] = "smoke"
    with pytest.raises(ValueError, match="^evaluations of different profiles: 'cpu' and 'smoke'$"):
        compare_robustness(full, vanilla)
    vanilla["meta"]["profile"] = "cpu"
    vanilla["config"] = {"epsilons": [0.05]}
    settings = "^the two evaluations used different settings; evaluate both again$"
    with pytest.raises(ValueError, match=settings):
        compare_robustness(full, vanilla)
    vanilla["config"] = full["config"]
    vanilla["n_models"] = 2
    with pytest.raises(ValueError, match=settings):
        compare_robustness(full, vanilla)
    # A damaged file whose models do not pair one to one is refused, not truncated.
    vanilla["n_models"] = 3
    vanilla["robustness"]["per_model"].pop()
    with pytest.raises(ValueError, match="zip"):
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


def test_the_gallery_says_which_search_made_it(pair):
    paper = gallery_search_text(pair[0]["gallery"])
    assert paper == (
        "Both models' searches took steps of 0.1, up to 50 of them, stopping at a target "
        "probability of 0.95, with energy weight 1 and distance weight 0; a counterfactual counts "
        "as valid when the model gives its target at least probability 0.5."
    )
    assert paper in gallery_text(*pair)
    old = {**pair[0]["gallery"], "validity": "argmax"}
    old["search"] = {**old["search"], "step_size": 0.25}
    text = gallery_search_text(old)
    assert "steps of 0.25" in text and "most likely class is its target" in text
    assert "These are not the paper's test-time settings" in text


def _levels(pixels: dict[range, int], base: int = 50) -> str:
    """A 784-pixel digit at ink level ``base`` but for the given ranges of pixels."""
    row = [base] * 784
    for where, level in pixels.items():
        for i in where:
            row[i] = level
    return bytes(row).hex()


def _three_digits(pair: tuple[dict, dict]) -> tuple[dict, dict]:
    """Three digits at ink level 50; CT's counterfactuals change the first by +26 on ten pixels
    (not more than the threshold of 26: unchanged), +27 on twenty and -40 on ten, leave the
    second alone and add 100 to every pixel of the third; the baseline's leave all three."""
    full, vanilla = pair
    digit = _levels({})
    moved = [
        _levels({range(10): 76, range(10, 30): 77, range(30, 40): 10}),
        digit,
        _levels({range(784): 150}),
    ]
    for result, counterfactual in ((full, moved), (vanilla, [digit] * 3)):
        result["gallery"].update(
            index=[5, 9, 11],
            label=[0, 1, 2],
            target=[3, 7, 8],
            valid=[True, False, True],
            factual=[digit] * 3,
            counterfactual=counterfactual,
        )
    return full, vanilla


def test_gallery_text_measures_each_digits_change_by_hand(pair):
    text = gallery_text(*_three_digits(pair))
    # Changed pixels (more than 26 levels) per digit: 30, 0, 784; L1 in [-1, 1] units: each
    # level is 2 / 255 of the domain.
    l1 = [(10 * 26 + 20 * 27 + 10 * 40) * 2 / 255, 0.0, 784 * 100 * 2 / 255]
    mean = sum(l1) / 3
    assert text.startswith("In the gallery, the CT model's searches")
    assert f"for an L1 change of {mean:.1f}; the baseline model's searches" in text
    assert (
        "the CT model's searches reached their target for 2 of 3 digits, changing 271 pixels "
        f"per digit on average (median 30) for an L1 change of {mean:.1f}" in text
    )
    assert f"{mean:.1f}" == "208.1"
    assert (
        "the baseline model's searches reached their target for 2 of 3 digits, changing 0 "
        "pixels per digit on average (median 0) for an L1 change of 0.0" in text
    )


def test_gallery_figure_draws_each_change_on_the_change_scale(pair):
    full, vanilla = _three_digits(pair)
    fig = gallery_figure(full, vanilla)
    assert len(fig.data) == 3 * 5 and "xaxis15" in fig.layout and "xaxis16" not in fig.layout
    row = fig.data[:5]  # the first digit: factual, baseline, CT, baseline change, CT change
    assert [t.coloraxis for t in row] == ["coloraxis"] * 3 + ["coloraxis2"] * 2
    assert all("change" in t.hovertemplate for t in row[3:])
    assert all("ink" in t.hovertemplate for t in row[:3])
    ct_change = row[4].z.flatten().tolist()
    assert ct_change[:40] == [26] * 10 + [27] * 20 + [-40] * 10 and set(ct_change[40:]) == {0}
    assert set(row[3].z.flatten().tolist()) == {0}  # the baseline changed nothing
    # Images the right way up, square, without axes.
    assert fig.layout.yaxis.autorange == "reversed" and fig.layout.yaxis15.autorange == "reversed"
    assert fig.layout.yaxis.scaleanchor == "x" and fig.layout.yaxis15.scaleanchor == "x15"
    assert fig.layout.xaxis.visible is False and fig.layout.yaxis.visible is False
    assert fig.layout.title.text.endswith("searched in both models (energy weight 1)")


def test_robustness_figure_draws_the_models_standard_errors(pair):
    full, vanilla = pair
    vanilla["robustness"]["summary"]["clean"] = {"mean": 0.9, "se": None}  # one model: no SE
    fig = robustness_figure(full, vanilla)
    assert [a.text for a in fig.layout.annotations] == ["FGSM", "PGD"]
    assert [(t.name, t.showlegend) for t in fig.data] == [
        ("CT", True),
        ("CT", False),
        ("baseline", True),
        ("baseline", False),
    ]
    assert fig.layout.yaxis2.matches == "y"  # one accuracy scale for both attacks
    assert [t.xaxis for t in fig.data] == ["x", "x2"] * 2 and "xaxis3" not in fig.layout
    assert fig.layout.xaxis.title.text == "epsilon (L-inf, data in [-1, 1])"
    assert fig.layout.yaxis.title.text == "accuracy" and fig.layout.yaxis2.title.text is None
    # Each model in its own colour, with markers, one legend entry toggling both panels.
    assert [(t.line.color, t.legendgroup, t.mode) for t in fig.data] == [
        (COLOURS["full"], "full", "lines+markers"),
        (COLOURS["full"], "full", "lines+markers"),
        (COLOURS["vanilla"], "vanilla", "lines+markers"),
        (COLOURS["vanilla"], "vanilla", "lines+markers"),
    ]
    assert fig.data[2].hovertemplate.startswith("baseline<br>eps %{x}: accuracy %{y:.3f}")
    summary = full["robustness"]["summary"]
    fgsm_ct = fig.data[0].error_y
    assert fgsm_ct.visible and list(fgsm_ct.array) == [
        summary["clean"]["se"],
        summary["fgsm"][0]["se"],
    ]
    assert list(fig.data[2].error_y.array)[0] == 0.0


def test_a_gallery_judged_by_the_argmax_is_flagged_at_the_papers_step(pair):
    old = {**pair[0]["gallery"], "validity": "argmax"}
    assert old["search"]["step_size"] == PaperProtocol().step_size
    assert "These are not the paper's test-time settings" in gallery_search_text(old)


def test_gallery_pixels_stay_sixteen_bit_integers():
    """So that the figure's JSON holds them as a compact typed array, not a list of numbers."""
    assert decode_levels([INK[:8]]).dtype == torch.int16
    assert decode_levels([INK[:8]]).tolist() == [[255, 255, 255, 255]]
