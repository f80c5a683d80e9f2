"""The book's figures: every one builds from the shipped data and plots as many traces and points
as that data holds; then the numbers a figure plots, computed by hand on small cases. How a figure
looks (colours, titles, axes, legends) is not tested."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import plotly.graph_objects as go
import pytest
import torch
from conftest import hand_made_microscope

from cfbook.book.benchmarks import benchmark_table
from cfbook.book.figures.ablation import (
    ablation_figure,
    ig_maps_figure,
    interval_bars,
    knobs_figure,
)
from cfbook.book.figures.benchmarks import search_memory_figure, throughput_figure
from cfbook.book.figures.evaluation import gallery_figure, robustness_figure
from cfbook.book.figures.microscope import microscope_figure
from cfbook.book.figures.reproduction import reduction_figure
from cfbook.book.figures.ridge import read_ridged, stability_figure
from cfbook.book.figures.seed_page import seed_page_figure
from cfbook.book.figures.seeds import seeds_figure
from cfbook.book.figures.training import (
    energy_schedule_figure,
    profile_table,
    sample_digits_figure,
    show,
)
from cfbook.book.figures.two_d import two_d_figure
from cfbook.book.profiles import PROFILES, get_profile
from cfbook.book.stages import load_comparison_runs, load_evaluations, load_microscope
from cfbook.data import load_mnist
from cfbook.paper.merge import read_result, read_variants
from cfbook.search.generators import NativeGenerator
from cfbook.training.log import EpochRecord, TrainingLog

DATA = Path(__file__).resolve().parents[1] / "data"


def _lines(fig: go.Figure) -> list[go.Scatter]:
    return [t for t in fig.data if t.type == "scatter"]


# --- every figure of the book, from the shipped data ------------------------------------------
# Each entry builds one figure as its chapter does and returns it with the traces and the points
# per trace that its data hold (None: not counted for that figure).

Built = tuple[go.Figure, int, list[int] | None]


def _seeds(profile: str) -> Built:
    full, vanilla = load_comparison_runs(get_profile(profile), data_dir=DATA)

    def epochs(logs: list[TrainingLog], field: str) -> int:
        return len({r.epoch for log in logs for r in log if getattr(r, field) is not None})

    # A band (there and back) and a mean per panel: time and accuracy of both, then CT's search.
    points = [
        n
        for logs in (full, vanilla)
        for field in ("time_taken", "acc_val")
        for n in (2 * epochs(logs, field), epochs(logs, field))
    ]
    searched = epochs(full, "implaus")
    points += [2 * searched, searched] if searched else []
    if searched and epochs(full, "implaus_valid"):
        points += [None, None]
    return seeds_figure(full, vanilla), len(points), points


def _seed_page() -> Built:
    runs = load_comparison_runs(get_profile("tutorial"), data_dir=DATA)
    full, vanilla = runs[0][0], runs[1][0]
    accuracies = [sum(r.acc is not None for r in log) for log in (full, vanilla)]
    searched = sum(r.implaus is not None for r in full)
    points = [len(full), accuracies[0], len(vanilla), accuracies[1], searched]
    return seed_page_figure(full, vanilla), 5, points


def _microscope(profile: str) -> Built:
    result = load_microscope(profile, data_dir=DATA)
    searches = result["searches"].values()
    last = max(1, *(s["counterfactual_at"] for s in searches))
    steps = min(last + 2, len(next(iter(searches))["target_prob"]))
    fig = microscope_figure(result)
    assert len(fig.frames) == steps
    return fig, 4 + 2 * 2 * 4, None


def _gallery(profile: str) -> Built:
    full, vanilla = load_evaluations(profile, data_dir=DATA)
    return gallery_figure(full, vanilla), 5 * len(full["gallery"]["index"]), None


def _robustness(profile: str) -> Built:
    full, vanilla = load_evaluations(profile, data_dir=DATA)
    points = 1 + len(full["robustness"]["summary"]["epsilons"])
    return robustness_figure(full, vanilla), 4, [points] * 4


def _results() -> dict:
    return read_result(DATA, "results.json")


def _reduction() -> Built:
    results = _results()
    seeds = len(next(iter(results["data"].values()))["seeds"])
    return reduction_figure(results), 3 * (1 + seeds), [len(results["data"])] * 3 * (1 + seeds)


def _ablation() -> Built:
    ablation = _results()["ablation"]
    dots = sum(len(d["seeds"]) for d in ablation.values())
    return ablation_figure(_results()), 3, [dots] * 3


def _ig_maps() -> Built:
    maps = read_result(DATA, "ig/mnist-s0.json")
    fig = ig_maps_figure(maps)
    assert all(len(t.z) == 28 and len(t.z[0]) == 28 for t in fig.data)
    return fig, sum(len(m) for m in maps["maps"].values()), None


def _knobs() -> Built:
    knobs = read_result(DATA, "knobs.json")
    settings = [len(knobs["data"][key][knob]) for key in knobs["data"] for knob in knobs["knobs"]]
    return knobs_figure(knobs), 3 * len(settings), [n for n in settings for _ in range(3)]


def _stability() -> Built:
    results = read_result(DATA, "results.json")
    weighted = read_ridged(DATA, results, read_variants(DATA))
    assert weighted is not None
    configured, _, ridged = weighted
    keys = [k for k in configured if all(k in logs for logs, _ in ridged.values())]
    cells = [
        logs[k][s]
        for k in keys
        for logs in (configured, *(g for g, _ in ridged.values()))
        for s in logs[k]
    ]
    return stability_figure(configured, ridged), len(cells), None


def _two_d() -> Built:
    result = read_result(DATA, "two_d.json")
    fig = two_d_figure(result)
    assert len(fig.layout.updatemenus[0].buttons) == len(result["data"])
    return fig, sum(6 * len(d["panels"]) for d in result["data"]), None


def _throughput() -> Built:
    rows = benchmark_table("throughput")
    return throughput_figure(), 2, [len(rows)] * 2


def _memory() -> Built:
    rows = benchmark_table("memory")
    sweeps = [sum(r["sweep"] == s for r in rows) for s in ("chunk grows", "nce grows")]
    return search_memory_figure(), 4, [n for n in sweeps for _ in range(2)]


def _energy_schedule() -> Built:
    searches = {"training": NativeGenerator(), "test time": NativeGenerator(maxiter=50)}
    points = [s.maxiter for s in searches.values()]
    return energy_schedule_figure(searches), 2, points


def _digits() -> Built:
    data = load_mnist(100, verbose=False)
    return sample_digits_figure(data.x, data.y, n=16), 16, None


FIGURES: dict[str, Callable[[], Built]] = {
    "comparison: the seeds (cpu)": lambda: _seeds("cpu"),
    "comparison: the seeds (tutorial)": lambda: _seeds("tutorial"),
    "comparison: the Julia page's run": _seed_page,
    **{
        f"evaluation: the microscope ({p})": lambda p=p: _microscope(p) for p in ("cpu", "tutorial")
    },
    **{f"evaluation: the gallery ({p})": lambda p=p: _gallery(p) for p in ("cpu", "tutorial")},
    **{f"evaluation: robustness ({p})": lambda p=p: _robustness(p) for p in ("cpu", "tutorial")},
    "reproduction: the reductions": _reduction,
    "reproduction: the ridge's training logs": _stability,
    "ablation: IP per objective": _ablation,
    "ablation: IG maps": _ig_maps,
    "ablation: the knob study": _knobs,
    "two dimensions": _two_d,
    "training: throughput": _throughput,
    "training: the energy schedule": _energy_schedule,
    "memory": _memory,
    "mnist: the digits": _digits,
}


@pytest.mark.parametrize("name", FIGURES)
def test_every_figure_of_the_book_builds_from_the_shipped_data(name):
    fig, traces, points = FIGURES[name]()
    assert len(fig.data) == traces
    if points is not None:
        drawn = [len(t.x) for t in fig.data]
        assert [n if want is not None else None for n, want in zip(drawn, points, strict=True)] == (
            points
        )
    json.dumps(fig.to_plotly_json(), default=str)  # the notebook can store it


# --- the numbers a figure plots, on small cases --------------------------------------------


def _log(seed, acc, implaus=None, implaus_valid=None, valid=None, burnin=1):
    records = [
        EpochRecord(
            epoch=i,
            acc=a,
            acc_val=a,
            train_loss=0.1,
            implaus=implaus[i - burnin - 1] if i > burnin and implaus else None,
            reg_loss=None,
            adv_loss=None,
            time_taken=2.0 if i > burnin and implaus else 1.0,
            percent_valid=valid[i - burnin - 1] if i > burnin and implaus else None,
            avg_iter=3.0 if i > burnin and implaus else None,
            implaus_valid=implaus_valid[i - burnin - 1] if i > burnin and implaus else None,
        )
        for i, a in enumerate(acc, start=1)
    ]
    return TrainingLog(records, {"seed": seed, "burnin_epochs": burnin})


def test_the_seeds_figure_draws_each_measure_s_band_and_mean_over_the_seeds():
    full = [
        _log(0, [0.5, 0.6, 0.7], [1.0, 2.0], [3.0, 4.0], [0.5, 0.7]),
        _log(1, [0.7, 0.8, 0.9], [1.0, 2.0], [5.0, None], [0.9, 0.1]),
    ]
    vanilla = [_log(0, [0.4, 0.5, 0.6]), _log(1, [0.6, 0.5, 0.4])]
    fig = seeds_figure(full, vanilla)
    # Per panel and objective: the band (max over seeds, then min backwards) and the mean.
    expected = [
        ([1, 2, 3], [1.0, 2.0, 2.0], [1.0, 2.0, 2.0], [1.0, 2.0, 2.0]),  # CT's seconds
        ([1, 2, 3], [0.7, 0.8, 0.9], [0.5, 0.6, 0.7], [0.6, 0.7, 0.8]),  # CT's accuracy
        ([1, 2, 3], [1.0] * 3, [1.0] * 3, [1.0] * 3),  # the baseline's seconds
        ([1, 2, 3], [0.6, 0.5, 0.6], [0.4, 0.5, 0.4], [0.5, 0.5, 0.5]),
        ([2, 3], [0.9, 0.7], [0.5, 0.1], [0.7, 0.4]),  # valid share, search epochs only
        ([2, 3], [5.0, 4.0], [3.0, 4.0], [4.0, 4.0]),  # a seed without valid ones left out
    ]
    assert len(fig.data) == 2 * len(expected)
    for k, (epochs, top, bottom, mean) in enumerate(expected):
        band, line = fig.data[2 * k], fig.data[2 * k + 1]
        assert list(band.x) == epochs + epochs[::-1] and list(line.x) == epochs, k
        assert list(band.y) == pytest.approx(top + bottom[::-1]), k
        assert list(line.y) == pytest.approx(mean), k
    assert fig.layout.shapes[0].x0 == 1.5  # the end of the burn-in


def _page_log(times, implaus=None, burnin=2):
    records = [
        EpochRecord(
            epoch=e,
            acc=0.9 + e / 100 if e % 2 == 0 else None,
            acc_val=None,
            train_loss=0.1,
            implaus=implaus[e - burnin - 1] if implaus and e > burnin else None,
            reg_loss=None,
            adv_loss=None,
            time_taken=t,
            percent_valid=None,
            avg_iter=None,
        )
        for e, t in enumerate(times, start=1)
    ]
    return TrainingLog(records, {"burnin_epochs": burnin})


def test_the_seed_page_draws_each_objective_s_epochs_and_post_burn_in_mean():
    full = _page_log([1.0, 1.0, 6.0, 8.0], implaus=[-1.0, -3.0])
    vanilla = _page_log([1.0, 1.0, 2.0, 4.0])
    time_full, acc_full, time_vanilla, acc_vanilla, implaus = seed_page_figure(full, vanilla).data
    assert list(time_full.y) == [1.0, 1.0, 6.0, 8.0]
    assert list(time_vanilla.y) == [1.0, 1.0, 2.0, 4.0]
    # Training accuracy on the epochs where it was measured.
    assert list(acc_full.x) == [2, 4] and list(acc_full.y) == pytest.approx([0.92, 0.94])
    assert list(acc_vanilla.y) == pytest.approx([0.92, 0.94])
    assert list(implaus.x) == [3, 4] and list(implaus.y) == [-1.0, -3.0]
    shapes = seed_page_figure(full, vanilla).layout.shapes
    means = sorted(s.y0 for s in shapes if s.y0 == s.y1 and s.xref.endswith("domain"))
    assert means == pytest.approx([3.0, 7.0])  # each objective's post-burn-in average
    assert [s.x0 for s in shapes if s.x0 == s.x1] == [2, 2, 2]  # burn-in ends, every panel


def test_the_microscope_s_frames_move_every_panel_through_the_iterates():
    fig = microscope_figure(hand_made_microscope(0, 0.9, True))
    assert len(fig.frames) == 5 and fig.layout.sliders[0].active == 4  # opens on the end
    first, last = fig.frames[0].data, fig.frames[-1].data
    # Each model's iterate and change (baseline first), then both curves' points per model.
    assert first[0].z[0][0] == 0 and first[1].z[5][5] == 0 and first[2].z[0][0] == 0
    assert last[0].z[27][27] == 200 and last[1].z[27][27] == 200  # frozen after step 1
    assert last[2].z[0][0] == 100 and last[3].z[0][0] == 100
    assert fig.frames[2].data[5].x == (2,) and fig.frames[2].data[5].y == (0.5,)  # CT, p
    assert fig.frames[2].data[7].y == (0.47,)  # CT, L-inf
    # The frames replace exactly the traces they hold, and the slider plays its own step.
    assert [fig.data[i].type for i in fig.frames[0].traces] == ["heatmap"] * 4 + ["scatter"] * 4
    assert [list(s.args[0]) for s in fig.layout.sliders[0].steps] == [[f.name] for f in fig.frames]
    assert sorted(shape.y0 for shape in fig.layout.shapes) == [0.3, 0.75]  # ε and τ


def test_the_microscope_curves_run_two_steps_past_the_later_stop_and_mark_both_points():
    result = hand_made_microscope(0, 0.9, True)
    result["searches"]["vanilla"]["path"] = [bytes([v] * 784).hex() for v in (10, 200)]
    for s in result["searches"].values():  # eight steps recorded: the figure shows five
        s["target_prob"] += [s["target_prob"][-1]] * 3
        s["distance"] += [s["distance"][-1]] * 3
    fig = microscope_figure(result)
    assert len(fig.data) == 4 + 2 * 2 * 4
    # The page opens on the last step shown: the baseline's digit at 200 (from 10), CT's at 100.
    assert fig.data[0].z[0][0] == 200 and fig.data[2].z[0][0] == 100
    assert fig.data[1].z[0][0] == 190 and fig.data[3].z[0][0] == 100  # change from the factual
    for c, key in enumerate(("target_prob", "distance")):
        for i, mode in enumerate(("vanilla", "full")):
            s = result["searches"][mode]
            step, line, adversarial, found = fig.data[4 + 8 * c + 4 * i : 8 + 8 * c + 4 * i]
            assert (list(step.x), list(step.y)) == ([4], [s[key][4]])
            assert list(line.x) == [0, 1, 2, 3, 4] and list(line.y) == s[key][:5]
            at, stop = s["adversarial_at"], s["counterfactual_at"]
            assert (list(adversarial.x), list(adversarial.y)) == ([at], [s[key][at]])
            assert (list(found.x), list(found.y)) == ([stop], [s[key][stop]])
    # Searches that never moved still show two steps past the start.
    for s in result["searches"].values():
        s |= {"counterfactual_at": 0, "adversarial_at": 0, "valid": False}
    assert list(microscope_figure(result).data[5].x) == [0, 1, 2]


def _gallery_pair(levels: list[list[int]], factual: int = 50) -> tuple[dict, dict]:
    """Two galleries of three digits at ink level ``factual``: CT's counterfactuals at the given
    per-pixel levels, the baseline's unchanged."""

    def hexed(row: list[int]) -> str:
        return bytes(row).hex()

    def evaluation(counterfactuals: list[str]) -> dict:
        per_model = [{"clean": 0.9, "epsilons": [0.03], "fgsm": [0.8], "pgd": [0.7]}]
        stat = {"mean": 0.9, "se": 0.01}
        return {
            "robustness": {
                "per_model": per_model,
                "summary": {"clean": stat, "epsilons": [0.03], "fgsm": [stat], "pgd": [stat]},
            },
            "gallery": {
                "lambda_energy": 1.0,
                "index": [5, 9, 11],
                "label": [0, 1, 2],
                "target": [3, 7, 8],
                "valid": [True, False, True],
                "domain": [-1.0, 1.0],
                "factual": [hexed([factual] * 784)] * 3,
                "counterfactual": counterfactuals,
            },
        }

    full = evaluation([hexed(row) for row in levels])
    return full, evaluation([hexed([factual] * 784)] * 3)


def test_the_gallery_draws_each_counterfactual_and_its_change_from_the_factual():
    moved = [[76] * 10 + [77] * 20 + [10] * 10 + [50] * 744, [50] * 784, [150] * 784]
    fig = gallery_figure(*_gallery_pair(moved))
    assert len(fig.data) == 3 * 5
    factual, baseline, ct, baseline_change, ct_change = fig.data[:5]
    assert factual.z.flatten().tolist() == [50] * 784
    assert ct.z.flatten().tolist() == moved[0]
    change = ct_change.z.flatten().tolist()
    assert change[:40] == [26] * 10 + [27] * 20 + [-40] * 10 and set(change[40:]) == {0}
    assert set(baseline_change.z.flatten().tolist()) == {0}
    assert set(fig.data[14].z.flatten().tolist()) == {100}  # the third digit, CT's change
    full, vanilla = _gallery_pair(moved)
    vanilla["gallery"]["target"] = [4, 7, 8]
    with pytest.raises(ValueError, match="different digits or targets"):
        gallery_figure(full, vanilla)


def test_the_robustness_figure_draws_each_model_s_accuracy_and_standard_error():
    full, vanilla = _gallery_pair([[50] * 784] * 3)
    full["robustness"]["summary"] = {
        "clean": {"mean": 0.9, "se": 0.01},
        "epsilons": [0.03, 0.1],
        "fgsm": [{"mean": 0.8, "se": 0.02}, {"mean": 0.5, "se": 0.03}],
        "pgd": [{"mean": 0.7, "se": 0.02}, {"mean": 0.3, "se": None}],  # one model: no SE
    }
    vanilla["robustness"]["summary"] = full["robustness"]["summary"] | {"epsilons": [0.03, 0.1]}
    fgsm, pgd = robustness_figure(full, vanilla).data[:2]
    assert list(fgsm.x) == [0.0, 0.03, 0.1] and list(fgsm.y) == [0.9, 0.8, 0.5]
    assert list(fgsm.error_y.array) == [0.01, 0.02, 0.03]
    assert list(pgd.y) == [0.9, 0.7, 0.3] and list(pgd.error_y.array) == [0.01, 0.02, 0.0]


def test_the_reduction_and_ablation_figures_draw_each_seed_with_its_interval():
    bars = interval_bars([{"reduction": 10.0, "reduction_low": 4.0, "reduction_high": 25.0}, {}])
    assert bars["array"] == [15.0, None] and bars["arrayminus"] == [6.0, None]
    results = _results()
    energy = ablation_figure(results).data[1]
    seeds = results["ablation"]["adult"]["energy"]
    adult = [i for i, label in enumerate(energy.x) if label == "Adult"]
    assert [energy.customdata[i] for i in adult] == results["ablation"]["adult"]["seeds"]
    assert [energy.y[i] for i in adult] == [s["reduction"] for s in seeds["per_seed"]["ip"]]
    assert [energy.error_y.array[i] for i in adult] == [
        s["reduction_high"] - s["reduction"] for s in seeds["per_seed"]["ip"]
    ]
    ip = reduction_figure(results).data
    second = [d["main"]["ip"]["per_seed"][1] for d in results["data"].values()]
    # The paper's dots, then one series per seed.
    assert list(ip[2].x) == [None if s is None else s["reduction"] for s in second]


def test_the_knob_figure_draws_ip_as_the_change_from_the_first_setting():
    def row(value, v, ip, acc):
        return {"value": value, "validity": [v, v], "ip": [ip, ip + 0.2], "accuracy": [acc, acc]}

    knobs = {
        "knobs": {"lambda_div": [0.1, 2.0]},
        # Rows in any order: the figure sorts them by value.
        "data": {"moons": {"lambda_div": [row(2.0, 0.5, 1.0, 0.97), row(0.1, 0.9, 2.0, 0.99)]}},
    }
    validity, ip, accuracy = knobs_figure(knobs).data
    assert list(validity.x) == ["0.1", "2"] and list(validity.y) == [0.9, 0.5]
    # IP's means 2.1 -> 1.1: -47.6 %; its seeds 1.0 and 1.2 are the bar's ends.
    assert list(ip.y) == [0, pytest.approx(100 * (1.1 / 2.1 - 1))]
    assert list(ip.error_y.arrayminus) == [pytest.approx(100 * 0.1 / 2.1)] * 2
    assert list(accuracy.y) == [0.99, 0.97]


def test_the_ridge_figure_draws_every_seed_s_validity_over_its_epochs():
    def cell(valid):
        return {
            "meta": {},
            "log": [{"epoch": e + 1, "percent_valid": v} for e, v in enumerate(valid)],
        }

    configured = {"lin_sep": {s: cell([0.1 * s, 0.5]) for s in range(3)}, "moons": {0: cell([0.2])}}
    ridged = {"ridge": ({"lin_sep": {s: cell([1.0, 1.0]) for s in range(3)}}, None)}
    fig = stability_figure(configured, ridged)
    # Moon has no ridged cells: left out. LS: three seeds without the ridge, three with it.
    assert [list(t.y) for t in fig.data] == [[0.0, 0.5], [0.1, 0.5], [0.2, 0.5]] + [[1.0, 1.0]] * 3
    assert all(list(t.x) == [1, 2] for t in fig.data)


def test_the_two_dimensional_figure_draws_each_panel_s_grid_data_paths_and_ends():
    paths = [[[0.0, 0.0], [1.0, 0.0], [2.0, 0.0], [3.0, 1.0], [4.0, 1.0]], [[5.0, 5.0], [6.0, 6.0]]]
    panel = {
        "title": "panel",
        "protected": False,
        "prob": [[0.1, 0.2], [0.3, 0.4]],
        "paths": paths,
        "valid": [True, False],
        "path_l1": [4.0, 1.4],
        "moved_x1": False,
    }
    data = {
        "label": "LS",
        "axes": [[-1.0, 1.0], [-2.0, 2.0]],
        "train_x": [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]],
        "train_y": [0, 1, 0],
        "panels": [panel] * 4,
    }
    fig = two_d_figure({"data": [data]})
    for i in range(4):
        grid, class0, class1, lines, valid, invalid = fig.data[6 * i : 6 * i + 6]
        assert list(grid.x) == [-1.0, 1.0] and list(grid.y) == [-2.0, 2.0]
        assert grid.z.tolist() == [pytest.approx(row) for row in panel["prob"]]
        assert (list(class0.x), list(class0.y)) == ([0.0, 4.0], [1.0, 5.0])
        assert (list(class1.x), list(class1.y)) == ([2.0], [3.0])
        # Every third iterate and the last, each path ended by a break.
        assert list(lines.x) == [0.0, 3.0, 4.0, None, 5.0, 6.0, None]
        assert list(lines.y) == [0.0, 1.0, 1.0, None, 5.0, 6.0, None]
        assert (list(valid.x), list(valid.y)) == ([4.0], [1.0])
        assert (list(invalid.x), list(invalid.y)) == ([6.0], [6.0])
    # The menu shows one data set's traces at a time, the third's included.
    fig = two_d_figure({"data": [data | {"label": k} for k in ("LS", "Moon", "OL")]})
    shown = [b.args[0]["visible"] for b in fig.layout.updatemenus[0].buttons]
    assert shown[2] == [False] * 48 + [True] * 24


def test_the_benchmark_figures_draw_the_recorded_tables():
    rows = benchmark_table("throughput")
    native, reference = throughput_figure().data
    assert list(native.y) == [r["Native cf/s"] for r in rows]
    assert list(reference.y) == [r["Reference cf/s"] for r in rows]
    shown = benchmark_table("throughput", text=True)
    assert [a.text for a in throughput_figure().layout.annotations] == [
        r["Native / Reference"] for r in shown
    ]
    recorded = benchmark_table("memory")
    memory = search_memory_figure()
    for trace, sweep, key in [(0, "chunk grows", "cf_batchsize"), (2, "nce grows", "nce")]:
        peaks = [r for r in recorded if r["sweep"] == sweep]
        drawn = memory.data[trace]
        assert list(drawn.x) == [r[key] for r in peaks]
        assert list(drawn.y) == pytest.approx([r["search peak"] / 2**20 for r in peaks])
        results = next(k for k in peaks[0] if k.startswith("results"))
        stored = memory.data[trace + 1]
        assert list(stored.y) == pytest.approx([r[results] / 2**20 for r in peaks])
    assert throughput_figure("no-such-kind") is None and search_memory_figure("none") is None


def test_the_energy_schedule_is_each_search_s_weight_per_iteration():
    search = NativeGenerator(maxiter=4)
    (line,) = energy_schedule_figure({"search": search}).data
    assert list(line.x) == [0, 1, 2, 3]
    assert list(line.y) == [search.energy_weight(t) for t in range(4)]


def test_sample_digits_are_drawn_in_clamped_ink_eight_to_a_row():
    x = torch.zeros(9, 784)
    x[0, :2] = torch.tensor([-2.0, 2.0])  # outside the domain: drawn at its edges
    fig = sample_digits_figure(x, torch.arange(9), n=9)
    assert fig.data[0].z[0][:2].tolist() == [0, 255] and fig.data[0].z[0][2] == 128
    assert fig.data[0].z.shape == (28, 28)
    assert [a.text for a in fig.layout.annotations][:3] == ["label 0", "label 1", "label 2"]
    # Nine digits: eight in the first row, the ninth below the first.
    assert fig.layout.xaxis9.domain == fig.layout.xaxis.domain
    assert fig.layout.yaxis9.domain != fig.layout.yaxis.domain
    assert len(sample_digits_figure(torch.zeros(20, 784), torch.arange(20)).data) == 16


@pytest.mark.parametrize(
    ("x", "y", "n", "message"),
    [
        (torch.zeros(4, 783), torch.zeros(4, dtype=torch.long), 2, r"x must have shape"),
        (torch.zeros(4, 784), torch.zeros(3, dtype=torch.long), 2, r"y must have shape \(4,\)"),
        (torch.zeros(4, 784), torch.zeros(4, dtype=torch.long), 5, "n must be between 1 and 4"),
        (torch.zeros(4, 784), torch.zeros(4, dtype=torch.long), 0, "n must be between 1 and 4"),
    ],
)
def test_sample_digits_figure_rejects_bad_input(x, y, n, message):
    with pytest.raises(ValueError, match=message):
        sample_digits_figure(x, y, n=n)


def test_a_profile_s_burn_in_is_shown_in_epochs():
    tutorial = PROFILES["tutorial"]
    rows = profile_table([tutorial, PROFILES["smoke"]]).splitlines()
    (burnin,) = [row for row in rows if row.startswith("| burnin |")]
    assert f"{tutorial.burnin:g} ({round(tutorial.burnin * tutorial.nepochs)} epochs)" in burnin
    with pytest.raises(ValueError, match="profiles is empty"):
        profile_table([])


def test_show_embeds_a_figure_without_plotly_js_under_a_stable_id(monkeypatch):
    """A fragment the page loads plotly.js for once; the same figure gets the same id (the stored
    notebooks do not change when nothing did); a figure with frames waits for its slider."""
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda bundle, raw: shown.append(bundle))
    fig = seeds_figure([_log(0, [0.5, 0.6])], [_log(0, [0.4, 0.5])])
    show(fig)
    show(fig)
    html = shown[0]["text/html"]
    assert "Plotly.newPlot" in html and "<html" not in html and len(html) < 100_000
    assert re.search(r'id="cfbook-[0-9a-f]{12}"', html) and shown[1] == shown[0]
    json.dumps(shown[0]["application/vnd.plotly.v1+json"])
    show(microscope_figure(hand_made_microscope(0, 0.9, True)))
    assert "frames" in shown[2]["application/vnd.plotly.v1+json"]
    assert "Plotly.animate" not in shown[2]["text/html"]
