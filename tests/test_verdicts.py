"""The generated verdicts of the comparison, evaluation and ablation chapters, on crafted logs and
results: a verdict must follow from the statistic that answers its question, seed by seed."""

from __future__ import annotations

import pytest

from cfbook.book.figures.seeds import seeds_figure, seeds_markdown, seeds_summary
from cfbook.book.report import (
    Comparison,
    clear_difference,
    paired_comparison,
    paired_table,
    paired_text,
    robustness_text,
)
from cfbook.training.log import EpochRecord, TrainingLog


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
                percent_valid=valid[i - burnin - 1] if cf else 1.0,
                avg_iter=3.0,
                implaus_valid=implaus_valid[i - burnin - 1] if cf else None,
            )
        )
    return TrainingLog(records, {"seed": seed, "burnin_epochs": burnin, "mature": mature})


def _pair(acc_full, acc_vanilla, implaus, implaus_valid, valid):
    full = [_log(s, a, implaus, implaus_valid, valid) for s, a in enumerate(acc_full)]
    vanilla = [_log(s, a) for s, a in enumerate(acc_vanilla)]
    return full, vanilla


def test_a_falling_average_that_only_tracks_validity_is_not_called_an_improvement():
    # implaus (invalid counting 0) falls from 0 to -0.2 as validity rises from 0 % to 8 %,
    # while the differential over the valid counterfactuals rises from -2.47 to -2.09.
    implaus, valid = [0.0, -0.1, -0.2], [0.01, 0.04, 0.08]
    implaus_valid = [-2.47, -2.3, -2.09]
    full, vanilla = _pair(
        [[0.9, 0.95, 0.96, 0.97]] * 3, [[0.9, 0.95, 0.96, 0.97]] * 3, implaus, implaus_valid, valid
    )
    text = seeds_markdown(seeds_summary(full, vanilla))
    assert "it rose in every seed: the model gives the counterfactuals that reach their" in text
    assert "moved the other way" in text and "follows the share of valid searches" in text
    assert "fell in every seed" not in text


def test_a_single_seed_dip_of_the_baseline_is_not_higher_accuracy_with_ct():
    # Seed 0's baseline dips at the end (0.934); seeds 1 and 2 are level with CT.
    full_acc = [[0.95, 0.96, 0.964, 0.964]] * 3
    vanilla_acc = [
        [0.95, 0.978, 0.95, 0.934],
        [0.95, 0.96, 0.966, 0.965],
        [0.95, 0.96, 0.963, 0.966],
    ]
    full, vanilla = _pair(full_acc, vanilla_acc, [-1.0, -1.1, -1.2], [-2.0, -2.1, -2.2], [0.6] * 3)
    text = seeds_markdown(seeds_summary(full, vanilla))
    assert "comparable: the difference is within the spread between seeds" in text
    assert "higher with CT" not in text
    assert "percentage points for accuracy" in text and "pp" in text


def test_a_consistent_gap_and_a_consistent_fall_are_reported_as_such():
    full_acc = [[0.95, 0.97, 0.97, 0.97], [0.95, 0.971, 0.971, 0.971], [0.95, 0.969, 0.969, 0.969]]
    vanilla_acc = [
        [0.95, 0.95, 0.95, 0.95],
        [0.95, 0.951, 0.951, 0.951],
        [0.95, 0.949, 0.949, 0.949],
    ]
    full, vanilla = _pair(full_acc, vanilla_acc, [-1.0, -1.5, -2.0], [-2.0, -2.5, -3.0], [0.8] * 3)
    s = seeds_summary(full, vanilla)
    assert s["acc_diffs_pp"] == [2.0, 2.0, 2.0] or all(
        abs(d - 2.0) < 1e-9 for d in s["acc_diffs_pp"]
    )
    text = seeds_markdown(s)
    assert "higher with CT" in text and "it fell in every seed" in text
    assert "80 % of the training-time counterfactuals were valid" in text
    fig = seeds_figure(full, vanilla)
    assert (
        len(fig.data) == 2 * 2 * 2 + 2 * 2
    )  # two bands and two means per objective, CT only below


def _summary(**changes):
    """A comparison summary as ``seeds_summary`` returns it: three seeds, CT clearly less
    accurate, validity 50 % on average, the differential over the valid counterfactuals rising
    in every seed while the average over all of them falls."""
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


def test_the_comparison_text_reads_to_the_character():
    # Accuracy: mean -2.0, sample sd 0.2, SE 0.115; the trend: mean -20, SE 5.8; the time ratio
    # 30 / 7.5 = 4.0.
    assert seeds_markdown(_summary()) == (
        "**Runs:** 3 seeds per objective (42, 43, 44), 20 epochs, the first 4 without "
        'counterfactuals; invalid counterfactuals count as their neighbour (mature="neighbour"). '
        "Differences: percentage points for accuracy, relative % for the energy differential; "
        "positive = CT better.\n\n"
        "**Cost:** after burn-in an epoch took 30.0 s with CT against 7.5 s for the baseline "
        "(4.0 times as long), averaged over the seeds.\n\n"
        "**Accuracy:** held-out accuracy over the last 3 recorded epochs, CT minus baseline: "
        "-2.0 pp ± 0.1 over the seeds (-2.0, -2.2, -1.8 pp): lower with CT.\n\n"
        "**Search:** after burn-in 50 % of the training-time counterfactuals were valid on "
        "average (per seed: 50 %, 25 %, 75 %).\n\n"
        "**Plausibility:** the energy differential over the valid counterfactuals changed by "
        "-20 % ± 6 from the first to the last search epoch (-10, -20, -30 %; positive = fell): "
        "it rose in every seed: the model gives the counterfactuals that reach their target more "
        "evidence relative to real target-class samples, the opposite of what the term asks. "
        "Over all counterfactuals (an invalid one counting 0) it moved the other way: that "
        "average follows the share of valid searches, not plausibility."
    )
    one = _summary(
        seeds=[7],
        mature="raw",
        nepochs=5,
        burnin_epochs=1,
        time_full=None,
        acc_diffs_pp=[0.3],
        valid_per_seed=[],
        implaus_valid_trend_pct=[],
        implaus_fall=[],
        last_epochs=2,
    )
    assert seeds_markdown(one) == (
        "**Runs:** 1 seed per objective (7), 5 epochs, the first 1 without counterfactuals; "
        'invalid counterfactuals count as found (mature="raw"). Differences: percentage points '
        "for accuracy, relative % for the energy differential; positive = CT better.\n\n"
        "**Accuracy:** held-out accuracy over the last 2 recorded epochs, CT minus baseline: "
        "+0.3 pp over the seeds (+0.3 pp): one seed: no spread between seeds to tell a "
        "difference from.\n\n"
        "**Plausibility:** too few valid counterfactuals to follow the energy differential over "
        "the valid ones; this run says nothing about plausibility."
    )
    # No baseline time: no cost line either.
    assert "**Cost:**" not in seeds_markdown(_summary(time_vanilla=None))


def test_the_comparison_text_sets_the_average_over_all_counterfactuals_beside_a_clear_trend():
    other_way = "moved the other way"
    # Small but consistent: a gain of 0.3 pp and a fall of 0.3 % in every seed (sums below 1).
    small = _summary(acc_diffs_pp=[0.3] * 3, implaus_valid_trend_pct=[0.3] * 3)
    text = seeds_markdown(small | {"implaus_fall": [-1.0]})
    assert "(+0.3, +0.3, +0.3 pp): higher with CT." in text and other_way in text
    assert (
        "(+0, +0, +0 %; positive = fell): it fell in every seed: the model gives the "
        "counterfactuals that reach their target less evidence relative to real target-class "
        "samples. Over all"
    ) in text
    assert other_way not in seeds_markdown(small)  # the average fell too
    assert other_way not in seeds_markdown(small | {"implaus_fall": []})  # not logged
    # An average over all counterfactuals that did not move is not "the other way" of a rise.
    assert other_way not in seeds_markdown(_summary(implaus_fall=[0.0] * 3))
    # No consistent trend: nothing to set the average against.
    mixed = seeds_markdown(_summary(implaus_valid_trend_pct=[5.0, -5.0], implaus_fall=[1.0]))
    assert "no consistent change across the seeds." in mixed and other_way not in mixed


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
    # A log without a burn-in entry counts every epoch as a search epoch.
    bare = TrainingLog(list(logs[0]), {"seed": 0})
    assert seeds_summary([bare], [bare])["burnin_epochs"] == 0


def test_the_comparison_figure_draws_each_measure_s_seed_band_and_mean_where_it_belongs():
    full = [
        _log(0, [0.5, 0.6, 0.7], [1.0, 2.0], [3.0, 4.0], [0.5, 0.7]),
        _log(1, [0.7, 0.8, 0.9], [1.0, 2.0], [5.0, None], [0.9, 0.1]),
    ]
    vanilla = [_log(0, [0.4, 0.5, 0.6]), _log(1, [0.6, 0.5, 0.4])]
    fig = seeds_figure(full, vanilla)
    # Per panel and objective: the band (max over seeds, then min backwards) and the mean.
    expected = [
        ("x", [1, 2, 3], [1.0, 2.0, 2.0], [1.0, 2.0, 2.0], [1.0, 2.0, 2.0]),  # CT's seconds
        ("x2", [1, 2, 3], [0.7, 0.8, 0.9], [0.5, 0.6, 0.7], [0.6, 0.7, 0.8]),  # CT's accuracy
        ("x", [1, 2, 3], [1.0] * 3, [1.0] * 3, [1.0] * 3),  # the baseline's seconds
        ("x2", [1, 2, 3], [0.6, 0.5, 0.6], [0.4, 0.5, 0.4], [0.5, 0.5, 0.5]),
        ("x3", [2, 3], [0.9, 0.7], [0.5, 0.1], [0.7, 0.4]),  # valid share, search epochs only
        ("x4", [2, 3], [5.0, 4.0], [3.0, 4.0], [4.0, 4.0]),  # a seed without valid ones left out
    ]
    assert len(fig.data) == 2 * len(expected)
    for k, (axis, epochs, top, bottom, mean) in enumerate(expected):
        band, line = fig.data[2 * k], fig.data[2 * k + 1]
        assert band.xaxis == line.xaxis == axis, k
        assert list(band.x) == epochs + epochs[::-1] and list(line.x) == epochs, k
        assert list(band.y) == pytest.approx(top + bottom[::-1]), k
        assert list(line.y) == pytest.approx(mean), k
    assert [t.name for t in fig.data if t.showlegend] == ["CT (full objective)", "baseline"]
    assert [t.name for t in fig.data[1::2]][4:] == ["CT", "CT"]
    assert fig.layout.shapes[0].x0 == 1.5  # the end of the burn-in


def test_clear_difference_needs_one_sign_and_two_standard_errors():
    assert clear_difference([2.0, 2.1, 1.9])
    assert not clear_difference([3.0, -0.5, 0.2])  # signs disagree
    assert not clear_difference([0.1, 5.0, 0.1])  # one sign, but within two SEs
    assert not clear_difference([2.0])  # one seed: no error estimate


def _rounds(ct, base, valid=1.0):
    keys = ("cost", "ip", "ip_star_5", "ip_star_0.5")
    return {
        "full": {"validity": [valid] * len(ct), **{k: list(ct) for k in keys}},
        "vanilla": {"validity": [1.0] * len(base), **{k: list(base) for k in keys}},
    }


def test_the_paired_claim_follows_every_seed_s_interval():
    better = {"runs": [{"per_round": _rounds([1.0, 1.1, 0.9], [2.0, 2.1, 1.9])}] * 3}
    c = paired_comparison(better)
    assert c["seeds"] == 3 and c["rounds"] == 9 and c["rounds_per_seed"] == [3, 3, 3]
    assert c["ip"]["significant"] and all(r["significant"] for r in c["per_seed"]["ip"])
    assert paired_text(c).startswith("**The claim held here:** in every seed")
    row = next(line for line in paired_table(c).splitlines() if line.startswith("| IP (L1"))
    assert row.startswith("| IP (L1 to target-class digits) | 1 | 2 | +50.1 ±")
    assert row.endswith("| yes | 9 of 9 | +50.1 ✱ / +50.1 ✱ / +50.1 ✱ |")
    assert "length scale 0.5" not in paired_table(c)  # MNIST's MMD² vanishes there
    noisy = {"runs": [{"per_round": _rounds([1.0, 3.0, 0.5], [2.0, 1.0, 1.5])}]}
    assert paired_text(paired_comparison(noisy)).startswith("**The claim is not settled here:**")
    worse = {"runs": [{"per_round": _rounds([2.0, 2.1, 1.9], [1.0, 1.1, 0.9])}] * 2}
    assert paired_text(paired_comparison(worse)).startswith(
        "**The claim did not hold here:** in every seed"
    )


def test_seeds_that_disagree_leave_the_claim_open_even_where_the_pooled_rounds_do_not():
    # Seeds 0 and 1: CT lower in every round. Seed 2: differences -10, -10, +0.3, so its own
    # 99 % quantile is -10 + 0.99 * 10.3 > 0 and its interval includes zero; pooled over the
    # nine rounds it is -10 + 0.96 * 10.3 < 0, so the pooled interval excludes it.
    seeds = [([1.0, 1.0, 1.0], [11.0, 11.0, 11.5])] * 2 + [([1.0, 1.0, 1.3], [11.0, 11.0, 1.0])]
    c = paired_comparison({"runs": [{"per_round": _rounds(ct, bl)} for ct, bl in seeds]})
    assert c["ip"]["significant"]
    assert [r["significant"] for r in c["per_seed"]["ip"]] == [True, True, False]
    text = paired_text(c)
    assert text.startswith("**The claim is not settled here:**")
    assert "excludes zero in CT's favour in 2 of 3 seeds and against it in 0" in text
    against = [([1.0, 1.1, 0.9], [2.0, 2.1, 1.9])] * 2 + [([2.0, 2.1, 1.9], [1.0, 1.1, 0.9])]
    c = paired_comparison({"runs": [{"per_round": _rounds(ct, bl)} for ct, bl in against]})
    assert "in CT's favour in 2 of 3 seeds and against it in 1" in paired_text(c)


def test_a_measure_resting_on_few_rounds_or_seeds_says_so():
    full = _rounds([1.0, 1.1, 0.9], [2.0, 2.1, 1.9])
    sparse = _rounds([1.0, 1.1, 0.9], [2.0, 2.1, 1.9])
    sparse["full"]["ip_star_5"] = [None, None, None]  # no valid counterfactual of CT's
    partial = _rounds([1.0, 1.1, 0.9], [2.0, 2.1, 1.9])
    partial["full"]["ip_star_5"] = [1.0, None, 0.9]
    c = paired_comparison({"runs": [{"per_round": r} for r in (sparse, partial, full)]})
    assert c["per_seed"]["ip_star_5"][0] is None and c["ip_star_5"]["rounds"] == 5
    text = paired_text(c)
    # The partial seed's two rounds: 1 - (1 / 2 + 0.9 / 1.9) / 2 = 51.3 %.
    assert "reduction per seed: n/a / +51.3 ✱ (2 of 3 rounds) / +50.1 ✱ %" in text
    assert "significantly lower with CT in 2 of 3 seeds, higher in 0; in 1 no round" in text
    star = next(line for line in paired_table(c).splitlines() if line.startswith("| IP* "))
    assert star.endswith("| 5 of 9 | n/a / +51.3 ✱ (2 of 3 rounds) / +50.1 ✱ |")
    for r in (sparse, partial, full):
        r["full"]["ip_star_5"] = [None, None, None]
    c = paired_comparison({"runs": [{"per_round": r} for r in (sparse, partial, full)]})
    assert "IP* (MMD², length scale 5): no round to measure in any seed." in paired_text(c)
    assert "| no valid counterfactuals | 0 of 9 | n/a / n/a / n/a |" in paired_table(c)


def test_robustness_is_compared_in_percentage_points_per_seed():
    row = Comparison(
        "fgsm_0.03",
        "FGSM accuracy, eps 0.03",
        {"mean": 0.8, "se": 0.01},
        {"mean": 0.7, "se": 0.01},
        [10.0, 9.0, 11.0],
    )
    assert robustness_text([row]) == (
        "**FGSM accuracy, eps 0.03:** CT minus baseline +10.0 ± 0.6 percentage points "
        "(+10.0, +9.0, +11.0 per seed): higher with CT."
    )
    row.pp[:] = [-10.0, -9.0, -11.0]
    assert robustness_text([row]).endswith("per seed): lower with CT.")
    row.pp[:] = [0.5, 0.6, 0.55]  # a clear difference smaller than one point
    assert robustness_text([row]).endswith("per seed): higher with CT.")
    row.pp[:] = [10.0, -9.0, 1.0]
    assert robustness_text([row]).endswith("per seed): comparable within the spread between seeds.")
    # Only clean accuracy and FGSM at the chapter's epsilon are read; a row without seeds is
    # skipped, not the end of the text.
    empty = Comparison("clean", "clean accuracy", {}, {}, [])
    clean = Comparison("clean", "clean accuracy", {}, {}, [1.0])
    other = Comparison("fgsm_0.05", "FGSM accuracy, eps 0.05", {}, {}, [1.0])
    text = robustness_text([empty, clean, other, row])
    first, second = text.split("\n\n")
    assert first == (
        "**clean accuracy:** CT minus baseline +1.0 percentage points (+1.0 per seed): "
        "comparable within the spread between seeds."
    )
    assert second.startswith("**FGSM accuracy, eps 0.03:**")
    assert robustness_text([empty]) == ""


def test_a_validity_gap_is_named_because_the_means_cover_different_factuals():
    rounds = _rounds([1.0, 1.1, 0.9], [2.0, 2.1, 1.9], valid=0.5)
    text = paired_text(paired_comparison({"runs": [{"per_round": rounds}]}))
    assert "Validity differs: 50% of CT's test-time searches reach their target (50% per" in text
    two = paired_text(paired_comparison({"runs": [{"per_round": rounds}] * 2}))
    assert (
        "reach their target (50% / 50% per seed), against 100% of the baseline's (100% / 100%)"
        in two
    )
    assert "against 100% of the baseline's (100%)" in text
    level = paired_text(paired_comparison({"runs": [{"per_round": _rounds([1.0], [2.0])}]}))
    assert "Validity differs" not in level


# The ablation chapter: each seed's models against its own baseline.


def _ablation_eval(seed, rounds):
    """One seed's ablation evaluation: ``rounds`` maps each objective to its per-round IP (the
    other measures equal to it), with FGSM accuracies 0.9 for every objective but the baseline's
    0.8."""
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
    from cfbook.evaluation.statistics import compare_rounds
    from cfbook.paper.merge import ABLATION_MEASURES, _ablation

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


def test_ig_differences_are_taken_in_double_precision():
    from cfbook.paper.merge import _ig_stats

    # 0.1 in single precision is 0.10000000149...: the interval must be exactly ±0.1.
    assert _ig_stats([0.1] * 3, [0.0] * 3)["diff_low"] == 0.1
    assert _ig_stats([0.0] * 3, [0.1] * 3)["diff_high"] == -0.1


def _interval(low, high):
    return {
        "reduction": 0.0 - (low + high) * 50,
        "significant": low > 0 or high < 0,
        "ci_low": low,
        "ci_high": high,
    }


def _ablation_results(ip_per_seed, fgsm_full=(0.9, 0.9)):
    """Merged results of one data set (LS), two seeds: CT's IP intervals per seed as given,
    every other reduction not significant; CT's FGSM accuracy per seed against the baseline's
    0.8."""
    flat = [_interval(-1.0, 1.0)] * 2
    acc = [{"clean": 0.9, "epsilons": [3 / 90], "fgsm": [f], "pgd": [f]} for f in fgsm_full]
    base = [{"clean": 0.9, "epsilons": [3 / 90], "fgsm": [0.8], "pgd": [0.8]}] * 2
    half = {
        "per_seed": {"ip": flat, "ip_star_5": flat, "cost": flat},
        "validity": 1.0,
        "robustness": {"clean": 0.9, "epsilons": [3 / 90], "fgsm": [0.8]},
        "robustness_per_seed": base,
    }
    full = {"per_seed": {"ip": ip_per_seed, "ip_star_5": flat, "cost": flat}, "validity": 1.0}
    return {
        "data": {"lin_sep": {"seeds": [0, 1], "robustness": {"full": acc, "vanilla": base}}},
        "ablation": {
            "lin_sep": {
                "seeds": [0, 1],
                "full": full,
                "energy": half,
                "adversarial": half,
                "vanilla": {"validity": 1.0},
            }
        },
    }


def _bullet(text, label):
    """The line of ``ablation_text`` on one measure."""
    return next(line for line in text.splitlines() if line.startswith(f"- **{label}**"))


def test_the_ablation_counts_a_term_only_where_every_seed_says_so():
    from cfbook.book.figures.ablation import ablation_table, ablation_text

    both = ablation_text(_ablation_results([_interval(-2.0, -1.0), _interval(-3.0, -0.5)]))
    assert "in every seed with full (CT) on 1 (LS); energy only on 0" in _bullet(both, "IP")
    assert "IP lower in every seed on 0 against 0" in both
    one = _ablation_results([_interval(-2.0, -1.0), _interval(-3.0, 0.5)])
    ip = _bullet(ablation_text(one), "IP")
    assert "in every seed with full (CT) on 0 (none)" in ip
    assert "higher in at least one seed with full (CT) on 0 (none)" in ip
    assert "| LS | full (CT) | +150.0 ✱ / +125.0 | " in ablation_table(one)
    opposite = ablation_text(_ablation_results([_interval(-2.0, -1.0), _interval(0.5, 3.0)]))
    assert "higher in at least one seed with full (CT) on 1 (LS)" in _bullet(opposite, "IP")
    # FGSM: CT's accuracy must beat the baseline's by more than the margin in every seed.
    flat = [_interval(-1.0, 1.0)] * 2
    robust = _bullet(ablation_text(_ablation_results(flat, (0.9, 0.86))), "FGSM robustness")
    assert "full (CT) on 1 (LS); energy only on 0 (none)" in robust
    robust = _bullet(ablation_text(_ablation_results(flat, (0.9, 0.84))), "FGSM robustness")
    assert "full (CT) on 0 (none); energy only on 0 (none)" in robust


def test_the_ablation_refuses_seeds_that_the_main_grid_did_not_train():
    import pytest

    from cfbook.book.figures.ablation import ablation_text

    results = _ablation_results([_interval(-1.0, 1.0)] * 2)
    results["data"]["lin_sep"]["seeds"] = [0, 2]
    with pytest.raises(ValueError, match=r"the ablation's seeds \[0, 1\] are not the main grid's"):
        ablation_text(results)


def _ig_run(seed, ct, bl):
    return {"config": {"seed": seed}, "per_round": {"full_protected": ct, "vanilla": bl}}


def test_ig_sensitivity_is_judged_seed_by_seed():
    from cfbook.book.figures.ablation import ig_table, ig_text
    from cfbook.paper.merge import _ig

    # Seed 0: CT lower in every round; seed 1: one round higher. Pooled, 0.995 of the way to the
    # largest of 6 differences: -1 + 0.975 * 1.5 > 0, so the pooled interval includes zero too,
    # while seed 0's own lies below it.
    runs = [
        _ig_run(0, [0.0, 0.0, 0.0], [1.0, 1.0, 1.0]),
        _ig_run(1, [0.0, 0.0, 1.5], [1.0, 1.0, 1.0]),
    ]
    ig = _ig(runs)
    assert ig["rounds"] == 6 and ig["seeds"] == [0, 1]
    assert [s["rounds"] for s in ig["per_seed"]] == [3, 3]
    assert ig["per_seed"][0]["diff_high"] == -1.0 and ig["per_seed"][1]["diff_high"] > 0
    results = {"ig": {"lin_sep": ig}}
    assert "| yes | yes / n.s. |" in ig_table(results)
    text = ig_text(results)
    assert "in every seed on 0 of 1 data sets (none), in some seeds but not all on 1 (LS)" in text
    results = {"ig": {"lin_sep": _ig([runs[0], _ig_run(1, [0.0] * 3, [2.0] * 3)])}}
    assert "in every seed on 1 of 1 data sets (LS), in some seeds but not all on 0" in ig_text(
        results
    )
    higher = _ig([_ig_run(0, [2.0] * 3, [1.0] * 3), _ig_run(1, [3.0] * 3, [1.0] * 3)])
    assert "more sensitive in every seed on 1 (LS)" in ig_text({"ig": {"lin_sep": higher}})


def test_an_ig_interval_that_touches_zero_is_not_significant():
    from cfbook.book.figures.ablation import ig_table

    seeds = [(-1.0, 0.0), (0.0, 1.0), (-2.0, -1.0), (1.0, 2.0)]
    ig = {
        "ct_median": 0.25,
        "bl_median": 0.5,
        "per_seed": [{"diff_low": low, "diff_high": high} for low, high in seeds],
    }
    assert ig_table({"ig": {"lin_sep": ig}}).splitlines() == [
        "| data | paper CT / BL (median) | ours CT / BL (median, seeds pooled) | our 99 % "
        "interval of CT − BL, per seed | CT less sensitive? paper | ours, per seed |",
        "|---|---|---|---|---|---|",
        "| LS | 0.21 / 30.69 | 0.250 / 0.500 | [-1.000, 0.000] / [0.000, 1.000] / "
        "[-2.000, -1.000] / [1.000, 2.000] | yes | n.s. / n.s. / yes / no |",
    ]


def test_ig_text_names_the_data_sets_and_the_paper_s_directions():
    from cfbook.book.figures.ablation import ig_table, ig_text

    def ig(*intervals):
        return {
            "ct_median": 0.1,
            "bl_median": 0.2,
            "per_seed": [{"diff_low": low, "diff_high": high} for low, high in intervals],
        }

    results = {
        "ig": {
            "lin_sep": ig((-2.0, -1.0), (-3.0, -0.5)),
            "circles": ig((-2.0, -1.0), (-3.0, -0.5)),
            "gmsc": ig((-1.0, 1.0), (-1.0, 1.0)),
        }
    }
    assert ig_text(results) == (
        "CT trained with the protected feature immutable is significantly less sensitive to it "
        "than the baseline in every seed on 2 of 3 data sets (LS, Circ), in some seeds but not "
        "all on 0 (none), and more sensitive in every seed on 0 (none); the paper's medians are "
        "lower for CT on 2 (LS, Circ). The scales differ: the paper's text does not say how its "
        "table's medians were scaled, so compare directions, not values."
    )
    # GMSC's paper medians are higher for CT (0.71 against 0.16).
    assert ig_table(results).splitlines()[-1].endswith("| no | n.s. / n.s. |")
    assert ig_text({}) == "No IG results: run `python -m cfbook.commands.paper --ig`."
    assert len(ig_table({}).splitlines()) == 2


def _run(ip, ip_base, star, star_base, cost, cost_base):
    """One seed's paired rounds (two): CT's validity 0.2, the baseline's 0.1 (exactly 0.1 apart,
    which is not a validity gap)."""
    return {
        "per_round": {
            "full": {"validity": [0.2, 0.2], "ip": ip, "ip_star_5": star, "cost": cost},
            "vanilla": {
                "validity": [0.1, 0.1],
                "ip": ip_base,
                "ip_star_5": star_base,
                "cost": cost_base,
            },
        }
    }


# Seed 0: IP 0.995 against 1 in both rounds (+0.5 %, significant), IP* in one round only, cost
# against a baseline of 0 (no ratio). Seed 1: IP ratios 0.5 and 3 (-75 %, not significant), no
# IP* at all, cost halved (+50 %, significant).
SEED_0 = _run([0.995, 0.995], [1.0, 1.0], [None, 1.0], [2.0, 2.0], [1.0, 1.0], [0.0, 0.0])
SEED_1 = _run([1.0, 3.0], [2.0, 1.0], [None, None], [2.0, 2.0], [1.0, 1.0], [2.0, 2.0])


def test_the_paired_table_and_text_of_two_crafted_seeds_to_the_character():
    c = paired_comparison({"runs": [SEED_0, SEED_1]})
    # Pooled IP: CT (0.995 + 0.995 + 1 + 3) / 4 = 1.4975, baseline 1.25; ratios 0.995, 0.995,
    # 0.5, 3: reduction -37.25 %, SE 100 x their sd = 111.0.
    assert paired_table(c).splitlines() == [
        "| measure (lower is better) | CT | baseline | reduction, % ± SE, all rounds | 99 % "
        "interval of CT − baseline | significant | rounds with a value | reduction per seed, % "
        "(✱ significant) |",
        "|---|---:|---:|---:|---:|---|---:|---|",
        "| IP (L1 to target-class digits) | 1.498 | 1.25 | -37.3 ± 111.0 | [-0.985, 1.97] | no "
        "| 4 of 4 | +0.5 ✱ / -75.0 |",
        "| IP* (MMD², length scale 5) | 1 | 2 | +50.0 | [-1, -1] | yes | 1 of 4 | +50.0 ✱ (1 of "
        "2 rounds) / n/a |",
        "| cost (L1 from the factual) | 1 | 1 | +50.0 ± 0.0 | [-1, 1] | no | 4 of 4 | n/a "
        "(baseline 0) ✱ / +50.0 ✱ |",
        "| validity (higher is better) | 0.200 | 0.100 | | | | | |",
    ]
    assert paired_text(c) == (
        "**The claim is not settled here:** IP's reduction per seed: +0.5 ✱ / -75.0 %, positive "
        "where CT's valid counterfactuals lie closer to real digits of their target class. The "
        "99 % interval of the difference excludes zero in CT's favour in 1 of 2 seeds and "
        "against it in 0 (2 seeds, 4 rounds in all; ✱: that seed's interval excludes zero). "
        "IP* (MMD², length scale 5), reduction per seed: +50.0 ✱ (1 of 2 rounds) / n/a %: "
        "significantly lower with CT in 1 of 2 seeds, higher in 0; in 1 no round had valid "
        "counterfactuals of both models. cost (L1 from the factual), reduction per seed: n/a "
        "(baseline 0) ✱ / +50.0 ✱ %: significantly lower with CT in 1 of 2 seeds, higher in 0."
    )


def test_one_seed_held_or_not_measured_reads_in_the_singular():
    held = paired_text(paired_comparison({"runs": [SEED_0]}))
    assert held.startswith(
        "**The claim held here:** in every seed, CT's valid counterfactuals lie closer to real "
        "digits of their target class, and each seed's 99 % interval of the difference excludes "
        "zero (IP's reduction per seed: +0.5 ✱ %) (1 seed, 2 rounds in all; ✱: that seed's "
        "interval excludes zero). IP*"
    )
    c = paired_comparison({"runs": [SEED_1]})
    assert paired_text(c).endswith(
        "(1 seed, 2 rounds in all; ✱: that seed's interval excludes zero). IP* (MMD², length "
        "scale 5): no round to measure in any seed. cost (L1 from the factual), reduction per "
        "seed: +50.0 ✱ %: significantly lower with CT in 1 of 1 seeds, higher in 0."
    )
    rows = paired_table(c).splitlines()
    assert rows[3].endswith("| no valid counterfactuals | 0 of 2 | n/a |")
    assert rows[4].startswith("| cost (L1 from the factual) | 1 | 2 | +50.0 ± 0.0 |")
    worse = _run([2.0, 2.0], [1.0, 1.0], [1.0, 1.0], [1.0, 1.0], [1.0, 1.0], [1.0, 1.0])
    assert paired_text(paired_comparison({"runs": [worse]})).startswith(
        "**The claim did not hold here:** in every seed, CT's valid counterfactuals lie farther "
        "from real digits of their target class, significantly (IP's reduction per seed: "
        "-100.0 ✱ %) (1 seed"
    )
    missing = _run([1.0, 1.0], [2.0, 2.0], [1.0, 1.0], [1.0, 1.0], [1.0, 1.0], [1.0, 1.0])
    missing["per_round"]["full"]["ip"] = [None, None]
    text = paired_text(paired_comparison({"runs": [SEED_1, missing]}))
    assert "in CT's favour in 0 of 2 seeds and against it in 0; 1 had no round to measure (" in text


def test_a_clear_difference_has_one_sign_in_every_seed_and_more_than_two_errors():
    assert not clear_difference([0.0, 10.0, 10.0, 10.0])  # zero has no sign
    assert not clear_difference([-0.01, 0.9, 0.9, 0.9, 0.9])  # one seed against, however small
    assert not clear_difference([1.0, 3.0])  # mean 2 is exactly two standard errors of 1
    assert clear_difference([2.0, 4.0])  # mean 3, two standard errors 2
    assert clear_difference([-2.0, -4.0])
    assert not clear_difference([0.0, -10.0, -10.0, -10.0])


def test_the_ablation_text_to_the_character_at_its_edges():
    from cfbook.book.figures.ablation import ablation_text

    # LS: CT's IP interval touches zero in one seed (not lower), the energy half's lies below
    # zero in both, the adversarial half's starts at zero (not higher). CT's FGSM accuracy is
    # exactly the margin above the baseline's (not more). Circles: the same as LS but CT's IP
    # lower in both seeds and its FGSM accuracy above the margin.
    def results_with(energy_ip, adversarial_ip):
        ls = _ablation_results([_interval(-2.0, -1.0), _interval(-3.0, 0.0)], (0.5, 0.5))
        circ = _ablation_results([_interval(-2.0, -1.0)] * 2, (0.75, 0.75))
        for one in (ls, circ):
            for objective, ip in (("energy", energy_ip), ("adversarial", adversarial_ip)):
                row = one["ablation"]["lin_sep"][objective]
                one["ablation"]["lin_sep"][objective] = {
                    **row,
                    "per_seed": {**row["per_seed"], "ip": ip},
                }
            for base in one["data"]["lin_sep"]["robustness"]["vanilla"]:
                base["fgsm"] = [0.25]
        return {
            "data": {"lin_sep": ls["data"]["lin_sep"], "circles": circ["data"]["lin_sep"]},
            "ablation": {
                "lin_sep": ls["ablation"]["lin_sep"],
                "circles": circ["ablation"]["lin_sep"],
            },
        }

    lower, flat, level = (
        [_interval(-2.0, -1.0)] * 2,
        [_interval(-1.0, 1.0)] * 2,
        [_interval(0.0, 1.0)] * 2,
    )
    text = ablation_text(results_with(lower, level), margin=0.25)
    assert text.splitlines()[0] == (
        "- **IP** is significantly lower than the baseline's in every seed with full (CT) on 1 "
        "(Circ); energy only on 2 (LS, Circ); adversarial only on 0 (none). It is significantly "
        "higher in at least one seed with full (CT) on 0 (none); energy only on 0 (none); "
        "adversarial only on 0 (none)."
    )
    assert text.splitlines()[3] == (
        "- **FGSM robustness** (accuracy at ε≈0.03 more than 25 points above the baseline's in "
        "every seed) with full (CT) on 1 (Circ); energy only on 0 (none); adversarial only on 0 "
        "(none)."
    )
    assert text.endswith(
        "\n\nOver the 2 data sets, the energy term buys more of the plausibility gain than the "
        "adversarial term (IP lower in every seed on 2 against 0)."
    )
    assert ablation_text(results_with(flat, lower)).endswith(
        "the adversarial term alone lowers IP on more data sets than the energy term (IP lower "
        "in every seed on 0 against 2)."
    )
    assert ablation_text(results_with(lower, lower)).endswith(
        "neither half alone lowers IP on more data sets than the other (IP lower in every seed "
        "on 2 against 2)."
    )
    assert ablation_text({}) == (
        "No ablation results: run `python -m cfbook.commands.paper --objectives "
        "energy,adversarial`."
    )


def test_the_ablation_table_shows_each_seed_and_n_a_where_one_has_nothing_valid():
    from cfbook.book.figures.ablation import ablation_table

    results = _ablation_results([_interval(-2.0, -1.0), None])
    lines = ablation_table(results).splitlines()
    assert lines[:2] == [
        "| data | objective | IP, per seed | IP*, per seed | cost, per seed | validity | "
        "clean acc. | FGSM ε≈0.03 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    assert lines[2] == "| LS | baseline | | | | 1.00 | 0.90 | 0.80 |"
    assert (
        lines[3]
        == "| LS | full (CT) | +150.0 ✱ / n/a | +0.0 / +0.0 | +0.0 / +0.0 | 1.00 | 0.90 | 0.90 |"
    )
    assert len(lines) == 6 and len(ablation_table({}).splitlines()) == 2
