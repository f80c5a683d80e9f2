"""The verdicts the comparison, evaluation, ablation, microscope, ridge and 2-D chapters render,
as data, on crafted logs and results: a verdict must follow from the statistic that answers its
question, seed by seed. The chapters' wording is not tested here."""

from __future__ import annotations

from statistics import fmean, pstdev

import pytest
from conftest import hand_made_microscope

from cfbook.book.figures.ablation import (
    Half,
    Sensitivity,
    ablation_verdict,
    ig_verdict,
    sensitivity,
)
from cfbook.book.figures.microscope import Adversarial, microscope_searches
from cfbook.book.figures.ridge import Reached, stability_reading
from cfbook.book.figures.seed_page import (
    Movement,
    SeedPageVerdict,
    post_burnin_seconds,
    seed_page_summary,
    seed_page_verdict,
)
from cfbook.book.figures.seeds import (
    ComparisonVerdict,
    Trend,
    seeds_markdown,
    seeds_summary,
    seeds_verdict,
)
from cfbook.book.figures.two_d import two_d_readings
from cfbook.book.report import (
    Claim,
    Comparison,
    Difference,
    Tally,
    clear_difference,
    difference,
    paired_comparison,
    paired_verdict,
    robustness_verdicts,
)
from cfbook.evaluation.statistics import compare_rounds
from cfbook.paper.merge import ABLATION_MEASURES, _ablation, _ig, _ig_stats
from cfbook.training.log import EpochRecord, TrainingLog

# --- per-seed differences ---------------------------------------------------------------------


def test_a_clear_difference_has_one_sign_in_every_seed_and_more_than_two_errors():
    assert clear_difference([2.0, 2.1, 1.9])
    assert clear_difference([2.0, 4.0])  # mean 3, two standard errors 2
    assert clear_difference([-2.0, -4.0])
    assert not clear_difference([3.0, -0.5, 0.2])  # signs disagree
    assert not clear_difference([0.1, 5.0, 0.1])  # one sign, but within two SEs
    assert not clear_difference([2.0])  # one seed: no error estimate
    assert not clear_difference([0.0, 10.0, 10.0, 10.0])  # zero has no sign
    assert not clear_difference([-0.01, 0.9, 0.9, 0.9, 0.9])  # one seed against, however small
    assert not clear_difference([1.0, 3.0])  # mean 2 is exactly two standard errors of 1


def test_a_difference_names_its_side_or_why_it_has_none():
    assert difference([2.0, 2.1, 1.9]) is Difference.HIGHER
    assert difference([-2.0, -4.0]) is Difference.LOWER
    assert difference([0.5, 0.6, 0.55]) is Difference.HIGHER  # clear, though under one point
    assert difference([10.0, -9.0, 1.0]) is Difference.COMPARABLE
    assert difference([0.3]) is Difference.ONE_SEED


# --- the ResNet runs: training logs ---------------------------------------------------------------


def _log(seed, acc, implaus=None, implaus_valid=None, valid=None, burnin=1, mature="neighbour"):
    records = []
    for i, a in enumerate(acc, start=1):
        cf = i > burnin and implaus is not None
        records.append(
            EpochRecord(
                epoch=i,
                acc=a,
                acc_val=a,
                train_loss=0.1,
                implaus=implaus[i - burnin - 1] if cf else None,
                reg_loss=0.0 if cf else None,
                adv_loss=0.0 if cf else None,
                time_taken=2.0 if cf else 1.0,
                percent_valid=valid[i - burnin - 1] if cf else None,
                avg_iter=3.0 if cf else None,
                implaus_valid=implaus_valid[i - burnin - 1] if cf else None,
            )
        )
    return TrainingLog(records, {"seed": seed, "burnin_epochs": burnin, "mature": mature})


def _pair(acc_full, acc_vanilla, implaus, implaus_valid, valid):
    full = [_log(s, a, implaus, implaus_valid, valid) for s, a in enumerate(acc_full)]
    vanilla = [_log(s, a) for s, a in enumerate(acc_vanilla)]
    return full, vanilla


def test_a_falling_average_that_only_tracks_validity_is_not_called_an_improvement():
    # implaus (invalid counting 0) falls from 0 to -0.2 as validity rises from 1 % to 8 %,
    # while the differential over the valid counterfactuals rises from -2.47 to -2.09.
    acc = [[0.9, 0.95, 0.96, 0.97]] * 3
    full, vanilla = _pair(acc, acc, [0.0, -0.1, -0.2], [-2.47, -2.3, -2.09], [0.01, 0.04, 0.08])
    s = seeds_summary(full, vanilla)
    assert s["implaus_valid_trend_pct"] == pytest.approx([100 * (-2.47 + 2.09) / 2.47] * 3)
    assert s["implaus_fall"] == pytest.approx([0.2] * 3)
    assert [pytest.approx(e) for e in s["implaus_valid_ends"]] == [(-2.47, -2.09)] * 3
    assert seeds_verdict(s) == ComparisonVerdict(Difference.COMPARABLE, Trend.ROSE, True)
    assert "from -2.5 to -2.1 logits" in seeds_markdown(s)


def test_a_single_seed_dip_of_the_baseline_is_not_higher_accuracy_with_ct():
    full_acc = [[0.95, 0.96, 0.964, 0.964]] * 3
    vanilla_acc = [
        [0.95, 0.978, 0.95, 0.934],
        [0.95, 0.96, 0.966, 0.965],
        [0.95, 0.96, 0.963, 0.966],
    ]
    full, vanilla = _pair(full_acc, vanilla_acc, [-1.0, -1.1, -1.2], [-2.0, -2.1, -2.2], [0.6] * 3)
    s = seeds_summary(full, vanilla)
    # Held-out accuracy over the last three epochs, CT minus baseline, per seed.
    expected = [
        100 * (fmean(f[-3:]) - fmean(v[-3:])) for f, v in zip(full_acc, vanilla_acc, strict=True)
    ]
    assert s["acc_diffs_pp"] == pytest.approx(expected)
    assert seeds_verdict(s).accuracy is Difference.COMPARABLE


def test_a_consistent_gap_and_a_consistent_fall_are_reported_as_such():
    full_acc = [[0.95, 0.97, 0.97, 0.97], [0.95, 0.971, 0.971, 0.971], [0.95, 0.969, 0.969, 0.969]]
    vanilla_acc = [[0.95] * 4, [0.95, 0.951, 0.951, 0.951], [0.95, 0.949, 0.949, 0.949]]
    full, vanilla = _pair(full_acc, vanilla_acc, [-1.0, -1.5, -2.0], [-2.0, -2.5, -3.0], [0.8] * 3)
    s = seeds_summary(full, vanilla)
    assert s["acc_diffs_pp"] == pytest.approx([2.0, 2.0, 2.0])
    assert s["valid_per_seed"] == pytest.approx([0.8] * 3)
    # The differential over the valid ones falls from -2 to -3 (+50 %) in every seed, and the
    # average over all of them falls too.
    assert s["implaus_valid_trend_pct"] == pytest.approx([50.0] * 3)
    assert seeds_verdict(s) == ComparisonVerdict(Difference.HIGHER, Trend.FELL, False)


def _summary(**changes):
    """A comparison summary as ``seeds_summary`` returns it: three seeds, CT clearly less
    accurate, the differential over the valid counterfactuals rising in every seed while the
    average over all of them falls."""
    s = {
        "seeds": [42, 43, 44],
        "mature": "neighbour",
        "nepochs": 20,
        "burnin_epochs": 4,
        "time_full": 30.0,
        "time_vanilla": 7.5,
        "acc_diffs_pp": [-2.0, -2.2, -1.8],
        "valid_per_seed": [0.5, 0.25, 0.75],
        "implaus_valid_trend_pct": [-10.0, -20.0, -30.0],
        "implaus_fall": [1.0, 2.0, 3.0],
        "last_epochs": 3,
    }
    return s | changes


@pytest.mark.parametrize(
    ("changes", "verdict"),
    [
        ({}, ComparisonVerdict(Difference.LOWER, Trend.ROSE, True)),
        (
            {"acc_diffs_pp": [0.3], "implaus_valid_trend_pct": [], "implaus_fall": []},
            ComparisonVerdict(Difference.ONE_SEED, Trend.NOT_MEASURED, False),
        ),
        ({"acc_diffs_pp": []}, ComparisonVerdict(None, Trend.ROSE, True)),
        # Small but consistent: 0.3 in every seed; the average over all fell too, or was not
        # logged, or did not move: never "the other way".
        (
            {"acc_diffs_pp": [0.3] * 3, "implaus_valid_trend_pct": [0.3] * 3},
            ComparisonVerdict(Difference.HIGHER, Trend.FELL, False),
        ),
        (
            {"implaus_valid_trend_pct": [0.3] * 3, "implaus_fall": [-1.0]},
            ComparisonVerdict(Difference.LOWER, Trend.FELL, True),
        ),
        ({"implaus_fall": []}, ComparisonVerdict(Difference.LOWER, Trend.ROSE, False)),
        ({"implaus_fall": [0.0] * 3}, ComparisonVerdict(Difference.LOWER, Trend.ROSE, False)),
        # No consistent trend: nothing to set the average against.
        (
            {"implaus_valid_trend_pct": [5.0, -5.0], "implaus_fall": [1.0]},
            ComparisonVerdict(Difference.LOWER, Trend.MIXED, False),
        ),
    ],
)
def test_the_comparison_verdicts(changes, verdict):
    assert seeds_verdict(_summary(**changes)) == verdict


def test_the_comparison_summary_reads_each_seed_s_log():
    logs = [
        # Valid-counterfactual differential: exactly two values (a trend of 50 %); starting at 0
        # (no relative trend); a single value; starting at exactly 1 (a trend of 50 %).
        _log(0, [0.9] * 3, [5.0, 3.0], [4.0, 2.0], [0.5, 0.5], mature="raw"),
        _log(1, [0.9] * 4, [5.0, 4.0, 1.0], [0.0, 1.0, 2.0], [0.5] * 3, mature="raw"),
        _log(2, [0.9] * 4, [1.0, 1.0, 1.0], [None, 3.0, None], [0.5] * 3, mature="raw"),
        _log(3, [0.9] * 3, [2.0, 2.0], [1.0, 0.5], [0.5, 0.5], mature="raw"),
    ]
    s = seeds_summary(logs, [_log(k, [0.9] * 3) for k in range(4)])
    assert s["seeds"] == [0, 1, 2, 3] and s["mature"] == "raw"
    assert s["implaus_valid_trend_pct"] == [50.0, 50.0]
    # The average over all counterfactuals, first search epoch minus the last, absolute.
    assert s["implaus_fall"] == [2.0, 4.0, 0.0, 0.0]
    # Seconds per epoch after burn-in: 2 for CT, 1 for the baseline (no search).
    assert (s["time_full"], s["time_vanilla"]) == (2.0, 1.0)
    # A log without a burn-in entry counts every epoch as a search epoch.
    bare = TrainingLog(list(logs[0]), {"seed": 0})
    assert seeds_summary([bare], [bare])["burnin_epochs"] == 0
    with pytest.raises(ValueError, match="as many CT as baseline runs"):
        seeds_summary(logs, logs[:1])


# --- the GPU chapter's seed page -----------------------------------------------------------------


def _page_log(times, implaus=None, valid=0.1, mature="raw", burnin=2):
    records = [
        EpochRecord(
            epoch=epoch,
            acc=0.9 + epoch / 100 if epoch % 2 == 0 else None,
            acc_val=0.85 if epoch % 2 == 0 else None,
            train_loss=0.1,
            implaus=implaus[epoch - burnin - 1] if implaus and epoch > burnin else None,
            reg_loss=None,
            adv_loss=None,
            time_taken=t,
            percent_valid=valid,
            avg_iter=30.0,
        )
        for epoch, t in enumerate(times, start=1)
    ]
    return TrainingLog(records, {"burnin_epochs": burnin, "mature": mature, "device": "cpu"})


def test_the_seed_page_reads_the_last_measured_epoch_and_the_search_epochs():
    assert post_burnin_seconds(_page_log([1.0, 1.0, 3.0, 5.0])) == pytest.approx(4.0)
    full = _page_log([1.0, 1.0, 6.0, 6.0], implaus=[-1.0, -3.0])
    s = seed_page_summary(full, _page_log([1.0, 1.0, 2.0, 2.0]))
    assert (s["time_full"], s["time_vanilla"]) == (6.0, 2.0)
    assert (s["acc_full"], s["acc_val_full"]) == (pytest.approx(0.94), 0.85)
    assert (s["implaus_first"], s["implaus_last"], s["implaus_min"]) == (-1.0, -3.0, -3.0)
    assert (s["search_epochs"], s["valid"]) == (2, pytest.approx(0.1))
    assert seed_page_verdict(s) == SeedPageVerdict(Movement.FELL, True)
    # No search epoch: no implausibility to follow.
    bare = seed_page_summary(_page_log([1.0] * 4), _page_log([1.0] * 4))
    assert bare["implaus_first"] is None and seed_page_verdict(bare).implausibility is None


@pytest.mark.parametrize(
    ("implaus", "valid", "mature", "verdict"),
    [
        ([-3.0, -1.0], 0.1, "raw", SeedPageVerdict(Movement.ROSE, True)),
        ([-2.0, -2.0], 0.1, "raw", SeedPageVerdict(Movement.STAYED, True)),
        ([-1.0, -3.0], 0.5, "raw", SeedPageVerdict(Movement.FELL, False)),  # half valid
        ([-1.0, -3.0], 0.1, "neighbour", SeedPageVerdict(Movement.FELL, False)),
    ],
)
def test_the_seed_page_verdicts(implaus, valid, mature, verdict):
    full = _page_log([1.0, 1.0, 6.0, 6.0], implaus=implaus, valid=valid, mature=mature)
    assert seed_page_verdict(seed_page_summary(full, _page_log([1.0] * 4))) == verdict


# --- the ResNet runs: the paired protocol and robustness ----------------------------------


def _rounds(ct, base, valid=1.0):
    keys = ("cost", "ip", "ip_star_5", "ip_star_0.5")
    return {
        "full": {"validity": [valid] * len(ct), **{k: list(ct) for k in keys}},
        "vanilla": {"validity": [1.0] * len(base), **{k: list(base) for k in keys}},
    }


def _runs(*per_round):
    return {"runs": [{"per_round": r} for r in per_round]}


BETTER = _rounds([1.0, 1.1, 0.9], [2.0, 2.1, 1.9])
WORSE = _rounds([2.0, 2.1, 1.9], [1.0, 1.1, 0.9])


def test_the_paired_claim_follows_every_seed_s_interval():
    c = paired_comparison(_runs(BETTER, BETTER, BETTER))
    assert c["seeds"] == 3 and c["rounds"] == 9 and c["rounds_per_seed"] == [3, 3, 3]
    ratios = [1 / 2, 1.1 / 2.1, 0.9 / 1.9]
    assert c["ip"]["reduction"] == pytest.approx(100 * (1 - fmean(ratios)))
    assert (c["ip"]["ct"], c["ip"]["baseline"]) == (pytest.approx(1.0), pytest.approx(2.0))
    assert "ip_star_0.5" not in c  # MNIST's MMD² vanishes at that length scale
    verdict = paired_verdict(c)
    assert verdict.claim is Claim.HELD and verdict.tallies["ip"] == Tally(3, 3, 0, 0)
    assert not verdict.validity_differs
    noisy = _rounds([1.0, 3.0, 0.5], [2.0, 1.0, 1.5])
    assert paired_verdict(paired_comparison(_runs(noisy))).claim is Claim.NOT_SETTLED
    assert paired_verdict(paired_comparison(_runs(WORSE, WORSE))).claim is Claim.NOT_HELD


def test_seeds_that_disagree_leave_the_claim_open_even_where_the_pooled_rounds_do_not():
    # Seeds 0 and 1: CT lower in every round. Seed 2: differences -10, -10, +0.3, so its own
    # 99 % quantile is -10 + 0.99 * 10.3 > 0 and its interval includes zero; pooled over the
    # nine rounds it is -10 + 0.96 * 10.3 < 0, so the pooled interval excludes it.
    lower = _rounds([1.0, 1.0, 1.0], [11.0, 11.0, 11.5])
    c = paired_comparison(_runs(lower, lower, _rounds([1.0, 1.0, 1.3], [11.0, 11.0, 1.0])))
    assert c["ip"]["significant"]
    assert [r["significant"] for r in c["per_seed"]["ip"]] == [True, True, False]
    verdict = paired_verdict(c)
    assert verdict.claim is Claim.NOT_SETTLED and verdict.tallies["ip"] == Tally(3, 2, 0, 0)
    c = paired_comparison(_runs(BETTER, BETTER, WORSE))
    assert paired_verdict(c).tallies["ip"] == Tally(3, 2, 1, 0)


def test_a_measure_resting_on_few_rounds_or_seeds_says_so():
    sparse = _rounds([1.0, 1.1, 0.9], [2.0, 2.1, 1.9])
    sparse["full"]["ip_star_5"] = [None, None, None]  # no valid counterfactual of CT's
    partial = _rounds([1.0, 1.1, 0.9], [2.0, 2.1, 1.9])
    partial["full"]["ip_star_5"] = [1.0, None, 0.9]
    c = paired_comparison(_runs(sparse, partial, BETTER))
    assert c["per_seed"]["ip_star_5"][0] is None and c["ip_star_5"]["rounds"] == 5
    # The partial seed's two rounds: 1 - (1 / 2 + 0.9 / 1.9) / 2 = 51.3 %.
    second = c["per_seed"]["ip_star_5"][1]
    assert second["rounds"] == 2 and second["reduction"] == pytest.approx(51.3, abs=0.05)
    assert paired_verdict(c).tallies["ip_star_5"] == Tally(3, 2, 0, 1)
    for r in (sparse, partial):
        r["full"]["ip_star_5"] = [None, None, None]
    c = paired_comparison(_runs(sparse, partial, sparse))
    assert c["ip_star_5"] is None and paired_verdict(c).tallies["ip_star_5"] == Tally(3, 0, 0, 3)


def _run(ip, ip_base, star, star_base, cost, cost_base):
    """One seed's paired rounds (two): CT's validity 0.2, the baseline's 0.1 (exactly 0.1 apart,
    which is not a validity gap)."""
    full = {"validity": [0.2, 0.2], "ip": ip, "ip_star_5": star, "cost": cost}
    vanilla = {"validity": [0.1, 0.1], "ip": ip_base, "ip_star_5": star_base, "cost": cost_base}
    return {"full": full, "vanilla": vanilla}


# Seed 0: IP 0.995 against 1 in both rounds (+0.5 %, significant), IP* in one round only, cost
# against a baseline of 0 (no ratio). Seed 1: IP ratios 0.5 and 3 (-75 %, not significant), no
# IP* at all, cost halved (+50 %, significant).
SEED_0 = _run([0.995, 0.995], [1.0, 1.0], [None, 1.0], [2.0, 2.0], [1.0, 1.0], [0.0, 0.0])
SEED_1 = _run([1.0, 3.0], [2.0, 1.0], [None, None], [2.0, 2.0], [1.0, 1.0], [2.0, 2.0])


def test_two_crafted_seeds_pooled_and_seed_by_seed():
    c = paired_comparison(_runs(SEED_0, SEED_1))
    # Pooled IP: CT (0.995 + 0.995 + 1 + 3) / 4 = 1.4975, baseline 1.25; ratios 0.995, 0.995,
    # 0.5, 3: reduction -37.25 %, SE 100 x their sample SD.
    ip = c["ip"]
    assert (ip["ct"], ip["baseline"]) == (pytest.approx(1.4975), pytest.approx(1.25))
    ratios = [0.995, 0.995, 0.5, 3.0]
    assert ip["reduction"] == pytest.approx(-37.25)
    assert ip["se"] == pytest.approx(100 * (sum((r - 1.3725) ** 2 for r in ratios) / 3) ** 0.5)
    assert not ip["significant"] and ip["rounds"] == 4
    assert [s["reduction"] for s in c["per_seed"]["ip"]] == pytest.approx([0.5, -75.0])
    assert [s["significant"] for s in c["per_seed"]["ip"]] == [True, False]
    assert c["validity"] == {"full": pytest.approx(0.2), "vanilla": pytest.approx(0.1)}
    verdict = paired_verdict(c)
    assert verdict.claim is Claim.NOT_SETTLED and not verdict.validity_differs
    # Seed 0's cost has no ratio (baseline 0): significant, but not a reduction either way.
    assert verdict.tallies == {
        "ip": Tally(2, 1, 0, 0),
        "ip_star_5": Tally(2, 1, 0, 1),
        "cost": Tally(2, 1, 0, 0),
    }


def test_one_seed_held_did_not_hold_or_was_not_measured():
    assert paired_verdict(paired_comparison(_runs(SEED_0))).claim is Claim.HELD
    one = paired_verdict(paired_comparison(_runs(SEED_1)))
    assert one.claim is Claim.NOT_SETTLED and one.tallies["ip_star_5"] == Tally(1, 0, 0, 1)
    worse = _run([2.0, 2.0], [1.0, 1.0], [1.0, 1.0], [1.0, 1.0], [1.0, 1.0], [1.0, 1.0])
    assert paired_verdict(paired_comparison(_runs(worse))).claim is Claim.NOT_HELD
    missing = _run([None, None], [2.0, 2.0], [1.0, 1.0], [1.0, 1.0], [1.0, 1.0], [1.0, 1.0])
    assert paired_verdict(paired_comparison(_runs(missing))).claim is Claim.NOT_MEASURED
    both = paired_verdict(paired_comparison(_runs(SEED_1, missing)))
    assert both.claim is Claim.NOT_SETTLED and both.tallies["ip"] == Tally(2, 0, 0, 1)


def test_a_validity_gap_is_named_because_the_means_cover_different_factuals():
    half = _rounds([1.0, 1.1, 0.9], [2.0, 2.1, 1.9], valid=0.5)
    c = paired_comparison(_runs(half, BETTER))
    assert c["validity"] == {"full": pytest.approx(0.75), "vanilla": pytest.approx(1.0)}
    assert c["validity_per_seed"] == {"full": [0.5, 1.0], "vanilla": [1.0, 1.0]}
    assert paired_verdict(c).validity_differs
    assert paired_verdict(paired_comparison(_runs(half))).validity_differs
    assert not paired_verdict(paired_comparison(_runs(_rounds([1.0], [2.0])))).validity_differs


def test_robustness_is_judged_in_percentage_points_per_seed_on_clean_and_fgsm_only():
    def row(key, pp):
        return Comparison(key, key, {}, {}, pp)

    rows = [
        row("clean", []),  # no seed: left out, not the end
        row("clean", [1.0]),
        row("fgsm_0.05", [1.0]),  # another epsilon: not the chapter's
        row("fgsm_0.03", [10.0, 9.0, 11.0]),
        row("pgd_0.03", [10.0, 9.0, 11.0]),
    ]
    verdicts = robustness_verdicts(rows)
    assert [(v.label, v.diffs, v.difference) for v in verdicts] == [
        ("clean", (1.0,), Difference.ONE_SEED),
        ("fgsm_0.03", (10.0, 9.0, 11.0), Difference.HIGHER),
    ]
    for pp, verdict in (
        ([-10.0, -9.0, -11.0], Difference.LOWER),
        ([10.0, -9.0, 1.0], Difference.COMPARABLE),
    ):
        assert robustness_verdicts([row("fgsm_0.03", pp)])[0].difference is verdict
    assert robustness_verdicts([row("clean", [])]) == []


# --- the ablation chapter ------------------------------------------------------------------------


def _ablation_eval(seed, rounds):
    """One seed's ablation evaluation: ``rounds`` maps each objective to its per-round IP (the
    other measures equal to it)."""
    per_round = {
        m: {"validity": [1.0] * len(v), "ip": v, "ip_star_5": v, "cost": v}
        for m, v in rounds.items()
    }
    robust = {"clean": 0.95, "epsilons": [3 / 90], "fgsm": [0.9], "pgd": [0.9], "rows": 100}
    return {
        "config": {"seed": seed},
        "unconstrained": {"per_round": per_round},
        "robustness": {o: dict(robust) for o in ("energy", "adversarial")},
    }


def test_the_ablation_compares_each_seed_with_its_own_baseline_and_never_pools_them():
    seeds = [
        {
            "full": [1.0, 1.1],
            "energy": [1.0, 1.2],
            "adversarial": [2.0, 2.2],
            "vanilla": [2.0, 2.1],
        },
        {
            "full": [3.0, 3.3],
            "energy": [1.5, 1.4],
            "adversarial": [2.5, 2.4],
            "vanilla": [2.0, 2.2],
        },
    ]
    merged = _ablation([_ablation_eval(s, r) for s, r in enumerate(seeds)])
    assert merged["seeds"] == [0, 1]
    for objective in ("full", "energy", "adversarial"):
        for i, rounds in enumerate(seeds):
            own = compare_rounds(rounds[objective], rounds["vanilla"])
            assert merged[objective]["per_seed"]["ip"][i] == own
        assert not set(ABLATION_MEASURES) & set(merged[objective])  # no pooled comparison
    assert merged["energy"]["robustness_per_seed"][1]["fgsm"] == [0.9]


def _interval(low, high):
    return {
        "reduction": 0.0 - (low + high) * 50,
        "significant": low > 0 or high < 0,
        "ci_low": low,
        "ci_high": high,
    }


LOWER = [_interval(-2.0, -1.0)] * 2
FLAT = [_interval(-1.0, 1.0)] * 2
LEVEL = [_interval(0.0, 1.0)] * 2  # from zero up: not higher


def _ablation_results(ip, fgsm=(0.9, 0.9), energy=FLAT, adversarial=FLAT, key="lin_sep"):
    """One data set's merged results, two seeds: CT's IP intervals per seed as given, the
    halves' as given, every other reduction not significant; CT's FGSM accuracy per seed against
    the baseline's 0.8."""
    acc = [{"clean": 0.9, "epsilons": [3 / 90], "fgsm": [f], "pgd": [f]} for f in fgsm]
    base = [{"clean": 0.9, "epsilons": [3 / 90], "fgsm": [0.8], "pgd": [0.8]}] * 2

    def objective(ip_seeds):
        return {
            "per_seed": {"ip": ip_seeds, "ip_star_5": FLAT, "cost": FLAT},
            "validity": 1.0,
            "robustness": {"clean": 0.9, "epsilons": [3 / 90], "fgsm": [0.8]},
            "robustness_per_seed": base,
        }

    return {
        "data": {key: {"seeds": [0, 1], "robustness": {"full": acc, "vanilla": base}}},
        "ablation": {
            key: {
                "seeds": [0, 1],
                "full": objective(ip),
                "energy": objective(energy),
                "adversarial": objective(adversarial),
                "vanilla": {"validity": 1.0},
            }
        },
    }


def _merged(*parts):
    return {
        "data": {k: v for p in parts for k, v in p["data"].items()},
        "ablation": {k: v for p in parts for k, v in p["ablation"].items()},
    }


def test_the_ablation_counts_a_term_only_where_every_seed_says_so():
    both = ablation_verdict(_ablation_results(LOWER, energy=LOWER))
    assert both.lower["ip"] == {"full": ["lin_sep"], "energy": ["lin_sep"], "adversarial": []}
    assert both.higher["ip"] == {"full": [], "energy": [], "adversarial": []}
    assert both.half is Half.ENERGY and both.data_sets == 1
    # One seed's interval reaches above zero: not lower in every seed, and higher in one.
    one = ablation_verdict(_ablation_results([_interval(-2.0, -1.0), _interval(0.5, 3.0)]))
    assert one.lower["ip"]["full"] == [] and one.higher["ip"]["full"] == ["lin_sep"]
    # An interval that touches zero is neither.
    edge = ablation_verdict(_ablation_results([_interval(-2.0, -1.0), _interval(-3.0, 0.0)]))
    assert edge.lower["ip"]["full"] == edge.higher["ip"]["full"] == []
    # A seed with nothing valid (None) is not a reduction.
    assert ablation_verdict(_ablation_results([_interval(-2.0, -1.0), None])).lower["ip"] == {
        "full": [],
        "energy": [],
        "adversarial": [],
    }
    assert ablation_verdict({}) is None


def test_fgsm_robustness_must_clear_the_margin_in_every_seed():
    # CT's FGSM accuracy per seed against the baseline's 0.8, margin 0.05.
    assert ablation_verdict(_ablation_results(FLAT, (0.9, 0.86))).robust["full"] == ["lin_sep"]
    assert ablation_verdict(_ablation_results(FLAT, (0.9, 0.84))).robust["full"] == []
    # Exactly the margin above the baseline's 0.25 is not more than it.
    for fgsm, robust in (((0.5, 0.5), []), ((0.75, 0.625), ["lin_sep"])):
        results = _ablation_results(FLAT, fgsm)
        for base in results["data"]["lin_sep"]["robustness"]["vanilla"]:
            base["fgsm"] = [0.25]
        assert ablation_verdict(results, margin=0.25).robust["full"] == robust


@pytest.mark.parametrize(
    ("energy", "adversarial", "half"),
    [(LOWER, LEVEL, Half.ENERGY), (FLAT, LOWER, Half.ADVERSARIAL), (LOWER, LOWER, Half.NEITHER)],
)
def test_the_half_that_lowers_ip_on_more_data_sets(energy, adversarial, half):
    results = _merged(
        _ablation_results(LOWER, energy=energy, adversarial=adversarial),
        _ablation_results(FLAT, energy=energy, adversarial=adversarial, key="circles"),
    )
    verdict = ablation_verdict(results)
    assert verdict.half is half and verdict.data_sets == 2
    assert verdict.lower["ip"]["full"] == ["lin_sep"]


def test_the_ablation_refuses_seeds_that_the_main_grid_did_not_train():
    results = _ablation_results(FLAT)
    results["data"]["lin_sep"]["seeds"] = [0, 2]
    with pytest.raises(ValueError, match=r"the ablation's seeds \[0, 1\] are not the main grid's"):
        ablation_verdict(results)


def _ig_run(seed, ct, bl):
    return {"config": {"seed": seed}, "per_round": {"full_protected": ct, "vanilla": bl}}


def test_ig_sensitivity_is_judged_seed_by_seed():
    # Seed 0: CT lower in every round; seed 1: one round higher. Pooled, 0.995 of the way to the
    # largest of 6 differences: -1 + 0.975 * 1.5 > 0, so the pooled interval includes zero too,
    # while seed 0's own lies below it.
    runs = [_ig_run(0, [0.0] * 3, [1.0] * 3), _ig_run(1, [0.0, 0.0, 1.5], [1.0] * 3)]
    ig = _ig(runs)
    assert ig["rounds"] == 6 and ig["seeds"] == [0, 1]
    assert [s["rounds"] for s in ig["per_seed"]] == [3, 3]
    assert ig["per_seed"][0]["diff_high"] == -1.0 and ig["per_seed"][1]["diff_high"] > 0
    assert [sensitivity(s) for s in ig["per_seed"]] == [
        Sensitivity.LESS,
        Sensitivity.NOT_SIGNIFICANT,
    ]
    verdict = ig_verdict({"ig": {"lin_sep": ig}})
    assert (verdict.lower, verdict.some, verdict.higher) == ([], ["lin_sep"], [])
    verdict = ig_verdict({"ig": {"lin_sep": _ig([runs[0], _ig_run(1, [0.0] * 3, [2.0] * 3)])}})
    assert (verdict.lower, verdict.some, verdict.higher) == (["lin_sep"], [], [])
    higher = _ig([_ig_run(0, [2.0] * 3, [1.0] * 3), _ig_run(1, [3.0] * 3, [1.0] * 3)])
    assert ig_verdict({"ig": {"lin_sep": higher}}).higher == ["lin_sep"]
    assert ig_verdict({}) is None


def test_an_ig_interval_that_touches_zero_is_not_significant():
    seeds = [(-1.0, 0.0), (0.0, 1.0), (-2.0, -1.0), (1.0, 2.0)]
    assert [sensitivity({"diff_low": lo, "diff_high": hi}) for lo, hi in seeds] == [
        Sensitivity.NOT_SIGNIFICANT,
        Sensitivity.NOT_SIGNIFICANT,
        Sensitivity.LESS,
        Sensitivity.MORE,
    ]


def test_ig_verdicts_set_the_paper_s_directions_beside_ours():
    def ig(*intervals):
        return {"per_seed": [{"diff_low": lo, "diff_high": hi} for lo, hi in intervals]}

    results = {
        "ig": {
            "lin_sep": ig((-2.0, -1.0), (-3.0, -0.5)),
            "circles": ig((-2.0, -1.0), (-3.0, -0.5)),
            "gmsc": ig((-1.0, 1.0), (-1.0, 1.0)),
        }
    }
    verdict = ig_verdict(results)
    assert (verdict.lower, verdict.some, verdict.higher) == (["lin_sep", "circles"], [], [])
    # GMSC's paper medians are higher for CT (0.71 against 0.16).
    assert verdict.paper_lower == ["lin_sep", "circles"] and verdict.data_sets == 3


def test_ig_differences_are_taken_in_double_precision():
    # 0.1 in single precision is 0.10000000149...: the interval must be exactly ±0.1.
    assert _ig_stats([0.1] * 3, [0.0] * 3)["diff_low"] == 0.1
    assert _ig_stats([0.0] * 3, [0.1] * 3)["diff_high"] == -0.1


# --- one search under the microscope -------------------------------------------------------------


def test_the_microscope_reads_where_each_search_stopped_and_took_its_adversarial_example():
    result = hand_made_microscope(10, 0.6, False)
    baseline, ct = microscope_searches(result).values()
    assert (baseline.valid, baseline.stop, baseline.target_prob) == (False, 1, 0.6)
    assert baseline.adversarial is Adversarial.FACTUAL  # the first step left the box
    assert (ct.valid, ct.stop, ct.target_prob, ct.linf) == (True, 3, 0.8, 0.78)
    assert (ct.adversarial, ct.adversarial_at) == (Adversarial.STEP, 1)
    # L1 from the first iterate to the last, in [-1, 1] units: 2 / 255 per level, 784 pixels.
    assert baseline.l1 == pytest.approx(190 * 784 * 2 / 255)
    assert ct.l1 == pytest.approx(100 * 784 * 2 / 255)
    result["searches"]["full"] |= {"counterfactual_at": 0, "adversarial_at": 0}
    assert microscope_searches(result)["full"].adversarial is Adversarial.NEVER_MOVED


# --- the ridge's training logs -------------------------------------------------------------------


def _cell(valid, ridge, lambdas=(1.0, 0.5, 0.0, 0.0)):
    log = [
        {"epoch": i + 1, "percent_valid": v, "reg_loss": r}
        for i, (v, r) in enumerate(zip(valid, ridge, strict=True))
    ]
    return {"meta": {"lambdas": list(lambdas)}, "log": log}


def _oscillating(last, high=0.9, visits=0):
    """100 epochs alternating ``high`` / 0.2, ``visits`` of the last 50 raised to 0.97, and
    ``last`` at epoch 100."""
    values = [0.2 if i % 2 else high for i in range(100)]
    for i in range(visits):
        values[50 + 2 * i] = 0.97
    values[-1] = last
    return values


def _protected(means):
    return {
        "data": {
            k: {"validity": {"protected": {"full": [{"mean": m} for m in v]}}}
            for k, v in means.items()
        }
    }


def _ridge_logs():
    configured = {
        "lin_sep": {
            s: _cell(_oscillating(last), [5.0] * 99 + [top])
            for s, (last, top) in enumerate(((0.6, 20_000.0), (0.5, 80_000.0), (0.2, 30_000.0)))
        },
        "moons": {
            s: _cell(_oscillating(last, visits=v), [5.0] * 100 if s else [50_000.0] * 100)
            for s, (last, v) in enumerate(((0.6, 0), (0.9, 5), (0.3, 2)))
        },
    }
    ridged = {
        k: {s: _cell([1.0] * 100, [2.0] * 100, (1.0, 0.5, 0.01, 0.25)) for s in range(3)}
        for k in ("lin_sep", "moons")
    }
    # Test validity: LS within 0.1 of the last epoch in every seed; Moon not in seed 1.
    results = _protected({"lin_sep": (0.62, 0.45, 0.25), "moons": (0.65, 0.6, 0.35)})
    variant = _protected({"lin_sep": (1.0, 1.0, 1.0), "moons": (1.0, 1.0, 1.0)})
    return configured, {"main": (ridged, variant)}, results


def test_the_ridge_reading_measures_the_spread_and_what_follows_from_it():
    configured, ridged, results = _ridge_logs()
    r = stability_reading(configured, results, ridged)
    assert r.ridge_without == [20_000.0, 80_000.0, 30_000.0, 50_000.0, 5.0, 5.0]
    assert r.ridge_with == [2.0] * 6
    # Population SD of the last 50 epochs: the plain alternation (LS seed 2) and Moon seed 1
    # with five 0.97s and 0.9 at epoch 100.
    assert r.without["lin_sep"][2] == pytest.approx(pstdev(_oscillating(0.2)[-50:]))
    assert r.without["moons"][1] == pytest.approx(pstdev(_oscillating(0.9, visits=5)[-50:]))
    assert r.with_ == {"lin_sep": [0.0] * 3, "moons": [0.0] * 3}
    assert r.unsteady == ["lin_sep", "moons"] and r.tracked == ["lin_sep"]
    assert r.reached == [Reached("lin_sep", [0, 0, 0], 0), Reached("moons", [0, 5, 2], 0)]
    assert stability_reading({}, results, ridged) is None
    assert stability_reading(configured, results, {}) is None


def test_the_ridge_reading_where_the_logs_do_not_separate_or_track():
    configured, ridged, results = _ridge_logs()
    steady = {k: {s: _cell([0.5] * 100, [5.0] * 100) for s in range(3)} for k in configured}
    r = stability_reading(steady, results, ridged)
    assert r.unsteady == r.tracked == r.reached == []
    far = _protected({"lin_sep": (0.0, 0.0, 0.9), "moons": (0.0, 0.0, 0.9)})
    assert stability_reading(configured, far, ridged).tracked == []
    # A ridge that leaves Moon as unsteady as none: only LS is unsteady without the ridge.
    shaky = {
        "lin_sep": ridged["main"][0]["lin_sep"],
        "moons": {s: _cell(_oscillating(0.5), [9.0] * 100) for s in range(3)},
    }
    r = stability_reading(configured, results, {"mixed": (shaky, ridged["main"][1])})
    assert r.unsteady == ["lin_sep"] and [x.key for x in r.reached] == ["lin_sep"]
    # Exactly the tolerance apart still tracks; a seed that ends at the level counts as ended.
    configured["lin_sep"] = {s: _cell(_oscillating(0.1), [5.0] * 100) for s in range(3)}
    at_level = _oscillating(0.95, high=0.95)
    at_level[-2] = 0.2
    configured["moons"][1] = _cell(at_level, [5.0] * 100)
    edge = _protected({"lin_sep": (0.0, 0.0, 0.0), "moons": (0.65, 0.6, 0.35)})
    r = stability_reading(configured, edge, ridged)
    assert r.tracked == ["lin_sep"] and r.reached[1] == Reached("moons", [0, 25, 2], 1)


# --- the two-dimensional chapter ---------------------------------------------------------------


def _panel(title, paths, path_l1, prob, valid, protected=False, moved_x1=False):
    return {
        "title": title,
        "protected": protected,
        "prob": prob,
        "paths": paths,
        "valid": valid,
        "path_l1": path_l1,
        "moved_x1": moved_x1,
    }


def test_the_two_dimensional_reading_follows_the_paths():
    panels = [
        # Reach |-1 - 1| + |0.5 - 2| = 3.5, through a middle point that is neither end; a length
        # of exactly 3 times the reach is not wandering. The class changes down the first column
        # only, where one probability is exactly 0.5.
        _panel(
            "baseline",
            [[[1.0, 2.0], [0.0, 1.0], [-1.0, 0.5]]],
            [10.5],
            [[0.5, 0.9], [0.4, 0.9]],
            [True],
        ),
        # Reach 4, further than the baseline's; length 16, 4 times the reach.
        _panel("CT", [[[0.0, 0.0], [3.0, 1.0]]], [16.0], [[0.1, 0.1], [0.9, 0.9]], [False]),
        _panel(
            "baseline, x1 protected",
            [[[0.0, 0.0], [0.0, 1.0]]],
            [1.0],
            [[0.1, 0.9]] * 2,
            [True],
            True,
            True,
        ),
        _panel(
            "CT, x1 protected",
            [[[0.0, 0.0], [0.0, 2.0]]],
            [2.0],
            [[0.1, 0.1]] * 2,
            [True],
            True,
            False,
        ),
    ]
    (r,) = two_d_readings({"data": [{"label": "LS", "panels": panels}]})
    assert [(p.valid, p.searches, p.length, p.reach) for p in r.panels] == [
        (1, 1, 10.5, 3.5),
        (0, 1, 16.0, 4.0),
        (1, 1, 1.0, 1.0),
        (1, 1, 2.0, 2.0),
    ]
    assert [p.wanders for p in r.panels] == [False, True, False, False]
    assert [p.moved_x1 for p in r.panels] == [False, False, True, False]
    assert r.ct_further and r.crossable == (0.5, 0.0) and r.fewer_crossable
    panels[1]["paths"] = [[[0.0, 0.0], [1.0, 1.0]]]  # reach 2: not further than 3.5
    panels[3]["prob"] = [[0.1, 0.1], [0.9, 0.9]]  # both columns change along x2
    (r,) = two_d_readings({"data": [{"label": "LS", "panels": panels}]})
    assert not r.ct_further and r.crossable == (0.5, 1.0) and not r.fewer_crossable
