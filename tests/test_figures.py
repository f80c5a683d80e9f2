"""The figures and summaries must show exactly what the logs say."""

from __future__ import annotations

import json
import math
import re
from dataclasses import replace
from statistics import fmean

import plotly.io as pio
import pytest
import torch

from cfbook.book.figures.seeds import seeds_figure, seeds_summary
from cfbook.book.figures.training import profile_table, sample_digits_figure, show
from cfbook.book.profiles import PROFILES
from cfbook.training.log import EpochRecord, TrainingLog

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


def test_seeds_need_as_many_runs_of_each_objective(logs):
    with pytest.raises(ValueError, match="as many CT as baseline runs"):
        seeds_summary([logs[0], logs[0]], [logs[1]])


def test_seeds_summary_reads_the_epochs_after_burn_in(logs):
    s = seeds_summary([logs[0]], [logs[1]], last=2)
    assert s["burnin_epochs"] == BURNIN and s["nepochs"] == NEPOCHS
    assert s["time_full"] == pytest.approx(fmean(FULL_TIMES[BURNIN:]))
    assert s["time_vanilla"] == pytest.approx(fmean(VANILLA_TIMES[BURNIN:]))
    # Held-out accuracy over the last two recorded epochs: (0.65 + 0.75) / 2 against 0.7 / 0.85.
    assert s["acc_diffs_pp"] == pytest.approx([100 * (0.7 - 0.775)])
    assert s["valid_per_seed"] == [0.5]
    assert s["implaus_valid_trend_pct"] == pytest.approx([50.0])  # 4.0 -> 2.0: fell by half


def test_show_emits_html_without_plotlyjs_and_stable_id(logs, monkeypatch):
    shown, raws = [], []
    monkeypatch.setattr(
        "IPython.display.display", lambda obj, raw: (shown.append(obj), raws.append(raw))
    )
    fig = seeds_figure([logs[0]], [logs[1]])
    show(fig)
    show(fig)
    html = shown[0]["text/html"]
    assert raws == [True, True]  # a MIME bundle, not an object to show by its repr
    assert "Plotly.newPlot" in html and "<html" not in html  # a fragment for the page
    assert re.search(r'id="cfbook-[0-9a-f]{12}"', html)
    assert len(html) < 100_000, "plotly.js must not be inlined"
    assert shown[0]["text/html"] == shown[1]["text/html"]
    assert shown[0]["application/vnd.plotly.v1+json"]["data"][1]["name"] == "CT (full objective)"
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


def test_sample_digits_figure_says_which_shape_y_needs():
    with pytest.raises(ValueError, match=r"y must have shape \(4,\), got \(3,\)$"):
        sample_digits_figure(torch.zeros(4, 784), torch.zeros(3, dtype=torch.long), n=2)


def test_sample_digits_figure_draws_one_digit_or_all_of_them():
    x, y = torch.zeros(3, 784), torch.arange(3)
    assert len(sample_digits_figure(x, y, n=1).data) == 1
    assert len(sample_digits_figure(x, y, n=3).data) == 3
    assert len(sample_digits_figure(torch.zeros(20, 784), torch.arange(20)).data) == 16  # two rows


def test_sample_digits_figure_lays_out_eight_to_a_row_in_clamped_ink():
    x = torch.zeros(9, 784)
    x[0, :2] = torch.tensor([-2.0, 2.0])  # outside the domain: drawn at its edges
    fig = sample_digits_figure(x, torch.arange(9), n=9)
    assert fig.data[0].z[0][:2].tolist() == [0, 255] and fig.data[0].z[0][2] == 128
    # Nine digits: eight in the first row, the ninth below the first.
    assert fig.data[8].xaxis == "x9" and fig.layout.xaxis9.domain == fig.layout.xaxis.domain
    assert fig.layout.yaxis9.domain != fig.layout.yaxis.domain and fig.layout.height == 300
    assert {t.coloraxis for t in fig.data} == {"coloraxis"}
    scale = fig.layout.coloraxis
    assert [list(c) for c in scale.colorscale] == [[0, "white"], [1, "black"]]
    assert (scale.cmin, scale.cmax, scale.showscale) == (0, 255, False)
    assert fig.data[0].hovertemplate == "row %{y}, col %{x}: ink %{z} of 255<extra></extra>"
    assert fig.layout.yaxis.autorange == "reversed" and fig.layout.yaxis9.autorange == "reversed"
    assert fig.layout.xaxis.visible is False and fig.layout.yaxis.visible is False


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
        "step_size",
        "mature",
        "evaluation",
        "paired",
    }
    tutorial = PROFILES["tutorial"]
    expected = round(tutorial.burnin * tutorial.nepochs)
    assert f"{tutorial.burnin:g} ({expected} epochs)" in rows["burnin"]
    assert rows["lambdas"].split(" | ")[-1].rstrip(" |") == "1, 0.5, 0.1, 0.25"  # smoke
    assert rows["n"].split(" | ")[-1].rstrip(" |") == "300"
    assert "FGSM and PGD at eps 0.01, 0.03, 0.05, 0.1 on 500 held-out" in rows["evaluation"]
    assert "20 rounds x 4 factuals per energy weight" in rows["paired"]
    assert rows["mature"].split(" | ")[1:3] == ["raw", "neighbour"]  # tutorial, cpu
    message = r"^profiles is empty: pass at least one cfbook\.book\.profiles\.Profile$"
    with pytest.raises(ValueError, match=message):
        profile_table([])


def test_profile_table_of_one_profile_reads_each_setting_as_written():
    profile = replace(
        PROFILES["tutorial"],
        n=None,
        nepochs=4,
        burnin=0.25,
        step_size=1.0,
        evaluation=replace(PROFILES["tutorial"].evaluation, attack_samples=None),
    )
    table = profile_table([profile]).splitlines()
    assert table[:2] == ["| setting | `tutorial` |", "|---|---:|"]
    rows = {line.split(" | ")[0].lstrip("| "): line for line in table[2:]}
    assert rows["n"] == "| n | all |"
    assert rows["burnin"] == "| burnin | 0.25 (1 epoch) |"
    assert rows["step_size"] == "| step_size | 1 |"
    assert " on all held-out digits" in rows["evaluation"]
    assert profile_table([replace(profile, burnin=0.5)]).count("0.5 (2 epochs)") == 1


def _microscope() -> dict:
    """Two hand-made searches of an empty 28 x 28 image: the baseline's jumps in one step (its
    adversarial example is the factual), CT's takes three, leaving the epsilon box after one."""

    def images(*levels: int) -> list[str]:
        return [bytes([v] * 784).hex() for v in levels]

    return {
        "meta": {
            "factual": 4,
            "target": 9,
            "index": 7,
            "domain": [-1.0, 1.0],
            "search": {"tau": 0.75, "epsilon": 0.3, "maxiter": 4},
        },
        "searches": {
            "vanilla": {
                "path": images(0, 200),
                "target_prob": [0.1, 0.9, 0.9, 0.9, 0.9],
                "distance": [0.0, 1.57, 1.57, 1.57, 1.57],
                "counterfactual_at": 1,
                "adversarial_at": 0,
                "valid": True,
            },
            "full": {
                "path": images(0, 20, 60, 100),
                "target_prob": [0.1, 0.2, 0.5, 0.8, 0.8],
                "distance": [0.0, 0.16, 0.47, 0.78, 0.78],
                "counterfactual_at": 3,
                "adversarial_at": 1,
                "valid": True,
            },
        },
    }


def test_the_microscope_slider_moves_every_panel_through_the_iterates():
    from cfbook.book.figures.microscope import microscope_figure

    fig = microscope_figure(_microscope())
    assert len(fig.frames) == 5 and len(fig.layout.sliders[0].steps) == 5
    assert fig.layout.sliders[0].active == 4  # the page opens on the finished searches
    first, last = fig.frames[0].data, fig.frames[-1].data
    # Each model's iterate and change (baseline first), then both curves' points per model.
    assert first[0].z[0][0] == 0 and first[1].z[5][5] == 0 and first[2].z[0][0] == 0
    assert last[0].z[27][27] == 200 and last[1].z[27][27] == 200  # frozen after step 1
    assert last[2].z[0][0] == 100 and last[3].z[0][0] == 100
    assert fig.frames[2].data[5].x == (2,) and fig.frames[2].data[5].y == (0.5,)  # CT, p
    assert fig.frames[2].data[7].y == (0.47,)  # CT, L-inf
    # The frames replace exactly the traces they hold, in that order.
    moving = fig.frames[0].traces
    assert [fig.data[i].type for i in moving] == ["heatmap"] * 4 + ["scatter"] * 4
    assert [fig.data[i].name for i in moving[4:]] == ["this step"] * 4
    assert [fig.data[i].xaxis for i in moving[4:]] == ["x5", "x5", "x6", "x6"]
    lines = sorted(shape.y0 for shape in fig.layout.shapes)
    assert lines == [0.3, 0.75]  # ε and τ
    # Each model's iterate and change side by side in the top row; the slider plays the frame
    # of its own step.
    assert [fig.data[i].xaxis for i in range(4)] == ["x", "x2", "x3", "x4"]
    names = [str(t) for t in range(5)]
    assert [f.name for f in fig.frames] == names
    assert [list(s.args[0]) for s in fig.layout.sliders[0].steps] == [[n] for n in names]


def test_the_microscope_curves_run_two_steps_past_the_later_stop_and_mark_both_points():
    from cfbook.book.figures.microscope import microscope_figure

    result = _microscope()
    result["searches"]["vanilla"]["path"] = [bytes([v] * 784).hex() for v in (10, 200)]
    for s in result["searches"].values():  # eight steps recorded: the figure shows five
        s["target_prob"] += [s["target_prob"][-1]] * 3
        s["distance"] += [s["distance"][-1]] * 3
    fig = microscope_figure(result)
    assert len(fig.data) == 4 + 2 * 2 * 4
    # The page opens on the last step shown: the baseline's digit at 200 (from 10), CT's at 100.
    assert fig.data[0].z[0][0] == 200 and fig.data[2].z[0][0] == 100
    assert fig.data[1].z[0][0] == 190 and fig.data[3].z[0][0] == 100  # change from the factual
    searches = result["searches"]
    for c, key in enumerate(("target_prob", "distance")):
        for i, mode in enumerate(("vanilla", "full")):
            s = searches[mode]
            step, line, adversarial, found = fig.data[4 + 8 * c + 4 * i : 8 + 8 * c + 4 * i]
            assert (list(step.x), list(step.y)) == ([4], [s[key][4]])
            assert list(line.x) == [0, 1, 2, 3, 4] and list(line.y) == s[key][:5]
            name = {"vanilla": "baseline", "full": "CT"}[mode]
            assert line.name == f"{name} (valid at step {s['counterfactual_at']})"
            at = s["adversarial_at"]
            assert (list(adversarial.x), list(adversarial.y)) == ([at], [s[key][at]])
            stop = s["counterfactual_at"]
            assert (list(found.x), list(found.y)) == ([stop], [s[key][stop]])
            assert (adversarial.name, found.name) == ("adversarial example", "counterfactual")
    # Searches that never moved still show two steps past the start.
    for s in searches.values():
        s |= {"counterfactual_at": 0, "adversarial_at": 0, "valid": False}
    fig = microscope_figure(result)
    assert list(fig.data[5].x) == [0, 1, 2] and fig.data[5].name == "baseline (not valid at step 0)"


def test_the_microscope_text_says_where_each_adversarial_example_was_taken():
    from cfbook.book.figures.microscope import microscope_text

    text = microscope_text(_microscope())
    assert "baseline search reached τ = 0.75 after 1 step (p = 0.90)" in text
    assert "adversarial example is the unchanged factual" in text
    assert "CT search reached τ = 0.75 after 3 steps (p = 0.80)" in text
    assert "adversarial example is step 1, the last within ε = 0.3" in text
    # CT's counterfactual: 100 levels on each of 784 pixels, in [-1, 1] units.
    assert f"L1 {100 / 255 * 2 * 784:.1f}" in text


def test_the_microscope_text_reads_to_the_character():
    from cfbook.book.figures.microscope import microscope_text

    result = _microscope()
    # The baseline's search starts from level 10, ends at 200 after one step, short of tau.
    result["searches"]["vanilla"] |= {
        "path": [bytes([v] * 784).hex() for v in (10, 200)],
        "target_prob": [0.1, 0.6, 0.6, 0.6, 0.6],
        "valid": False,
    }
    assert microscope_text(result) == (
        "For this digit 4 (held-out digit 7, target 9), the baseline search did not reach "
        "τ = 0.75 in 1 step (p = 0.60); its adversarial example is the unchanged factual: the "
        "first step already left the ε = 0.3 box; its counterfactual lies at L-inf 1.57 and L1 "
        f"{190 / 255 * 2 * 784:.1f} from the factual; the CT search reached τ = 0.75 after 3 "
        "steps (p = 0.80); its adversarial example is step 1, the last within ε = 0.3; its "
        f"counterfactual lies at L-inf 0.78 and L1 {100 / 255 * 2 * 784:.1f} from the factual. "
        "Distances are in the units of the [-1, 1] pixel domain; L1 sums over the 784 pixels."
    )


def test_the_benchmark_pictures_draw_the_recorded_tables():
    from cfbook.book.benchmarks import benchmark_table
    from cfbook.book.figures.benchmarks import search_memory_figure, throughput_figure
    from cfbook.book.figures.training import COLOURS, TEMPLATE

    rows = benchmark_table("throughput")  # benchmark 1, recorded in benchmarks/results.json
    fig = throughput_figure()
    native, reference = fig.data
    assert len(native.x) == len(rows) and native.x[0] == f"{rows[0]['model']}, nce {rows[0]['nce']}"
    assert list(native.y) == [r["Native cf/s"] for r in rows]
    assert list(reference.y) == [r["Reference cf/s"] for r in rows]
    # Each bar pair is labelled with the speed-up the benchmark recorded for it, as it shows it.
    shown = benchmark_table("throughput", text=True)
    assert [a.text for a in fig.layout.annotations] == [
        f"{r['Native / Reference']} faster" for r in shown
    ]
    assert all(n > r for n, r in zip(native.y, reference.y, strict=True))
    assert [(t.name, t.marker.color) for t in fig.data] == [
        ("NativeGenerator (batched)", COLOURS["full"]),
        ("ReferenceGenerator (one sample at a time)", COLOURS["vanilla"]),
    ]
    # Each label above its own pair of bars, over the plot area, without an arrow.
    assert [a.x for a in fig.layout.annotations] == list(native.x)
    assert all(
        a.yref == "paper" and a.y > 1 and a.showarrow is False for a in fig.layout.annotations
    )
    layout = fig.layout
    assert (layout.barmode, layout.yaxis.type) == ("group", "log")
    assert layout.yaxis.title.text == "counterfactuals per second"
    assert layout.xaxis.title.text == "model and counterfactuals per search (nce)"
    assert layout.template == pio.templates[TEMPLATE]

    memory = search_memory_figure()
    recorded = benchmark_table("memory")
    # Two panels side by side on one memory axis: peaks against cf_batchsize, then against nce,
    # each beside the size of the stored results; each name once in the legend.
    assert [(t.name, t.xaxis, t.showlegend) for t in memory.data] == [
        ("peak of the search", "x", True),
        ("stored results", "x", True),
        ("peak of the search", "x2", False),
        ("stored results", "x2", False),
    ]
    assert memory.data[0].line.color == COLOURS["full"] != memory.data[1].line.color
    assert all(t.yaxis == "y" for t in memory.data[:2]) and memory.layout.yaxis2.matches == "y"
    for trace, sweep, key in [(0, "chunk grows", "cf_batchsize"), (2, "nce grows", "nce")]:
        peaks = [r for r in recorded if r["sweep"] == sweep]
        drawn = memory.data[trace]
        assert list(drawn.x) == [r[key] for r in peaks] == sorted(drawn.x)
        assert list(drawn.y) == pytest.approx([r["search peak"] / 2**20 for r in peaks])
        results = next(k for k in peaks[0] if k.startswith("results"))
        stored = memory.data[trace + 1]
        assert list(stored.y) == pytest.approx([r[results] / 2**20 for r in peaks])
    chunk = memory.data[0]
    assert chunk.y[-1] > 4 * chunk.y[0]
    for axis, key in [(memory.layout.xaxis, "cf_batchsize"), (memory.layout.xaxis2, "nce")]:
        # Log axes ticked at powers of two.
        assert (axis.type, axis.title.text, axis.dtick) == (
            "log",
            key,
            pytest.approx(math.log10(2)),
        )
    assert all(t.mode == "lines+markers" and t.legendgroup == t.name for t in memory.data)
    axes = [key for key in memory.layout.to_plotly_json() if key.startswith(("xaxis", "yaxis"))]
    assert sorted(axes) == ["xaxis", "xaxis2", "yaxis", "yaxis2"]  # one row of two panels
    assert memory.layout.yaxis.title.text == "MiB (peak RSS above the start)"
    assert memory.layout.yaxis2.title.text is None  # the shared axis is named once
    assert [a.text for a in memory.layout.annotations] == [
        "cf_batchsize grows (nce 512)",
        "nce grows (cf_batchsize 128)",
    ]
    assert memory.layout.template == pio.templates[TEMPLATE]
    assert throughput_figure("no-such-kind") is None and search_memory_figure("none") is None


def test_the_throughput_picture_of_another_device_kind_reads_that_kinds_block(
    tmp_path, monkeypatch
):
    import cfbook.book.benchmarks as recorded
    from benchmarks.cli import BENCHMARKS
    from benchmarks.common import Context, Table
    from benchmarks.config import QUICK
    from benchmarks.results import record_block, write_block
    from cfbook.book.figures.benchmarks import throughput_figure

    columns = ["model", "nce", "Native cf/s", "Reference cf/s", "Native / Reference"]
    table = Table("cf/s", columns, [["mlp", 128, "900.0", "10.0", "90x"]])
    record = record_block(Context(torch.device("cpu"), True, QUICK), "1. Throughput", [table], 1)
    results = tmp_path / "results.json"
    write_block(results, "cuda", "throughput", record, list(BENCHMARKS))
    monkeypatch.setattr(recorded, "RESULTS_JSON", results)
    fig = throughput_figure("cuda")
    assert [list(t.y) for t in fig.data] == [[900.0], [10.0]]
    assert [a.text for a in fig.layout.annotations] == ["90x faster"]
    assert throughput_figure() is None  # nothing recorded for the CPU in this file


def test_a_search_that_never_moved_is_described_as_such():
    from cfbook.book.figures.microscope import microscope_text

    result = _microscope()
    result["searches"]["full"] |= {"counterfactual_at": 0, "adversarial_at": 0}
    text = microscope_text(result)
    assert "CT search reached τ = 0.75 after 0 steps" in text
    assert "(p = 0.10); it never moved, so its adversarial example is the factual itself; its" in (
        text
    )
    result["searches"]["full"]["valid"] = False
    assert "CT search did not reach τ = 0.75 in 0 steps (p = 0.10)" in microscope_text(result)


def test_a_figure_with_frames_waits_for_its_slider(monkeypatch):
    """plotly's HTML plays a figure's frames on load unless told not to: the microscope would run
    through its steps by itself."""
    from cfbook.book.figures.microscope import microscope_figure

    outputs = []
    monkeypatch.setattr("IPython.display.display", lambda bundle, raw: outputs.append(bundle))
    show(microscope_figure(_microscope()))
    assert "frames" in outputs[0]["application/vnd.plotly.v1+json"]
    assert "Plotly.animate" not in outputs[0]["text/html"]
