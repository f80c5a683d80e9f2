"""Two evaluations (CT and the baseline) compared: accuracy paired per seed, and the gallery's
counts from its pixels (the figures: test_figures.py)."""

from __future__ import annotations

import pytest

from cfbook.book.figures.evaluation import GalleryChange, gallery_changes, off_protocol
from cfbook.book.report import compare_robustness
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
    assert robust["pgd_0.03"].pp == pytest.approx([10.0, 10.0, 10.0])
    assert robust["fgsm_0.03"].ct == pair[0]["robustness"]["summary"]["fgsm"][0]
    assert robust["fgsm_0.03"].baseline == pair[1]["robustness"]["summary"]["fgsm"][0]


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


def test_the_gallery_counts_valid_searches_and_changed_pixels(pair):
    # Both inked every pixel of the first digit (784 changed, L1 784 * 2) and left the second
    # alone (torch's median of two is the lower); CT's second search missed its target.
    assert gallery_changes(*pair) == {
        "full": GalleryChange(1, 2, 392.0, 0.0, 784.0),
        "vanilla": GalleryChange(2, 2, 392.0, 0.0, 784.0),
    }
    pair[1]["gallery"]["target"] = [4, 7]
    with pytest.raises(ValueError, match="different digits or targets"):
        gallery_changes(*pair)


def _levels(pixels: dict[range, int], base: int = 50) -> str:
    """A 784-pixel digit at ink level ``base`` but for the given ranges of pixels."""
    row = [base] * 784
    for where, level in pixels.items():
        for i in where:
            row[i] = level
    return bytes(row).hex()


def test_the_gallery_measures_each_digits_change_by_hand(pair):
    # Three digits at ink level 50; CT's counterfactuals change the first by +26 on ten pixels
    # (not more than the threshold of 26: unchanged), +27 on twenty and -40 on ten, leave the
    # second alone and add 100 to every pixel of the third; the baseline's leave all three.
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
    changes = gallery_changes(full, vanilla)
    # Changed pixels (more than 26 levels) per digit: 30, 0, 784; L1 in [-1, 1] units: each
    # level is 2 / 255 of the domain.
    l1 = [(10 * 26 + 20 * 27 + 10 * 40) * 2 / 255, 0.0, 784 * 100 * 2 / 255]
    ct = changes["full"]
    assert (ct.valid, ct.digits, ct.changed_median) == (2, 3, 30.0)
    assert ct.changed_mean == pytest.approx((30 + 0 + 784) / 3)
    assert ct.l1 == pytest.approx(sum(l1) / 3)
    assert changes["vanilla"] == GalleryChange(2, 3, 0.0, 0.0, 0.0)
    # A higher threshold counts fewer pixels: the +27 ones no longer.
    assert gallery_changes(full, vanilla, threshold=27)["full"].changed_median == 10.0


def test_a_gallery_not_searched_as_the_paper_s_test_time_search_is_flagged(pair):
    gallery = pair[0]["gallery"]
    assert not off_protocol(gallery)
    assert off_protocol({**gallery, "validity": "argmax"})  # at the paper's step
    assert off_protocol({**gallery, "search": {**gallery["search"], "step_size": 0.25}})
