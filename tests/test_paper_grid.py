"""The experiment grid (``cfbook.paper``): its cells, their settings, resumption and the merge,
run at smoke sizes on two data sets, as CI does."""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest
import torch

from cfbook.book.figures.reproduction import disagreements, summary
from cfbook.commands.paper import main
from cfbook.data import load_adult, load_moons
from cfbook.paper import grid
from cfbook.paper.agreement import binomial_se, count, level_agrees, reduction_agrees
from cfbook.paper.files import Busy, locked
from cfbook.paper.grid import (
    ABLATION,
    TRAININGS,
    Cell,
    Scale,
    cell_config,
    evaluation_config,
    grid_cells,
    run_cell,
    run_evaluation,
)
from cfbook.paper.merge import _level, mean_accuracies, merge_results
from cfbook.paper.settings import (
    DEFAULT_LAMBDAS,
    EPOCHS,
    EXPERIMENTS,
    HIDDEN,
    LAMBDA_ADV,
    LAMBDA_DIV,
    LR,
    MNIST_PROTECTED_ROWS,
    PAPER_SETUP,
    SEARCH,
    TEST_TAU,
    VARIANTS,
    Variant,
    load_experiment_data,
)
from cfbook.search.generators import NativeGenerator

REPO = Path(__file__).resolve().parents[1]


def test_the_grid_numbers_every_cell_once_in_a_stable_order():
    cells = grid_cells(Scale.paper())
    assert len(cells) == 9 * 3 * 3 == len({c.index for c in cells})
    assert [c.index for c in cells] == list(range(81))
    assert cells[17].name == "circles-full_protected-s2"
    part = grid_cells(Scale.paper(), ["adult"])
    assert [c.index for c in part] == [c.index for c in cells if c.data == "adult"]
    with pytest.raises(ValueError, match="unknown data set 'iris'"):
        grid_cells(Scale.paper(), ["iris"])
    # The ablation's cells come after the main grid's, which keep their numbers.
    both = grid_cells(Scale.paper(), ablation=True)
    assert len(both) == 9 * 5 * 3 and sorted(c.index for c in both) == list(range(135))
    assert {c.index: c.name for c in both}[17] == "circles-full_protected-s2"
    assert {c.index: c.name for c in both}[81] == "lin_sep-energy-s0"


def test_settings_follow_the_papers_grid_configs():
    # grid_config.toml: moons trains at tau 0.9, adult at 0.75; the protected runs take the
    # main grid's weights (the launch command's flags fill their empty fields), the variant
    # zero_lambdas_protected the committed mutability grids' 0 and 0; every search takes steps
    # of 0.1 (Flux's Descent() default: the configured lr = 0.25 is never read).
    moons = cell_config(Cell(0, "moons", "full", 0), Scale.paper())
    assert moons["search"]["tau"] == 0.9 and moons["search"]["step_size"] == 0.1
    assert moons["lambdas"] == [1.0, 0.5, 0.25, 0.25] and moons["batch_size"] == 30
    protected = Cell(0, "lin_sep", "full_protected", 0)
    assert cell_config(protected, Scale.paper())["lambdas"] == [1.0, 0.5, 0.01, 0.25]
    zeros = cell_config(protected, Scale.paper(), VARIANTS["zero_lambdas_protected"])
    assert zeros["lambdas"] == [1.0, 0.5, 0.0, 0.0]
    assert EXPERIMENTS["adult"].lambdas == (1.0, 0.5, 0.25, 0.25)
    assert cell_config(Cell(0, "adult", "vanilla", 0), Scale.paper())["nce"] is None
    assert EXPERIMENTS["mnist"].individuals * 5 == 125  # per round, over the 5 energy weights


# Each data set's settings as the paper's grid and evaluation configurations give them
# (../shared/reference/PAPER.md, "Training settings", from each grid_config.toml and
# eval_config.toml): training rows, batch, training-time tau, counterfactuals per epoch, lambda_reg,
# the protected feature, and the individuals per round and test-time energy weight.
PAPER_SETTINGS = {
    "lin_sep": (3000, 30, 0.5, 1000, 0.01, ("x1",), 250),
    "circles": (3000, 30, 0.5, 1000, 0.5, ("x1",), 250),
    "moons": (3000, 30, 0.9, 1000, 0.25, ("x1",), 250),
    "over": (3000, 30, 0.5, 1000, 0.25, ("x1",), 250),
    "adult": (25049, 1000, 0.75, 5000, 0.25, ("age",), 100),
    "cali": (15504, 1000, 0.5, 5000, 0.25, ("HouseAge",), 100),
    "credit": (9617, 1000, 0.5, 5000, 0.25, ("AGE",), 100),
    "gmsc": (12371, 1000, 0.5, 5000, 0.5, ("age",), 100),
    "mnist": (10000, 1000, 0.5, 5000, 0.01, ("rows",), 25),
}


def test_every_data_sets_settings_are_the_papers():
    assert list(EXPERIMENTS) == list(PAPER_SETTINGS)  # the paper's order of the data sets
    for key, expected in PAPER_SETTINGS.items():
        e = EXPERIMENTS[key]
        got = (e.n_train, e.batch_size, e.tau, e.nce, e.lambda_reg, e.protected, e.individuals)
        assert got == expected, key
        assert e.key == key
        # The main grid's weights everywhere, the protected runs included.
        assert e.lambdas == (1.0, 0.5, e.lambda_reg, 0.25)
        for training in ("full", "full_protected"):
            config = cell_config(Cell(0, key, training, 0), Scale.paper())
            assert config["lambdas"] == [1.0, 0.5, e.lambda_reg, 0.25], key
    labels = [e.label for e in EXPERIMENTS.values()]
    assert labels == ["LS", "Circ", "Moon", "OL", "Adult", "CH", "Cred", "GMSC", "MNIST"]
    kinds = [e.kind for e in EXPERIMENTS.values()]
    assert kinds == ["synthetic"] * 4 + ["tabular"] * 4 + ["image"]
    assert SEARCH == {"maxiter": 30, "step_size": 0.1, "lambda_cost": 0.001, "lambda_energy": 5.0}
    assert TEST_TAU == {"none": 0.95, "protected": 0.5}
    assert (EPOCHS, LR, HIDDEN, LAMBDA_DIV, LAMBDA_ADV) == (100, 1e-3, 32, 0.5, 0.25)
    assert DEFAULT_LAMBDAS == (1.0, 0.5, 0.1, 0.25)


def test_mnist_protects_its_top_and_bottom_five_pixel_rows(capsys):
    data = load_experiment_data("mnist")
    assert capsys.readouterr().out == ""  # quiet: the grid reports its own progress
    assert data.x.shape == (10_000, 784) and data.x_test.shape == (10_000, 784)
    # 1,100 per class drawn, 100 of each held out for validation: the rest trains.
    assert data.y.bincount().tolist() == [1000] * 10
    assert data.y_val.bincount().tolist() == [100] * 10 and data.x_val.shape == (1000, 784)
    assert data.domain == (-1.0, 1.0)
    assert "training split" in data.source
    frozen = [i for i, m in enumerate(data.protected_mutability) if m == "none"]
    # CT.jl's 1-based 1-140 and 645-784.
    assert frozen == [*range(140), *range(644, 784)]
    assert MNIST_PROTECTED_ROWS == (0, 1, 2, 3, 4, 23, 24, 25, 26, 27)
    assert data.protected_mutability.count("both") == 784 - 280
    assert data.categorical is None
    assert "resampled as TaijaData's load_mnist: 1,100 per class with replacement, 100 of" in (
        data.source
    )


def test_a_variant_changes_the_data_it_names_and_only_that():
    # The synthetic generator and the one-hot groups come from the variant; the source is the
    # loader's own for every data set but MNIST.
    paper, sklearn = (
        load_experiment_data("moons", variant=v) for v in (PAPER_SETUP, VARIANTS["sklearn_data"])
    )
    assert (
        paper.source == load_moons().source
        and sklearn.source == load_moons(generator="sklearn").source
    )
    assert paper.source != sklearn.source and not torch.equal(paper.x, sklearn.x)
    adult = load_adult()
    groups = {
        name: load_experiment_data("adult", variant=VARIANTS[name]).categorical
        for name in ("own_groups", "no_decoding")
    }
    assert load_experiment_data("adult").categorical == adult.categorical_groups()
    assert groups == {"own_groups": adult.categorical_groups(False), "no_decoding": None}
    assert adult.categorical_groups(False) != adult.categorical_groups()


def test_tabular_cells_train_on_the_first_n_train_rows_of_the_training_part():
    data = load_experiment_data("credit")
    assert data.x.shape[0] == EXPERIMENTS["credit"].n_train
    assert data.x_val.shape[0] == 1001  # 10,618 training rows (round, where CT.jl has 10,617)
    assert data.protected_mutability.count("none") == 1
    assert data.columns[data.protected_mutability.index("none")] == "AGE"


@pytest.fixture(scope="module")
def smoke(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("grid")
    args = ["--smoke", "--data", "lin_sep,adult", "--objectives", "energy,adversarial", "--ig"]
    assert main([*args, "--out", str(out)]) == 0
    return out


def test_the_smoke_grid_writes_every_cell_evaluation_and_the_merged_results(smoke):
    names = {p.stem for p in (smoke / "cells").glob("*.json")}
    trainings = (*TRAININGS, *ABLATION)
    assert names == {
        f"{d}-{t}-s{s}" for d in ("lin_sep", "adult") for t in trainings for s in (0, 1)
    }
    assert not (smoke / "checkpoints").exists() or not any((smoke / "checkpoints").iterdir())
    results = json.loads((smoke / "results.json").read_text())
    assert set(results["data"]) == {"lin_sep", "adult"}
    adult = results["data"]["adult"]
    assert adult["seeds"] == [0, 1] and adult["rounds"] == [4, 4]  # each seed's own runs
    assert set(adult["main"]) == {"ip", "ip_star_5", "ip_star_0.5", "cost", "cost_unconstrained"}
    assert len(adult["main"]["ip"]["per_seed"]) == 2
    # Training time counts the grid's own cells, not the ablation's trained beside them.
    tested = [
        json.loads((smoke / "cells" / f"adult-{t}-s{s}.json").read_text())["seconds"]
        for t in TRAININGS
        for s in (0, 1)
    ]
    assert adult["training_seconds"] == pytest.approx(sum(tested))
    robust = adult["robustness"]["full"][1]
    assert robust["epsilons"] == [k / 90 for k in range(10)] and len(robust["pgd"]) == 10
    assert robust["rows"] == 200  # the smoke scale's attack rows
    # The chapter's verdicts: each published reduction of both data sets, judged seed by seed.
    assert summary(results)["total"] == 6 and 0 <= summary(results)["agree"] <= 6
    assert len(disagreements(results)) == 6 - summary(results)["agree"]
    # The ablation and IG parts.
    assert set(results["ablation"]) == set(results["ig"]) == {"lin_sep", "adult"}
    assert {"full", "energy", "adversarial", "vanilla"} <= set(results["ablation"]["adult"])
    assert results["ig"]["adult"]["rounds"] == 2 * 4
    # Each seed is also judged on its own, in the main grid's order of seeds.
    assert results["ablation"]["adult"]["seeds"] == results["data"]["adult"]["seeds"] == [0, 1]
    assert [s["rounds"] for s in results["ig"]["adult"]["per_seed"]] == [4, 4]
    for objective in ("full", "energy", "adversarial"):
        per_seed = results["ablation"]["adult"][objective]["per_seed"]
        assert all(len(per_seed[m]) == 2 for m in ("ip", "ip_star_5", "cost"))


def test_a_finished_cell_is_reused_and_other_settings_are_refused(smoke, capsys):
    cell = grid_cells(Scale.smoke(), ["adult"])[1]
    path = smoke / "cells" / f"{cell.name}.json"
    before = path.stat().st_mtime_ns
    again = run_cell(cell, Scale.smoke(), smoke, device=torch.device("cpu"))
    assert path.stat().st_mtime_ns == before and again["config"]["training"] == "full"
    with pytest.raises(ValueError, match="made with other settings"):
        run_cell(cell, Scale(seeds=2, epochs=3, rounds=4), smoke, device=torch.device("cpu"))


def _without_times(result: dict) -> dict:
    """A cell's result without what a clock decides."""
    log = [{k: v for k, v in r.items() if k != "time_taken"} for r in result["log"]]
    return {**{k: v for k, v in result.items() if k not in ("seconds", "log")}, "log": log}


def test_a_cell_killed_mid_epoch_resumes_to_the_uninterrupted_result(tmp_path, monkeypatch):
    cell = grid_cells(Scale.smoke(), ["lin_sep"])[1]
    scale = Scale(seeds=1, epochs=4, rounds=2, max_train=200, max_nce=50)
    steps_per_epoch = -(-200 // cell_config(cell, scale)["batch_size"])  # the last one short
    cpu = torch.device("cpu")
    whole = run_cell(cell, scale, tmp_path / "whole", device=cpu, report=lambda _: None)

    class Killed(Exception):
        pass

    steps = []
    kill_at = [2 * steps_per_epoch + steps_per_epoch // 2]  # mid-epoch 3, 2 epochs checkpointed
    step = torch.optim.Adam.step

    def counted(self, *args, **kwargs):
        steps.append(1)
        if len(steps) in kill_at:
            raise Killed
        return step(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.Adam, "step", counted)
    cut = tmp_path / "cut"
    with pytest.raises(Killed):
        run_cell(cell, scale, cut, device=cpu, report=lambda _: None)
    assert (cut / "checkpoints" / cell.name).is_dir() and not list((cut / "cells").glob("*.json"))
    assert not (cut / "cells" / f"{cell.name}.json.lock").exists()  # released on the way out
    steps.clear()
    kill_at.clear()
    resumed = run_cell(cell, scale, cut, device=cpu, report=lambda _: None)
    assert len(steps) == 2 * steps_per_epoch  # epochs 3 and 4 only: no finished epoch again
    assert _without_times(resumed) == _without_times(whole)
    for a, b in zip(
        torch.load(cut / "cells" / f"{cell.name}.pt", weights_only=True).values(),
        torch.load(tmp_path / "whole" / "cells" / f"{cell.name}.pt", weights_only=True).values(),
        strict=True,
    ):
        assert torch.equal(a, b)
    assert not (cut / "checkpoints" / cell.name).exists()


def test_a_corrupt_file_is_refused_by_name_and_the_rest_is_kept(smoke, tmp_path, capsys):
    out = tmp_path / "grid"
    shutil.copytree(smoke, out)
    cell = grid_cells(Scale.smoke(), ["lin_sep"])[1]
    broken_cell = out / "cells" / f"{cell.name}.json"
    broken_cell.write_text(broken_cell.read_text()[:100])  # truncated mid-write by hand
    broken_eval = out / "evaluations" / "lin_sep-s1.json"
    broken_eval.write_bytes(b"\x00" * 10)
    kept = {p: p.stat().st_mtime_ns for p in out.rglob("*.json")}
    capsys.readouterr()
    assert main(["--smoke", "--data", "lin_sep", "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert f"{broken_cell} is truncated or corrupt" in err and f"--cell {cell.index} --force" in err
    assert f"{broken_eval} is truncated or corrupt" in err and "--evaluate lin_sep:1 --force" in err
    assert "2 part(s) of the grid failed" in err and "results.json was not merged" in err
    # Every other cell and evaluation was reused, untouched, and so were the broken files.
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*.json")} == kept
    # A truncated weights file is named too, before any evaluation work.
    weights = out / "cells" / f"{cell.name}.pt"
    weights.write_bytes(weights.read_bytes()[:50])
    with pytest.raises(ValueError, match=f"{weights}.*cannot be loaded.*--force"):
        run_evaluation("lin_sep", 0, Scale.smoke(), out, device=torch.device("cpu"), force=True)


def test_a_cell_run_by_another_live_process_is_refused(smoke, tmp_path):
    out = tmp_path / "grid"
    shutil.copytree(smoke, out)
    cell = grid_cells(Scale.smoke(), ["lin_sep"])[0]
    lock = out / "cells" / f"{cell.name}.json.lock"
    # SIGHUP's default action in the holder, which ends it, even when the tests run under nohup
    # (an ignored signal stays ignored in a child).
    other = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"],
        preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL),
    )
    try:
        lock.write_text(f"{socket.gethostname()} {other.pid}")
        with pytest.raises(Busy, match=f"cell {cell.index} .* is being run by process {other.pid}"):
            run_cell(cell, Scale.smoke(), out, device=torch.device("cpu"), force=True)
        assert lock.exists()  # not this process's to remove
        # Asking whether the holder lives sends it no signal (signal 0): it is still running.
        with pytest.raises(subprocess.TimeoutExpired):
            other.wait(timeout=0.5)
    finally:
        other.kill()
        other.wait()
    # Its process is gone: the lock is stale and taken over.
    with locked(out / "cells" / f"{cell.name}.json", "a cell"):
        assert lock.read_text() == f"{socket.gethostname()} {os.getpid()}"
    assert not lock.exists()
    # A lock held on another host cannot be checked from here: refused, naming the way out.
    lock.write_text("elsewhere 1")
    with pytest.raises(Busy, match="delete the lock file if that process is gone"):
        run_cell(cell, Scale.smoke(), out, device=torch.device("cpu"), force=True)
    lock.unlink()
    # A finished evaluation is reused without taking its lock.
    (out / "evaluations" / "lin_sep-s0.json.lock").write_text("elsewhere 1")
    run_evaluation("lin_sep", 0, Scale.smoke(), out, device=torch.device("cpu"))
    with pytest.raises(Busy, match="the evaluation of lin_sep:0 is being run by process 1"):
        run_evaluation("lin_sep", 0, Scale.smoke(), out, device=torch.device("cpu"), force=True)


def test_a_grid_of_one_evaluation_merges(smoke, tmp_path):
    out = tmp_path / "grid"
    shutil.copytree(smoke, out)
    for path in (out / "evaluations").glob("*.json"):
        if path.name != "lin_sep-s1.json":
            path.unlink()
    results = json.loads(merge_results(out).read_text())
    assert list(results["data"]) == ["lin_sep"] and results["data"]["lin_sep"]["seeds"] == [1]
    assert results["scale"] == {"epochs": Scale.smoke().epochs}


def test_a_merge_with_missing_cells_names_them(smoke, tmp_path):
    out = tmp_path / "grid"
    shutil.copytree(smoke, out)
    (out / "cells" / "adult-full-s1.json").unlink()
    (out / "cells" / "lin_sep-vanilla-s0.json").unlink()
    names = "cells: adult-full-s1, lin_sep-vanilla-s0; train them"
    with pytest.raises(FileNotFoundError, match=names):
        merge_results(out)
    (out / "evaluations" / "adult-s0.json").write_text("[1, 2]")
    fix = "run its part of the grid again with --force, or delete it, then merge"
    with pytest.raises(ValueError, match=f"adult-s0.json holds a list, not a result: {fix}"):
        merge_results(out)


def test_the_shipped_results_are_what_the_command_makes_of_its_shipped_files(
    tmp_path, monkeypatch, capsys
):
    # The whole grid, its ablation, IG and knob study, every variant and the two-dimensional
    # chapter's figure data, run over a copy of the shipped results: every cell and evaluation
    # is reused (none is trained or evaluated again, which would take a lock) and every merged
    # file is the shipped one.
    shipped = REPO / "data" / "reproduction"
    out = tmp_path / "reproduction"
    shutil.copytree(shipped, out, ignore=shutil.ignore_patterns("results.json", "two_d.json"))

    def recomputed(path, what):
        raise AssertionError(f"{what} was not reused")

    monkeypatch.setattr("cfbook.paper.grid.locked", recomputed)
    common = ["--out", str(out), "--device", "cpu"]
    assert main(["--objectives", "energy,adversarial", "--ig", "--knobs", *common]) == 0
    assert main([arg for name in VARIANTS for arg in ("--variant", name)] + common) == 0
    merged = ["results.json", "knobs.json", *(f"variants/{v}/results.json" for v in VARIANTS)]
    for name in merged:
        assert json.loads((out / name).read_text()) == json.loads((shipped / name).read_text())
    # The figures draw the shipped seed-0 models of the synthetic sets.
    assert main(["--merge-only", "--two-d", *common]) == 0
    made, kept = (json.loads((root / "two_d.json").read_text()) for root in (out, shipped))
    assert_same_figure_data(made, kept)
    # Any other cell's weights are not shipped: the command says so and how to train them,
    # without a traceback.
    (out / "cells" / "lin_sep-vanilla-s0.pt").unlink()
    capsys.readouterr()
    assert main(["--merge-only", "--two-d", *common]) == 1
    assert "lin_sep-vanilla-s0.pt is missing: the grid ships its cells' results and the " in (
        capsys.readouterr().err
    )


def assert_same_figure_data(made: Any, kept: Any, where: str = "") -> None:
    """``two_d.json`` as shipped, but for its seconds. On the processor that trained the
    shipped models (AMD EPYC) it is the same to the bit; elsewhere a number may move by one unit
    of its rounding (to 2 or 3 digits): weights perturbed by 1e-7 moved 2 numbers so and changed
    no search path's length and no validity."""
    if isinstance(kept, dict):
        assert made.keys() == kept.keys(), where
        for key in kept.keys() - {"seconds"}:
            assert_same_figure_data(made[key], kept[key], f"{where}/{key}")
    elif isinstance(kept, list):
        assert len(made) == len(kept), where
        for a, b in zip(made, kept, strict=True):
            assert_same_figure_data(a, b, where)
    elif isinstance(kept, float):
        assert made == pytest.approx(kept, abs=0.0101), where
    else:
        assert made == kept, where


@pytest.mark.parametrize(
    ("key", "saved", "means"),
    [
        # Saved without the field, or with "mutability" (the protected experiment's recorded
        # grids): 0 and 0 on a synthetic set, the main grid's weights elsewhere.
        ("lin_sep", None, "zeros"),
        ("lin_sep", "mutability", "zeros"),
        ("adult", None, "main"),
        ("adult", "mutability", "main"),
    ],
)
def test_an_old_stamp_means_the_weights_it_was_trained_with(tmp_path, key, saved, means):
    # A variant's evaluation saved before today's names is reused by a variant that trains with
    # the weights it meant, and refused by one that does not.
    def evaluate_over_an_old_stamp(lambdas: str) -> dict:
        variant = Variant("some", (key,), groups="none", protected_lambdas=lambdas)
        config = evaluation_config(key, 0, Scale.smoke(), variant)
        del config["variant"]["data_seed"]  # saved before the data draw was a setting
        if saved is None:
            del config["variant"]["protected_lambdas"]
        else:
            config["variant"]["protected_lambdas"] = saved
        path = tmp_path / lambdas / "evaluations" / f"{key}-s0.json"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps({"config": config, "seconds": 1.0}))
        cpu, out = torch.device("cpu"), path.parents[1]
        return run_evaluation(key, 0, Scale.smoke(), out, device=cpu, variant=variant)

    assert evaluate_over_an_old_stamp(means)["seconds"] == 1.0
    with pytest.raises(ValueError, match="made with other settings"):
        evaluate_over_an_old_stamp("defaults")


def test_accuracies_under_attack_are_averaged_per_epsilon_over_the_seeds():
    one = {"epsilons": [0.0, 0.1], "clean": 0.9, "fgsm": [0.9, 0.5], "pgd": [0.9, 0.4]}
    two = {"epsilons": [0.0, 0.1], "clean": 0.8, "fgsm": [0.8, 0.3], "pgd": [0.8, 0.2]}
    assert mean_accuracies([one]) == one  # a single seed
    both = mean_accuracies([one, two])
    assert both["epsilons"] == [0.0, 0.1] and both["clean"] == pytest.approx(0.85)
    assert both["fgsm"] == pytest.approx([0.85, 0.4]) and both["pgd"] == pytest.approx([0.85, 0.3])


def test_a_seeds_level_is_the_mean_and_sd_of_its_runs_with_a_value():
    # Validity per seed: the mean over the runs that have one, with the runs' SD (the scale of
    # the paper's SE): [1, 0, 1] has SD sqrt(1/3). One run has no SD, none no mean.
    level = _level([1.0, 0.0, None, 1.0])
    assert level["mean"] == pytest.approx(2 / 3) and level["runs"] == 3
    assert level["se"] == pytest.approx(3**-0.5)
    assert _level([0.5]) == {"mean": 0.5, "se": None, "runs": 1}
    assert _level([None]) == {"mean": None, "se": None, "runs": 0}


def test_agreement_follows_the_stated_rule():
    ours = {"reduction": 10.0, "se": 3.0, "significant": True}
    # |10 - 18| = 8 against 2.58 * sqrt(3^2 + 4^2) = 12.9: close; 10 vs 25: 15 > 12.9.
    assert reduction_agrees(ours, 18.0, 4.0, True)
    assert not reduction_agrees(ours, 25.0, 4.0, True)
    assert not reduction_agrees(ours, 18.0, 4.0, False)  # significance must match
    assert reduction_agrees(ours, 17.7, None, None)  # 7.7 <= 2.58 * 3 = 7.74, no SE published
    assert not reduction_agrees(ours, 17.8, None, None)
    assert reduction_agrees(None, 18.0, 4.0, True) is None
    # A level: 0.9 against 0.95 with SE 0.02: 0.05 <= 2.58 * 0.02 + 0.005 = 0.0566.
    assert level_agrees(0.9, 0.02, 0.95) and not level_agrees(0.9, 0.015, 0.95)
    assert level_agrees(None, None, 0.95) is None
    assert count([True, None, False, True]) == (2, 3)
    assert binomial_se(0.5, 100) == pytest.approx(0.05)


def test_agreement_at_the_rules_edges():
    # Both SEs count squared: |10 - 22| = 12 <= 2.58 * 5 = 12.9.
    assert reduction_agrees({"reduction": 10.0, "se": 3.0, "significant": True}, 22.0, 4.0, True)
    # The rule's "<=": equal values agree with no SE on either side, and a level exactly half a
    # unit of the paper's last digit away agrees.
    exact = {"reduction": 10.0, "se": 0.0, "significant": True}
    assert reduction_agrees(exact, 10.0) and not reduction_agrees(exact, 10.5)
    assert level_agrees(0.0, 0.0, 0.005) and not level_agrees(0.0, 0.0, 0.0051)
    # A missing or NaN SE of ours counts as 0, not as a wider interval.
    for se in (None, math.nan):
        ours = {"reduction": 10.0, "se": se, "significant": True}
        assert reduction_agrees(ours, 10.0) and not reduction_agrees(ours, 11.0)
    # A seed without a reduction (no valid counterfactual) has nothing to compare.
    assert reduction_agrees({"reduction": math.nan, "se": 1.0, "significant": False}, 0.0) is None
    # One point: the SE of a share is sqrt(p (1 - p)); none: no division by zero.
    assert binomial_se(0.5, 1) == binomial_se(0.5, 0) == 0.5


def test_the_slurm_script_prints_its_three_jobs():
    out = subprocess.run(
        ["bash", str(REPO / "scripts" / "slurm-paper.sh"), "--dry-run", "--data", "adult"],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin", "PYTHON": sys.executable},
        timeout=120,
    ).stdout
    assert out.startswith("# 9 training tasks, 3 evaluation tasks, one merge")
    assert "--array=0-8" in out and "--array=0-2" in out and "--train-task" in out
    assert "afterok" in out and "--merge-only" in out


def test_the_two_dimensional_paths_end_where_the_search_stopped(smoke):
    from cfbook.paper.grid import _trained
    from cfbook.paper.settings import load_experiment_data
    from cfbook.paper.two_d import SEARCH, two_d_data

    d = two_d_data("lin_sep", smoke, torch.device("cpu"))
    data = load_experiment_data("lin_sep")
    cells = smoke / "cells"
    models = _trained("lin_sep", 0, ("vanilla", "full", "full_protected"), cells, data, "cpu")
    assert [p["title"] for p in d["panels"]][2] == "baseline, x1 protected"
    for panel in d["panels"]:
        starts = torch.tensor([path[0] for path in panel["paths"]])
        ends = torch.tensor([path[-1] for path in panel["paths"]])
        model = models[panel["model"]]
        target = 1 - model(starts).argmax(1)
        mutability = ["none", "both"] if panel["protected"] else None
        found = NativeGenerator(**SEARCH.settings() | {"compile": False}).generate(
            model, starts, target, domain=data.domain, mutability=mutability
        )
        # Both ends and starts are stored to 2 decimals: the search restarted from a rounded
        # start ends within a few hundredths of the stored end.
        assert torch.allclose(ends, found.counterfactual, atol=0.03)
        if panel["protected"]:
            assert all(len({p[0] for p in path}) == 1 for path in panel["paths"])
            assert panel["moved_x1"] is False
    assert len(d["panels"][0]["prob"]) == 40 and len(d["train_x"]) == 150


def test_the_knob_study_moves_one_setting_at_a_time_from_the_papers():
    from cfbook.paper.knobs import KNOBS, knob_cells

    cells = knob_cells(("moons",))
    assert len(cells) == 2 * sum(len(v) for v in KNOBS.values())  # two seeds
    by_name = {cell.name: (knob, value) for knob, value, cell in cells}
    # The paper's value of each knob is the grid's own CT cell.
    assert {k for k, v in by_name.items() if v in {("lambda_div", 0.5), ("step_size", 0.1)}} == {
        "moons-full-s0",
        "moons-full-s1",
    }
    paper = cell_config(Cell(0, "moons", "full", 0), Scale.paper())
    low_div = cell_config(Cell(0, "moons", "full", 0, (("lambda_div", 0.1),)), Scale.paper())
    assert low_div["lambdas"] == [1.0, 0.1, 0.25, 0.25] and paper["lambdas"][1] == 0.5
    few = cell_config(Cell(0, "moons", "full", 0, (("nce", 100),)), Scale.paper())
    assert few["nce"] == 100 and few["search"] == paper["search"]
    step = cell_config(Cell(0, "moons", "full", 0, (("step_size", 1.0),)), Scale.paper())
    assert step["search"]["step_size"] == 1.0 and step["nce"] == paper["nce"]
    assert "moons-full-nce100-s1" in by_name and "moons-full-step_size1-s0" in by_name


def test_a_shipped_result_is_read_or_reported_missing_or_damaged(tmp_path):
    from cfbook.paper.merge import read_result

    (tmp_path / "reproduction").mkdir()
    assert read_result(tmp_path, "results.json") is None
    (tmp_path / "reproduction" / "knobs.json").write_text('{"data": {}}')
    assert read_result(tmp_path, "knobs.json") == {"data": {}}
    (tmp_path / "reproduction" / "two_d.json").write_text("{broken")
    with pytest.raises(
        ValueError, match="two_d.json is not valid JSON.*python -m cfbook.commands.paper"
    ):
        read_result(tmp_path, "two_d.json")


def test_mnist_is_resampled_per_class_with_replacement_in_file_order():
    from cfbook.paper.settings import paper_mnist_rows

    labels = torch.arange(600) % 3  # 200 rows per class, classes interleaved
    train, held = paper_mnist_rows(labels, per_class=110, held_per_class=10)
    rows = torch.cat([train, held])
    assert train.numel() == 300 and held.numel() == 30
    assert [int((labels[rows] == c).sum()) for c in range(3)] == [110] * 3
    assert [int((labels[held] == c).sum()) for c in range(3)] == [10] * 3
    assert bool((train[1:] >= train[:-1]).all())  # the file's order, not a permutation
    assert rows.unique().numel() < rows.numel()  # with replacement: duplicates
    # Drawn from its own seeded generator (42 unless given), whatever the global one's state.
    torch.manual_seed(0)
    again = paper_mnist_rows(labels, per_class=110, held_per_class=10, seed=42)
    assert all(torch.equal(a, b) for a, b in zip(again, (train, held), strict=True))
    other = paper_mnist_rows(labels, per_class=110, held_per_class=10, seed=43)
    assert not torch.equal(other[0], train)


def test_a_variant_runs_beside_the_paper_setup_into_its_own_folder(smoke):
    # An evaluation-only variant reuses the paper setup's models; one that changes training
    # trains its own cells into variants/<name>, leaving the paper setup's files alone.
    before = {p.name: p.stat().st_mtime_ns for p in (smoke / "cells").iterdir()}
    args = ["--smoke", "--data", "adult,lin_sep", "--out", str(smoke)]
    assert main([*args, "--variant", "no_decoding", "--variant", "step_0.25"]) == 0
    assert {p.name: p.stat().st_mtime_ns for p in (smoke / "cells").iterdir()} == before
    plain = json.loads((smoke / "evaluations" / "adult-s0.json").read_text())
    undecoded = json.loads((smoke / "variants/no_decoding/evaluations/adult-s0.json").read_text())
    assert (
        plain["unconstrained"]["categorical"] and undecoded["unconstrained"]["categorical"] is None
    )
    assert undecoded["config"]["variant"]["groups"] == "none"
    assert not (smoke / "variants/no_decoding/cells").exists()
    assert not (smoke / "variants/step_0.25/evaluations/adult-s0.json").exists()  # synthetic only
    cell = json.loads((smoke / "variants/step_0.25/cells/lin_sep-full-s0.json").read_text())
    assert (
        cell["config"]["search"]["step_size"] == 0.25 and cell["config"]["variant"] == "step_0.25"
    )
    stepped = json.loads((smoke / "variants/step_0.25/evaluations/lin_sep-s0.json").read_text())
    assert stepped["unconstrained"]["protocol"]["step_size"] == 0.25
    assert (smoke / "variants/step_0.25/results.json").is_file()


def test_a_knob_study_of_another_paper_setup_says_so():
    from cfbook.book.figures.ablation import knobs_setup_text

    # A study whose step values lack the paper's step (0.1) was made with another setup.
    assert knobs_setup_text({"knobs": {"step_size": [0.05, 0.25, 1.0]}})
    assert not knobs_setup_text({"knobs": {"step_size": [0.05, 0.1, 0.25, 1.0]}})


def test_a_variant_retrains_exactly_when_it_changes_training():
    from cfbook.paper.settings import VARIANTS

    # Data, step and batch order change training; the test-time groups and their gradient
    # change only the evaluation, which then searches the paper setup's own models.
    assert {name: v.retrains for name, v in VARIANTS.items()} == {
        "sklearn_data": True,
        "step_0.25": True,
        "shuffled": True,
        "no_decoding": False,
        "own_groups": False,
        "straight_through": False,
        "zero_lambdas_protected": True,
        "default_lambdas_protected": True,
        "data_draw_43": True,
        "data_draw_44": True,
    }


def test_the_zero_lambdas_variant_changes_only_the_protected_cells_lambdas():
    from cfbook.paper.settings import VARIANTS

    variant, scale = VARIANTS["zero_lambdas_protected"], Scale.paper()
    for key, reg in (("lin_sep", 0.01), ("moons", 0.25)):
        paper = {t: cell_config(Cell(0, key, t, 0), scale) for t in TRAININGS}
        changed = {t: cell_config(Cell(0, key, t, 0), scale, variant) for t in TRAININGS}
        # The grid: the main grid's ridge and adversarial weight with and without protection;
        # the variant: the committed mutability grids' 0 and 0 when protected.
        assert paper["full_protected"]["lambdas"] == paper["full"]["lambdas"] == [1, 0.5, reg, 0.25]
        assert changed["full_protected"]["lambdas"] == [1.0, 0.5, 0.0, 0.0]
        for t in TRAININGS:
            assert changed[t].pop("variant") == "zero_lambdas_protected"
            assert changed[t].pop("generator") == "mlj"  # named by every variant that retrains
            if t != "full_protected":
                assert changed[t] == paper[t]


def test_a_data_draw_variant_draws_other_points_of_the_same_distribution():
    from cfbook.paper.settings import VARIANTS

    variant = VARIANTS["data_draw_43"]
    config = cell_config(Cell(0, "lin_sep", "full", 0), Scale.paper(), variant)
    assert config["data_seed"] == 43 and config["variant"] == "data_draw_43"
    # The grid's cells name no draw: they keep the stamps they were made with.
    assert "data_seed" not in cell_config(Cell(0, "lin_sep", "full", 0), Scale.paper())
    grid, drawn = (load_experiment_data("lin_sep", variant=v) for v in (PAPER_SETUP, variant))
    assert grid.x.shape == drawn.x.shape and not torch.equal(grid.x, drawn.x)
    # MLJBase's blobs keep the paper's centres whatever the draw: the class means stay close.
    for c in (0, 1):
        assert torch.allclose(grid.x[grid.y == c].mean(0), drawn.x[drawn.y == c].mean(0), atol=0.1)


def test_the_default_lambdas_variant_trains_the_protected_cells_with_ct_experiments_defaults():
    from cfbook.paper.settings import VARIANTS

    variant, scale = VARIANTS["default_lambdas_protected"], Scale.paper()
    for key in ("lin_sep", "circles"):
        paper = {t: cell_config(Cell(0, key, t, 0), scale) for t in TRAININGS}
        changed = {t: cell_config(Cell(0, key, t, 0), scale, variant) for t in TRAININGS}
        # TrainingParams' defaults: clf 1, div 0.5, reg_strength 0.1, adversarial 0.25.
        assert changed["full_protected"]["lambdas"] == [1.0, 0.5, 0.1, 0.25]
        for t in TRAININGS:
            assert changed[t].pop("variant") == "default_lambdas_protected"
            assert changed[t].pop("generator") == "mlj"
            if t != "full_protected":
                assert changed[t] == paper[t]


def test_the_variants_are_read_from_their_own_folders_and_unrun_ones_are_absent(tmp_path):
    from cfbook.paper.merge import read_variants

    variants = tmp_path / "reproduction" / "variants"
    (variants / "no_decoding").mkdir(parents=True)
    (variants / "no_decoding" / "results.json").write_text('{"data": {"adult": 1}}')
    (variants / "shuffled" / "cells").mkdir(parents=True)  # started, never merged
    (tmp_path / "reproduction" / "results.json").write_text('{"data": {}}')  # the paper setup's
    assert read_variants(tmp_path) == {"no_decoding": {"data": {"adult": 1}}}
    (variants / "shuffled" / "results.json").write_text("{broken")
    with pytest.raises(ValueError, match="variants/shuffled/results.json is not valid JSON"):
        read_variants(tmp_path)


def test_a_knob_point_is_evaluated_once_and_a_changed_one_refused(smoke, tmp_path, monkeypatch):
    # The knob study's evaluation of one trained cell: written once, then read back; a file made
    # with other settings is refused with the command that makes it again.
    from cfbook.paper import knobs

    cell = Cell(0, "lin_sep", "full", 0)
    (tmp_path / "cells").mkdir()
    shutil.copy(smoke / "cells" / f"{cell.name}.pt", tmp_path / "cells")
    data = load_experiment_data("lin_sep", torch.device("cpu"))
    first = knobs._evaluate(cell, Scale.smoke(), tmp_path, data, torch.device("cpu"))
    assert 0.0 < first["validity"] <= 1.0 and 0.0 <= first["accuracy"] <= 1.0
    assert first["ip"] is not None and first["ip"] > 0
    assert first["config"]["rounds"] == knobs.ROUNDS

    def no_search(*args, **kwargs):
        raise AssertionError("a saved knob point was evaluated again")

    monkeypatch.setattr(knobs, "paper_evaluate", no_search)
    assert knobs._evaluate(cell, Scale.smoke(), tmp_path, data, torch.device("cpu")) == first
    path = tmp_path / "knobs" / f"{cell.name}.json"
    path.write_text(json.dumps({**first, "config": {**first["config"], "rounds": 3}}))
    with pytest.raises(ValueError, match="other settings"):
        knobs._evaluate(cell, Scale.smoke(), tmp_path, data, torch.device("cpu"))
    path.write_text("{")
    # Only the knob study on that data set, never the whole grid (--knobs --force alone).
    with pytest.raises(ValueError, match=r"paper --merge-only --knobs --data lin_sep --force\)$"):
        knobs._evaluate(cell, Scale.smoke(), tmp_path, data, torch.device("cpu"))


def test_read_cell_logs_finds_one_training_by_data_set_and_seed(tmp_path: Path):
    from cfbook.paper.merge import read_cell_logs

    cells = tmp_path / "reproduction" / "cells"
    variant_cells = tmp_path / "reproduction" / "variants" / "v" / "cells"
    for folder, names in (
        (cells, ("lin_sep-full_protected-s0", "lin_sep-full-s0", "adult-full_protected-s12")),
        (variant_cells, ("lin_sep-full_protected-s2",)),
    ):
        folder.mkdir(parents=True)
        for name in names:
            content = {"config": {}, "meta": {"lambdas": [name]}, "log": [{"epoch": 1}]}
            (folder / f"{name}.json").write_text(json.dumps(content))
    found = read_cell_logs(tmp_path, "full_protected")
    assert {k: sorted(v) for k, v in found.items()} == {"adult": [12], "lin_sep": [0]}
    assert found["lin_sep"][0]["meta"]["lambdas"] == ["lin_sep-full_protected-s0"]
    assert list(read_cell_logs(tmp_path, "full")) == ["lin_sep"]
    assert {k: sorted(v) for k, v in read_cell_logs(tmp_path, "full_protected", "v").items()} == {
        "lin_sep": [2]
    }
    assert read_cell_logs(tmp_path, "energy") == {}


def test_read_ridged_takes_the_grid_and_each_shipped_weighting_with_its_cells(tmp_path: Path):
    from cfbook.book.figures.ridge import GRID, RIDGED_VARIANTS, WITHOUT, read_ridged

    (defaults,) = RIDGED_VARIANTS.values()
    for folder in ("cells", f"variants/{WITHOUT}/cells", f"variants/{defaults}/cells"):
        path = tmp_path / "reproduction" / folder
        path.mkdir(parents=True)
        content = {"meta": {"lambdas": [folder]}, "log": []}
        (path / "moons-full_protected-s1.json").write_text(json.dumps(content))
    grid_results = {"data": {}}
    merged = {WITHOUT: {"data": {}}, defaults: {"data": {}}, "shuffled": {"data": {}}}
    without, without_results, found = read_ridged(tmp_path, grid_results, merged)
    assert without["moons"][1]["meta"]["lambdas"] == [f"variants/{WITHOUT}/cells"]
    assert without_results is merged[WITHOUT]
    assert list(found) == [GRID, *RIDGED_VARIANTS]
    logs, results = found[GRID]
    assert logs["moons"][1]["meta"]["lambdas"] == ["cells"] and results is grid_results
    logs, results = found["CTExperiments' defaults"]
    assert logs["moons"][1]["meta"]["lambdas"] == [f"variants/{defaults}/cells"]
    assert results is merged[defaults]
    # A weighting merged but without cells, or with cells but not merged, is left out; without
    # the variant that trains without the ridge there is nothing to compare.
    assert list(read_ridged(tmp_path, grid_results, {WITHOUT: {"data": {}}})[2]) == [GRID]
    assert read_ridged(tmp_path, grid_results, {defaults: {"data": {}}}) is None
    assert read_ridged(tmp_path / "elsewhere", grid_results, merged) is None


@pytest.mark.parametrize(
    ("data", "scale", "compiled"),
    [
        ("mnist", Scale.paper(), True),
        ("adult", Scale.paper(), True),
        ("moons", Scale.paper(), False),
        ("mnist", Scale.smoke(), False),
    ],
)
def test_the_grid_compiles_the_searches_of_mnist_and_adult_at_the_papers_scale(
    monkeypatch, tmp_path, data, scale, compiled
):
    """The shipped MNIST and Adult cells were searched compiled, the others eagerly; a smoke
    cell's few steps never repay a compile."""

    class Made(Exception):
        pass

    def made(**kwargs):
        raise Made(kwargs["compile"])

    monkeypatch.setattr(grid, "NativeGenerator", made)
    fake = types.SimpleNamespace(x=torch.zeros(4, 3), y=torch.tensor([0, 1, 0, 1]))
    cell = next(c for c in grid_cells(scale, [data]) if c.training == "full")
    with pytest.raises(Made) as found:
        run_cell(cell, scale, tmp_path, device=torch.device("cpu"), data=fake)
    assert found.value.args == (compiled,)
