"""``python -m cfbook.commands.paper``: which cells, evaluations and extras a command line runs, in
which order, where, with which settings, and what it prints; on stand-ins for the grid's parts
(test_paper_grid.py runs the real ones at smoke sizes and over the shipped results)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cfbook.commands import paper
from cfbook.paper.grid import Scale, grid_cells
from cfbook.paper.knobs import KNOB_DATA
from cfbook.paper.settings import EXPERIMENTS, VARIANTS

DEVICE = "the device"


class Grid:
    """Stand-ins for what the command calls; ``calls`` lists them in order."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
        self.calls: list[tuple] = []
        self.data_dir = tmp_path / "data"
        self.fail: set[str] = set()  # names of cells and "evaluation key:seed" that raise
        self.devices: list[str | None] = []
        for name in ("run_cell", "run_evaluation", "run_ablation", "run_ig", "merge_results"):
            monkeypatch.setattr(paper, name, getattr(self, name))
        monkeypatch.setattr(paper, "write_two_d", self.write_two_d)
        monkeypatch.setattr(paper, "run_knobs", self.run_knobs)
        monkeypatch.setattr(paper, "load_experiment_data", self.load)
        monkeypatch.setattr(paper, "detect_device", self.detect_device)
        monkeypatch.setattr(paper, "find_data_dir", lambda: self.data_dir)

    def detect_device(self, prefer, verbose=True):
        assert verbose is False
        self.devices.append(prefer)
        return DEVICE

    def load(self, key, device, variant=None):
        assert device == DEVICE
        self.calls.append(("load", key) + ((variant.name,) if variant else ()))
        return f"{key} data"

    def run_cell(self, cell, scale, out, *, device, data, force=False, variant=None):
        assert device == DEVICE and data == f"{cell.data} data"
        self.calls.append(("cell", cell.index, scale, out, force, variant and variant.name))
        if cell.name in self.fail:
            raise ValueError(f"{cell.name} is broken")
        return {"seconds": 12.4, "test_accuracy": 0.9876}

    def _evaluation(self, what, key, seed, scale, out, device, data, force, **extra):
        assert device == DEVICE and data == f"{key} data"
        self.calls.append((what, key, seed, scale, out, force, *extra.values()))
        if f"{what} {key}:{seed}" in self.fail:
            raise FileNotFoundError(f"{key}:{seed} has no cells")
        return {"seconds": 3.6}

    def run_evaluation(self, key, seed, scale, out, *, device, data, force=False, **extra):
        extra = {k: v.name if k == "variant" else v for k, v in extra.items()}
        return self._evaluation("evaluation", key, seed, scale, out, device, data, force, **extra)

    def run_ablation(self, key, seed, scale, out, *, device, data, force=False):
        return self._evaluation("ablation", key, seed, scale, out, device, data, force)

    def run_ig(self, key, seed, scale, out, *, device, data, force=False):
        return self._evaluation("ig", key, seed, scale, out, device, data, force)

    def merge_results(self, out, cells=None):
        self.calls.append(("merge", out, cells))
        return out / "results.json"

    def write_two_d(self, out, device):
        assert device == DEVICE
        self.calls.append(("two_d", out))
        if "two_d" in self.fail:
            raise FileNotFoundError("lin_sep-vanilla-s0.pt is missing")
        return out / "two_d.json"

    def run_knobs(self, out, device, data, force=False):
        assert device == DEVICE
        self.calls.append(("knobs", out, data) + (("force",) if force else ()))
        return out / "knobs.json"

    def kinds(self) -> list[str]:
        return [c[0] for c in self.calls]


@pytest.fixture
def grid(monkeypatch, tmp_path) -> Grid:
    return Grid(monkeypatch, tmp_path)


def test_the_whole_grid_by_default_cells_then_evaluations_then_the_merge(grid):
    assert paper.main([]) == 0
    out = grid.data_dir / "reproduction"
    scale = Scale.paper(3)
    cells = grid_cells(scale)
    assert [c for c in grid.calls if c[0] == "cell"] == [
        ("cell", c.index, scale, out, False, None) for c in cells
    ]
    evaluations = [c for c in grid.calls if c[0] == "evaluation"]
    assert evaluations == [
        ("evaluation", key, seed, scale, out, False) for key in EXPERIMENTS for seed in range(3)
    ]
    assert grid.calls[-1] == ("merge", out, None)
    assert grid.kinds().index("evaluation") > max(
        i for i, k in enumerate(grid.kinds()) if k == "cell"
    )
    # Each data set is loaded once, when first needed.
    assert [c[1] for c in grid.calls if c[0] == "load"] == list(EXPERIMENTS)
    assert grid.devices == [None]


def test_smoke_sizes_seeds_and_data_sets_are_the_command_lines(grid, tmp_path):
    out = tmp_path / "elsewhere"
    args = ["--smoke", "--seeds", "1", "--data", "adult,lin_sep", "--out", str(out), "--force"]
    assert paper.main([*args, "--device", "cpu"]) == 0
    scale = Scale.smoke(1)
    cells = grid_cells(scale, ["adult", "lin_sep"])
    assert [c for c in grid.calls if c[0] == "cell"] == [
        ("cell", c.index, scale, out, True, None) for c in cells
    ]
    assert ("evaluation", "adult", 0, scale, out, True) in grid.calls
    assert grid.devices == ["cpu"]
    grid.calls.clear()
    assert paper.main(["--smoke", "--data", "moons", "--no-merge"]) == 0
    smoke = grid.data_dir / "reproduction-smoke"
    assert {c[3] for c in grid.calls if c[0] == "cell"} == {smoke}
    assert {c[2] for c in grid.calls if c[0] == "cell"} == {Scale.smoke(2)}
    assert "merge" not in grid.kinds()


def test_chosen_cells_train_alone_and_an_unknown_one_is_refused(grid, capsys):
    assert paper.main(["--cell", "4", "--cell", "90"]) == 0
    assert [c[1] for c in grid.calls if c[0] == "cell"] == [4, 90]  # 90: an ablation cell
    assert set(grid.kinds()) == {"load", "cell"}  # no evaluation, no merge
    grid.calls.clear()
    assert paper.main(["--cell", "4", "--cell", "999"]) == 2
    assert capsys.readouterr().err == "error: no cell [999] (cells are 0-134)\n"
    assert grid.calls == []


def test_chosen_evaluations_run_alone_and_a_malformed_one_is_refused(grid):
    assert paper.main(["--evaluate", "moons:1", "--evaluate", "adult:0", "--ig"]) == 0
    runs = [(c[0], c[1], c[2]) for c in grid.calls if c[0] not in {"load"}]
    assert runs == [
        ("evaluation", "moons", 1),
        ("ig", "moons", 1),
        ("evaluation", "adult", 0),
        ("ig", "adult", 0),
    ]
    with pytest.raises(
        SystemExit, match=r"--evaluate takes DATA:SEED, such as adult:0, not 'adult'"
    ):
        paper.main(["--evaluate", "adult"])
    with pytest.raises(SystemExit, match="not 'adult:one'"):
        paper.main(["--evaluate", "adult:one"])


def test_the_ablation_runs_after_each_evaluation_and_other_objectives_are_refused(grid, capsys):
    assert (
        paper.main(["--smoke", "--seeds", "1", "--data", "lin_sep", "--objectives", "energy"]) == 0
    )
    kinds = [k for k in grid.kinds() if k != "load"]
    assert kinds == ["cell"] * 5 + ["evaluation", "ablation", "merge"]
    grid.calls.clear()
    assert paper.main(["--objectives", "energy,ridge"]) == 2
    assert capsys.readouterr().err == "error: --objectives takes energy,adversarial\n"
    assert grid.calls == []


def test_the_lists_print_the_cells_and_evaluations_and_run_nothing(grid, capsys):
    assert paper.main(["--smoke", "--seeds", "1", "--data", "moons", "--list"]) == 0
    assert capsys.readouterr().out == (
        "  6  moons-vanilla-s0\n  7  moons-full-s0\n  8  moons-full_protected-s0\n"
    )
    assert paper.main(["--smoke", "--data", "moons,adult", "--list-evaluations"]) == 0
    assert capsys.readouterr().out == "moons:0\nmoons:1\nadult:0\nadult:1\n"
    assert grid.calls == []


def test_an_array_task_runs_one_cell_or_one_evaluation(grid):
    assert paper.main(["--train-task", "5"]) == 0
    assert [c[:2] for c in grid.calls if c[0] != "load"] == [("cell", 5)]
    grid.calls.clear()
    assert paper.main(["--eval-task", "4"]) == 0
    assert [c[:3] for c in grid.calls if c[0] != "load"] == [("evaluation", "circles", 1)]


def test_merge_only_merges_and_writes_the_figure_data_and_the_knob_study(grid, capsys):
    assert paper.main(["--merge-only", "--two-d", "--knobs"]) == 0
    out = grid.data_dir / "reproduction"
    assert grid.calls == [("merge", out, None), ("two_d", out), ("knobs", out, KNOB_DATA)]
    grid.calls.clear()
    assert paper.main(["--merge-only", "--knobs", "--data", "moons"]) == 0
    assert grid.calls[-1] == ("knobs", out, ("moons",))
    assert paper.main(["--merge-only", "--knobs", "--data", "moons", "--force"]) == 0
    assert grid.calls[-1] == ("knobs", out, ("moons",), "force")
    grid.fail.add("two_d")
    assert paper.main(["--merge-only", "--two-d", "--knobs"]) == 1
    assert capsys.readouterr().err == "error: lin_sep-vanilla-s0.pt is missing\n"
    assert grid.kinds()[-1] == "two_d"  # the knob study does not start after a failure


def test_a_failing_part_is_reported_and_the_rest_of_the_grid_goes_on_unmerged(grid, capsys):
    grid.fail |= {"lin_sep-full-s0", "evaluation lin_sep:0"}
    assert paper.main(["--smoke", "--seeds", "1", "--data", "lin_sep,moons"]) == 1
    assert [c[1] for c in grid.calls if c[0] == "cell"] == [0, 1, 2, 6, 7, 8]
    assert [c[1] for c in grid.calls if c[0] == "evaluation"] == ["lin_sep", "moons"]
    assert "merge" not in grid.kinds()
    err = capsys.readouterr().err
    assert err.startswith(
        "  cell 1 (lin_sep-full-s0) failed: lin_sep-full-s0 is broken\n"
        "  evaluation lin_sep:0 failed: lin_sep:0 has no cells\n"
        "2 part(s) of the grid failed, the rest is saved in "
    )
    assert err.endswith(
        ": cell 1 (lin_sep-full-s0); evaluation lin_sep:0. Fix them as each message says and "
        "run the same command again (finished cells and evaluations are reused); results.json "
        "was not merged.\n"
    )


def test_a_variant_runs_into_its_own_folder_with_its_own_models_or_the_papers(grid, capsys):
    out = grid.data_dir / "reproduction"
    retrains, evaluates = VARIANTS["shuffled"], VARIANTS["no_decoding"]
    assert retrains.retrains and not evaluates.retrains
    assert paper.main(["--smoke", "--seeds", "1", "--variant", "shuffled", "--data", "moons"]) == 0
    here = out.with_name("reproduction-smoke") / "variants" / "shuffled"
    scale = Scale.smoke(1)
    assert grid.calls == [
        ("load", "moons", "shuffled"),
        *[("cell", c.index, scale, here, False, "shuffled") for c in grid_cells(scale, ["moons"])],
        ("evaluation", "moons", 0, scale, here, False, "shuffled", None),
        ("merge", here, None),
    ]
    grid.calls.clear()
    argv = ["--variant", "no_decoding", "--seeds", "2", "--data", "adult,moons", "--device", "cpu"]
    assert paper.main(argv) == 0
    assert grid.devices == [None, "cpu"]
    here = out / "variants" / "no_decoding"
    scale = Scale.paper(2)
    # The paper setup's models, tested with the variant's search; moons is not the variant's.
    assert grid.calls == [
        ("load", "adult", "no_decoding"),
        ("evaluation", "adult", 0, scale, here, False, "no_decoding", out / "cells"),
        ("evaluation", "adult", 1, scale, here, False, "no_decoding", out / "cells"),
        ("merge", here, out / "cells"),
    ]


def test_an_unknown_variant_is_refused_with_the_known_ones(grid, capsys):
    with pytest.raises(SystemExit):
        paper.main(["--variant", "bigger_model"])
    err = capsys.readouterr().err
    assert "argument --variant: invalid choice: 'bigger_model' (choose from " in err
    assert all(name in err for name in VARIANTS) and grid.calls == []
