"""The comparison figure and summary must show exactly what the logs say."""

from __future__ import annotations

import json
from statistics import fmean

import pytest
import torch

from cfbook.book.figures.training import (
    COLOURS,
    comparison_figure,
    comparison_summary,
    profile_table,
    sample_digits_figure,
    show,
    summary_markdown,
)
from cfbook.book.profiles import PROFILES
from cfbook.log import EpochRecord, TrainingLog

NEPOCHS = 6
BURNIN = 2
FULL_TIMES = [1.0, 1.2, 4.0, 5.0, 6.0, 5.0]
VANILLA_TIMES = [1.1, 0.9, 1.0, 2.0, 1.0, 2.0]
FULL_ACC = [None, 0.6, None, 0.7, None, 0.8]
VANILLA_ACC = [None, 0.65, None, 0.75, None, 0.9]
FULL_IMPLAUS = [None, None, 2.0, 1.5, 1.2, 1.0]
FULL_IMPLAUS_VALID = [None, None, 4.0, 3.0, None, 2.0]  # epoch 5: no valid counterfactual


def make_log(
    objective: str, times, accs, implaus, *, burnin: int = BURNIN, implaus_valid=None
) -> TrainingLog:
    records = [
        EpochRecord(
            epoch=i + 1,
            acc=acc,
            acc_val=None if acc is None else acc - 0.05,
            train_loss=1.0 / (i + 1),
            implaus=imp,
            reg_loss=None if imp is None else 0.1,
            adv_loss=None if imp is None else 0.2,
            time_taken=t,
            percent_valid=1.0 if imp is None else 0.5,
            avg_iter=0.0 if imp is None else 10.0,
            implaus_valid=None if implaus_valid is None else implaus_valid[i],
        )
        for i, (t, acc, imp) in enumerate(zip(times, accs, implaus, strict=True))
    ]
    meta = {"objective": objective, "burnin_epochs": burnin, "profile": "smoke", "device": "cpu"}
    return TrainingLog(records, meta)


@pytest.fixture
def logs() -> tuple[TrainingLog, TrainingLog]:
    full = make_log(
        "FullObjective", FULL_TIMES, FULL_ACC, FULL_IMPLAUS, implaus_valid=FULL_IMPLAUS_VALID
    )
    vanilla = make_log("VanillaObjective", VANILLA_TIMES, VANILLA_ACC, [None] * NEPOCHS)
    return full, vanilla


def traces_on(fig, axis: str) -> list:
    return [trace for trace in fig.data if trace.xaxis == axis]


def test_figure_has_three_panels_with_expected_traces(logs):
    fig = comparison_figure(*logs, title="run")
    assert [a for a in ("xaxis", "xaxis2", "xaxis3") if a in fig.layout] == [
        "xaxis",
        "xaxis2",
        "xaxis3",
    ]
    assert "xaxis4" not in fig.layout
    time_traces, acc_traces, impl_traces = (traces_on(fig, a) for a in ("x", "x2", "x3"))
    assert [t.name for t in time_traces] == ["Full objective", "Vanilla objective"]
    assert [list(t.y) for t in time_traces] == [FULL_TIMES, VANILLA_TIMES]
    assert [t.line.color for t in time_traces] == [COLOURS["full"], COLOURS["vanilla"]]
    assert len(acc_traces) == 2
    assert [t.line.dash for t in impl_traces] == ["solid", "dot"]
    assert fig.layout.title.text == "run"


def test_epochs_without_a_value_are_skipped(logs):
    fig = comparison_figure(*logs)
    acc_full, acc_vanilla = traces_on(fig, "x2")
    assert list(acc_full.x) == [2, 4, 6]
    assert list(acc_full.y) == [0.6, 0.7, 0.8]
    assert list(acc_vanilla.y) == [0.65, 0.75, 0.9]
    impl, impl_valid = traces_on(fig, "x3")
    assert list(impl.x) == [3, 4, 5, 6]
    assert list(impl.y) == [2.0, 1.5, 1.2, 1.0]
    assert list(impl_valid.x) == [3, 4, 6] and list(impl_valid.y) == [4.0, 3.0, 2.0]


def test_burnin_marked_on_every_panel(logs):
    fig = comparison_figure(*logs)
    vlines = [s for s in fig.layout.shapes if s.x0 == s.x1 and s.yref.endswith("domain")]
    assert sorted(s.xref for s in vlines) == ["x", "x2", "x3"]
    assert all(s.x0 == BURNIN + 0.5 for s in vlines)
    assert any(a.text == "burn-in ends" for a in fig.layout.annotations)


def test_average_lines_are_post_burnin_means(logs):
    fig = comparison_figure(*logs)
    hlines = [s for s in fig.layout.shapes if s.y0 == s.y1 and s.yref == "y"]
    expected_full = fmean(FULL_TIMES[BURNIN:])
    expected_vanilla = fmean(VANILLA_TIMES[BURNIN:])
    assert sorted(s.y0 for s in hlines) == pytest.approx(sorted([expected_full, expected_vanilla]))
    by_colour = {s.line.color: s.y0 for s in hlines}
    assert by_colour[COLOURS["full"]] == pytest.approx(expected_full)
    assert by_colour[COLOURS["vanilla"]] == pytest.approx(expected_vanilla)
    texts = {a.text for a in fig.layout.annotations}
    assert f"Full avg: {expected_full:.1f} s" in texts
    assert f"Vanilla avg: {expected_vanilla:.1f} s" in texts


def test_sub_second_averages_keep_two_decimals():
    full = make_log("FullObjective", [0.1, 0.2, 0.34], [None, 0.5, 0.6], [None, 0.3, 0.2], burnin=1)
    vanilla = make_log("VanillaObjective", [0.1, 0.1, 0.1], [None, 0.5, 0.6], [None] * 3, burnin=1)
    texts = {a.text for a in comparison_figure(full, vanilla).layout.annotations}
    assert {"Full avg: 0.27 s", "Vanilla avg: 0.10 s"} <= texts


def test_summary_numbers(logs):
    s = comparison_summary(*logs)
    assert s["nepochs"] == NEPOCHS
    assert s["burnin_epochs"] == BURNIN
    assert s["post_epochs"] == NEPOCHS - BURNIN
    assert s["time_full_mean"] == pytest.approx(5.0)
    assert s["time_vanilla_mean"] == pytest.approx(1.5)
    assert s["time_ratio"] == pytest.approx(5.0 / 1.5)
    assert s["time_overhead_s"] == pytest.approx(3.5)
    assert s["time_full_burnin_mean"] == pytest.approx(1.1)
    assert s["time_full_total"] == pytest.approx(sum(FULL_TIMES))
    assert s["acc_full_final"] == 0.8
    assert s["acc_vanilla_final"] == 0.9
    assert s["acc_val_full_final"] == pytest.approx(0.75)
    assert (s["implaus_first"], s["implaus_last"]) == (2.0, 1.0)
    assert (s["implaus_first_epoch"], s["implaus_last_epoch"]) == (3, 6)
    assert s["implaus_change"] == pytest.approx(-1.0)
    assert s["implaus_change_pct"] == pytest.approx(-50.0)
    assert s["percent_valid_mean"] == pytest.approx(0.5)
    assert s["avg_iter_mean"] == pytest.approx(10.0)
    assert (s["profile"], s["device"]) == ("smoke", "cpu")


def test_summary_markdown_follows_the_numbers(logs):
    text = summary_markdown(comparison_summary(*logs))
    assert "5.00 s" in text and "1.50 s" in text and "3.3 times" in text
    assert "3.50 s more" in text
    assert "-10.0 percentage points" in text and "lower with counterfactual training" in text
    assert "fell from 2.000 (epoch 3) to 1.000 (epoch 6) (-50%)" in text
    assert (
        "valid counterfactuals alone (the dotted line), the energy differential went from "
        "4.000 to 2.000" in text
    )
    full, vanilla = logs
    for record in full:  # a run where the search was pure noise and implausibility rose
        record.time_taken = 1.0
        if record.implaus is not None:
            record.implaus = 3.0 + record.epoch
        if record.acc is not None:
            record.acc = vanilla[record.epoch - 1].acc
    text = summary_markdown(comparison_summary(full, vanilla))
    assert "less per epoch" in text
    assert "rose from" in text
    assert "comparable" in text


def test_summary_explains_an_odd_first_counterfactual_epoch(logs):
    full, vanilla = logs
    # As in real runs: the first search meets an untrained-for model and mostly succeeds.
    for record, implaus, valid in zip(
        full[2:], [-3.0, -0.2, -0.5, -0.8], [0.9, 0.2, 0.2, 0.2], strict=True
    ):
        record.implaus, record.percent_valid = implaus, valid
    s = comparison_summary(full, vanilla)
    assert s["implaus_later_slope"] == pytest.approx(-0.3)
    assert (s["implaus_later_first"], s["implaus_later_first_epoch"]) == (-0.2, 4)
    assert s["percent_valid_first"] == 0.9
    assert s["percent_valid_later_mean"] == pytest.approx(0.2)
    text = summary_markdown(s)
    assert "rose from -3.000 (epoch 3)" in text
    assert "The first counterfactual epoch stands apart" in text and "90.0%" in text
    assert "From epoch 4 on, the differential fell from -0.200 to -0.800 (-0.300 per epoch" in text


def test_summary_markdown_when_no_counterfactual_was_valid(logs):
    full, vanilla = logs
    full.meta["burnin_epochs"] = vanilla.meta["burnin_epochs"] = 1
    for record in full:
        if record.implaus is not None:
            record.implaus, record.percent_valid = 0.0, 0.0
    text = summary_markdown(comparison_summary(full, vanilla))
    assert "the first of them burn-in" in text
    assert "zero by construction" in text
    assert "fell" not in text and "rose" not in text


def test_no_post_burnin_epochs_gives_no_average_lines():
    times = [1.0, 1.0]
    full = make_log("FullObjective", times, [0.5, 0.6], [None, None], burnin=2)
    vanilla = make_log("VanillaObjective", times, [0.5, 0.6], [None, None], burnin=2)
    s = comparison_summary(full, vanilla)
    assert s["time_full_mean"] is None and s["time_ratio"] is None
    assert s["implaus_first"] is None
    fig = comparison_figure(full, vanilla)
    assert not [sh for sh in fig.layout.shapes if sh.y0 == sh.y1 and sh.yref == "y"]
    assert any("no counterfactual epochs" in a.text for a in fig.layout.annotations)
    assert "Cost" not in summary_markdown(s)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda f, v: v.pop(), "log_vanilla has 5"),
        (lambda f, v: v.meta.update(burnin_epochs=3), "burn-in"),
        (lambda f, v: f.meta.pop("burnin_epochs"), "log_full.meta"),
        (lambda f, v: v.meta.update(objective="FullObjective"), "both come from"),
        (lambda f, v: setattr(v[0], "epoch", 7), "different epoch numbers"),
        (lambda f, v: f.clear(), "log_full is empty"),
    ],
)
def test_mismatched_logs_are_rejected(logs, change, message):
    full, vanilla = logs
    change(full, vanilla)
    with pytest.raises(ValueError, match=message):
        comparison_summary(full, vanilla)
    with pytest.raises(ValueError, match=message):
        comparison_figure(full, vanilla)


def test_plain_list_is_rejected(logs):
    with pytest.raises(TypeError, match="log_full must be a cfbook.log.TrainingLog"):
        comparison_figure(list(logs[0]), logs[1])


def test_show_emits_html_without_plotlyjs_and_stable_id(logs, monkeypatch):
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda obj, raw: shown.append(obj))
    fig = comparison_figure(*logs)
    show(fig)
    show(fig)
    html = shown[0]["text/html"]
    assert "Plotly.newPlot" in html
    assert len(html) < 100_000, "plotly.js must not be inlined"
    assert shown[0]["text/html"] == shown[1]["text/html"]
    assert shown[0]["application/vnd.plotly.v1+json"]["data"][0]["name"] == "Full objective"
    json.dumps(shown[0]["application/vnd.plotly.v1+json"])


def test_sample_digits_figure():
    x = torch.linspace(-1, 1, 12 * 784).reshape(12, 784)
    x = torch.cat([x, x])
    y = torch.arange(24) % 10
    fig = sample_digits_figure(x, y, n=12)
    assert len(fig.data) == 12
    assert [a.text for a in fig.layout.annotations][:3] == ["label 0", "label 1", "label 2"]
    assert fig.data[0].z.shape == (28, 28)
    assert fig.data[0].z.dtype.name == "uint8"
    assert (fig.data[0].z[0][0], fig.data[11].z[-1][-1]) == (0, 255)  # -1 -> 0, +1 -> 255
    assert fig.layout.yaxis2.scaleanchor == "x2"


@pytest.mark.parametrize(
    ("x", "y", "n", "message"),
    [
        (torch.zeros(4, 783), torch.zeros(4, dtype=torch.long), 2, "x must have shape"),
        (torch.zeros(4, 784), torch.zeros(3, dtype=torch.long), 2, "y must have shape"),
        (torch.zeros(4, 784), torch.zeros(4, dtype=torch.long), 5, "n must be between 1 and 4"),
    ],
)
def test_sample_digits_figure_rejects_bad_input(x, y, n, message):
    with pytest.raises(ValueError, match=message):
        sample_digits_figure(x, y, n=n)


def test_profile_table_lists_every_setting():
    table = profile_table(PROFILES.values()).splitlines()
    assert table[0] == "| setting | " + " | ".join(f"`{n}`" for n in PROFILES) + " |"
    rows = {line.split(" | ")[0].lstrip("| "): line for line in table[2:]}
    assert set(rows) == {
        "model",
        "n",
        "nepochs",
        "batch_size",
        "lr",
        "nce",
        "cf_batchsize",
        "maxiter",
        "burnin",
        "accuracy_every",
        "seed",
        "runs",
        "lambdas",
        "generator",
        "tau",
        "evaluation",
    }
    tutorial = PROFILES["tutorial"]
    expected = round(tutorial.burnin * tutorial.nepochs)
    assert f"{tutorial.burnin:g} ({expected} epochs)" in rows["burnin"]
    assert rows["lambdas"].split(" | ")[-1].rstrip(" |") == "1, 0.5, 0.1, 0.25"  # smoke
    assert rows["n"].split(" | ")[-1].rstrip(" |") == "300"
    assert "100 factuals x 3 runs; attacks on 500 held-out" in rows["evaluation"]
    with pytest.raises(ValueError, match="profiles is empty"):
        profile_table([])
