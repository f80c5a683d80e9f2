"""The Julia page's figure and its text, on crafted logs whose numbers are known, and the shipped
`tutorial` logs it draws in the book."""

from __future__ import annotations

from dataclasses import replace

import pytest

from cfbook.book.figures.seed_page import (
    post_burnin_seconds,
    seed_page_figure,
    seed_page_markdown,
    seed_page_summary,
)
from cfbook.book.profiles import get_profile
from cfbook.book.stages import load_comparison_runs
from cfbook.data.paths import find_data_dir
from cfbook.training.log import EpochRecord, TrainingLog


def _log(times, implaus=None, valid=0.1, mature="raw", burnin=2, acc=0.9):
    records = []
    for epoch, t in enumerate(times, start=1):
        cf = implaus is not None and epoch > burnin
        records.append(
            EpochRecord(
                epoch=epoch,
                acc=acc + epoch / 100 if epoch % 2 == 0 else None,
                acc_val=acc - 0.05 if epoch % 2 == 0 else None,
                train_loss=0.1,
                implaus=implaus[epoch - burnin - 1] if cf else None,
                reg_loss=0.0 if cf else None,
                adv_loss=0.0 if cf else None,
                time_taken=t,
                percent_valid=valid if cf else 1.0,
                avg_iter=30.0 if cf else 0.0,
            )
        )
    meta = {"burnin_epochs": burnin, "mature": mature, "device_name": "CPU: test", "threads": 2}
    return TrainingLog(records, meta)


def test_the_post_burn_in_average_skips_the_burn_in_epochs():
    assert post_burnin_seconds(_log([1.0, 1.0, 3.0, 5.0])) == pytest.approx(4.0)


def test_the_text_quotes_the_cost_ratio_the_accuracies_and_the_direction_of_implausibility():
    full = _log([1.0, 1.0, 6.0, 6.0], implaus=[-1.0, -3.0])
    vanilla = _log([1.0, 1.0, 2.0, 2.0])
    text = seed_page_markdown(seed_page_summary(full, vanilla))
    assert "6.0 s with the full objective against 2.0 s for the vanilla one (3.0 times" in text
    assert "training 0.940 (full) and 0.940 (vanilla); held-out 0.850 and 0.850" in text
    assert "10 % of the training-time counterfactuals reached their target" in text
    assert "fell from -1.00 to -3.00 logits over 2 search epochs (lowest -3.00)" in text
    # Raw semantics with most counterfactuals invalid: the average is said not to be plausibility.
    assert "not a measure of plausible explanations" in text
    assert "CPU: test, 2 threads" in text and 'count as found (mature="raw")' in text


def test_a_rising_implausibility_is_not_called_a_fall_and_valid_searches_drop_the_caveat():
    full = _log([1.0, 1.0, 6.0, 6.0], implaus=[-3.0, -1.0], valid=0.9)
    vanilla = _log([1.0, 1.0, 2.0, 2.0])
    text = seed_page_markdown(seed_page_summary(full, vanilla))
    assert "rose from -3.00 to -1.00" in text and "fell" not in text
    assert "after burn-in 90 % of the training-time counterfactuals" in text
    assert "not a measure of plausible explanations" not in text


def test_the_reference_profile_adds_its_own_ratio():
    full, vanilla = _log([1.0, 1.0, 6.0], implaus=[-1.0]), _log([1.0, 1.0, 2.0])
    ref = seed_page_summary(_log([1.0, 1.0, 8.0], implaus=[-1.0]), _log([1.0, 1.0, 2.0]))
    text = seed_page_markdown(seed_page_summary(full, vanilla), ref)
    assert "first seed, on CPU: test: 8.0 s against 2.0 s (4.0 times)" in text


def test_the_figure_draws_the_page_panels_from_the_log():
    full = _log([1.0, 1.0, 6.0, 8.0], implaus=[-1.0, -3.0])
    vanilla = _log([1.0, 1.0, 2.0, 4.0])
    fig = seed_page_figure(full, vanilla)
    time_full, acc_full, time_vanilla, acc_vanilla, implaus = fig.data
    assert list(time_full.y) == [1.0, 1.0, 6.0, 8.0]
    assert list(time_vanilla.y) == [1.0, 1.0, 2.0, 4.0]
    # Training accuracy, as the page draws it, on the epochs where it was measured.
    assert list(acc_full.x) == [2, 4] and list(acc_full.y) == pytest.approx([0.92, 0.94])
    assert list(acc_vanilla.y) == pytest.approx([0.92, 0.94])
    assert list(implaus.x) == [3, 4] and list(implaus.y) == [-1.0, -3.0]
    dotted = sorted(s.y0 for s in fig.layout.shapes if s.line.dash == "dot")
    assert dotted == pytest.approx([3.0, 7.0])  # each objective's post-burn-in average
    dashed = [s for s in fig.layout.shapes if s.line.dash == "dash"]
    assert [s.x0 for s in dashed] == [2, 2, 2]  # burn-in ends, on every panel
    assert [s.xref for s in dashed] == ["x", "x2", "x3"]
    # One panel per measure, stacked; each objective named as the page names it.
    assert [t.xaxis for t in fig.data] == ["x", "x2", "x", "x2", "x3"]
    assert [t.name for t in fig.data] == ["Full objective"] * 2 + ["Vanilla objective"] * 2 + [
        "Full objective"
    ]
    assert all(t.mode == "lines+markers" for t in fig.data)


def test_the_shipped_tutorial_logs_are_the_tutorial_profile_run_as_configured():
    profile = get_profile("tutorial")
    runs = load_comparison_runs(profile, data_dir=find_data_dir())
    assert runs is not None, "data/tutorial/ lacks its logs"
    for log in (runs[0][0], runs[1][0]):
        assert log.meta["config"] == profile.config()
        assert len(log) == profile.nepochs
    full = runs[0][0]
    assert full.meta["mature"] == "raw" and full.meta["nce"] == profile.nce
    burnin = full.meta["burnin_epochs"]
    assert all((r.implaus is not None) == (r.epoch > burnin) for r in full)


def test_the_page_text_reads_to_the_character():
    full = _log([1.0, 1.0, 6.0, 6.0], implaus=[-1.0, -3.0])
    reference = seed_page_summary(_log([1.0, 1.0, 8.0], implaus=[-1.0]), _log([1.0, 1.0, 2.0]))
    text = seed_page_markdown(seed_page_summary(full, _log([1.0, 1.0, 2.0, 2.0])), reference)
    assert text == (
        "**Run:** one seed per objective on CPU: test, 2 threads, 4 epochs, the first 2 without "
        'counterfactuals; invalid counterfactuals count as found (mature="raw").\n\n'
        "**Cost:** after burn-in an epoch took 6.0 s with the full objective against 2.0 s for "
        "the vanilla one (3.0 times as long). The calibrated `cpu` profile's first seed, on CPU: "
        "test: 8.0 s against 2.0 s (4.0 times).\n\n"
        "**Accuracy** at the last measured epoch: training 0.940 (full) and 0.940 (vanilla); "
        "held-out 0.850 and 0.850. One seed each: this run alone cannot tell a difference due to "
        "the objective from one due to the seed (the `cpu` profile's three seeds measure that "
        "spread).\n\n"
        "**Search and implausibility:** after burn-in 10 % of the training-time counterfactuals "
        "reached their target. CT's implausibility fell from -1.00 to -3.00 logits over 2 search "
        "epochs (lowest -3.00). Under the raw semantics that average includes every "
        "counterfactual that never reached its target, most of them here: it is the term the "
        "loss minimises, not a measure of plausible explanations, which need valid "
        "counterfactuals first."
    )


def test_the_page_text_without_what_a_run_did_not_log():
    # The neighbour semantics, no thread count, the device under its short key, implausibility
    # level, half the searches valid, and a baseline that never left its burn-in (no cost).
    full = _log([1.0, 1.0, 6.0, 6.0], implaus=[-2.0, -2.0], valid=0.5, mature="neighbour")
    full.meta.clear()
    full.meta.update({"burnin_epochs": 2, "mature": "neighbour", "device": "cpu"})
    text = seed_page_markdown(seed_page_summary(full, _log([1.0, 1.0])))
    assert text.startswith(
        "**Run:** one seed per objective on cpu, 4 epochs, the first 2 without counterfactuals; "
        'invalid counterfactuals count as their neighbour (mature="neighbour").\n\n**Accuracy**'
    )
    assert "after burn-in 50 % of" in text and "stayed from -2.00 to -2.00 logits" in text
    # Under the raw semantics the caveat needs fewer than half of the searches valid.
    raw = _log([1.0, 1.0, 6.0, 6.0], implaus=[-2.0, -2.0], valid=0.5)
    assert "not a measure" not in seed_page_markdown(seed_page_summary(raw, _log([1.0] * 4)))
    # No device at all, no accuracy measured, no counterfactual epoch: none of those lines.
    bare = TrainingLog([replace(r, acc=None, acc_val=None) for r in _log([1.0] * 4)], {})
    s = seed_page_summary(bare, bare)
    assert s["device"] == "unknown device" and s["burnin_epochs"] == 0
    assert (s["acc_full"], s["acc_val_full"], s["valid"], s["implaus_min"]) == (None,) * 4
    assert seed_page_markdown(s).count("\n\n") == 1  # the run and the cost only
