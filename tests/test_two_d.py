"""cfbook.paper.two_d: what the two-dimensional chapter keeps of each panel's searches, from
hand-made search paths on the shipped seed-0 models of Linearly separable (the real searches
run in test_paper_grid.py)."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import torch
from conftest import REPO

from cfbook.book.figures.two_d import two_d_readings, two_d_table, two_d_text
from cfbook.evaluation.metrics import is_valid, predict
from cfbook.paper import two_d
from cfbook.paper.grid import _trained
from cfbook.paper.settings import load_experiment_data

CPU = torch.device("cpu")
TRAININGS = ("vanilla", "full", "full_protected")


def _cells(tmp_path: Path) -> Path:
    """The shipped seed-0 models of Linearly separable, copied: nothing here writes to data/."""
    out = tmp_path / "reproduction"
    (out / "cells").mkdir(parents=True)
    for training in TRAININGS:
        shutil.copy(
            REPO / "data" / "reproduction" / "cells" / f"lin_sep-{training}-s0.pt", out / "cells"
        )
    return out


def _decimals(values: list, digits: int) -> bool:
    """Whether every number in the nested list is stored with at most ``digits`` decimals."""
    if isinstance(values, list):
        return all(_decimals(v, digits) for v in values)
    return round(values, digits) == values and len(repr(values).split(".")[-1]) <= digits


def test_each_panel_keeps_its_paths_to_their_last_move_and_whether_x1_moved(tmp_path, monkeypatch):
    out = _cells(tmp_path)
    maxiter = two_d.SEARCH.maxiter
    calls = []

    def search_path(generator, model, x, target, *, domain, mutability):
        """Row 0 steps 0.01 up x2 every iteration and 0.5 along x1 at the last (first panel),
        at the first (second panel) or never (the protected panels); the others stay put."""
        calls.append((generator, model, x, target, domain, mutability))
        path = x.expand(maxiter + 1, *x.shape).clone()
        path[1:, 0, 1] += 0.01 * torch.arange(1, maxiter + 1)
        if len(calls) == 1:
            path[-1, 0, 0] += 0.5
        elif len(calls) == 2:
            path[1:, 0, 0] += 0.5
        return path

    monkeypatch.setattr(two_d, "search_path", search_path)
    result = two_d.two_d_data("lin_sep", out, CPU)

    data = load_experiment_data("lin_sep")
    models = _trained("lin_sep", 0, TRAININGS, out / "cells", data, CPU)
    assert [p["title"] for p in result["panels"]] == [p[0] for p in two_d.PANELS]
    for panel, call, (_, name, protected) in zip(
        result["panels"], calls, two_d.PANELS, strict=True
    ):
        model = models[name]
        pred = predict(model, data.x_test)
        rows = torch.cat([(pred == c).nonzero().flatten()[:6] for c in (0, 1)])
        generator, _, x, target, domain, mutability = call
        assert generator is two_d.SEARCH and domain == data.domain
        assert torch.equal(x, data.x_test[rows]) and torch.equal(target, 1 - pred[rows])
        assert mutability == (["none", "both"] if protected else None)
        assert (panel["model"], panel["protected"]) == (name, protected)

        first = panel["paths"][0]
        assert len(first) == maxiter + 1  # row 0 moved at every iteration
        assert first[0] == [round(v, 2) for v in data.x_test[rows[0]].tolist()]
        assert first[-1][1] == round(float(data.x_test[rows[0], 1]) + 0.01 * maxiter, 2)
        # The rows that never moved keep their factual alone, and no length.
        assert all(
            p == [[round(v, 2) for v in x[i].tolist()]] for i, p in enumerate(panel["paths"]) if i
        )
        assert panel["path_l1"][1:] == [0.0] * 11
        moved = 0.0 if protected else 0.5  # the first two panels' row 0 moves along x1 once
        assert abs(panel["path_l1"][0] - (0.01 * maxiter + moved)) < 2e-3
        assert panel["moved_x1"] is (not protected)
        # Validity: of the path's end, for the model searched.
        ends = x.clone()
        ends[0] += torch.tensor([moved, 0.01 * maxiter])
        assert panel["valid"] == is_valid(model, ends, target).tolist()
        # The decision regions: the target class's probability on the grid.
        assert len(panel["prob"]) == two_d.GRID and len(panel["prob"][0]) == two_d.GRID
        assert _decimals(panel["prob"], 2) and _decimals(panel["paths"], 2)
        assert _decimals(panel["path_l1"], 3)
    assert _decimals(result["axes"], 3) and _decimals(result["train_x"], 3)
    assert len(result["train_x"]) == len(result["train_y"]) == two_d.SHOWN


def test_the_figure_file_times_its_making(tmp_path, monkeypatch):
    monkeypatch.setattr(two_d, "two_d_data", lambda key, out, device: {"key": key})
    start = time.perf_counter()
    path = two_d.write_two_d(tmp_path, CPU)
    took = time.perf_counter() - start

    saved = json.loads(path.read_text())
    assert path == tmp_path / "two_d.json"
    assert [d["key"] for d in saved["data"]] == ["lin_sep", "circles", "moons", "over"]
    assert saved["search"] == two_d.SEARCH.settings() and saved["scale"] == 100
    assert 0 <= saved["seconds"] <= took


def test_the_chapter_text_and_table_are_written_from_the_shipped_paths():
    """The text names the data sets the readings pick, the table has a row per panel."""
    result = json.loads((REPO / "data" / "reproduction" / "two_d.json").read_text())
    readings = two_d_readings(result)
    table = two_d_table(result).splitlines()
    assert len(table) == 2 + sum(len(r.panels) for r in readings)
    text = two_d_text(result)
    further = [r.label for r in readings if r.ct_further]
    nearer = [r.label for r in readings if not r.ct_further]
    assert f"on {len(further)} of {len(readings)} data sets ({', '.join(further)})" in text
    assert f"nearer on {len(nearer)} ({', '.join(nearer)})" in text
    for r in readings:
        assert f"{r.label} {r.crossable[0]:.0%} against {r.crossable[1]:.0%}" in text
