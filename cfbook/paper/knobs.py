"""How CT responds to its knobs: one setting at a time moved away from the paper's, on a small
data set (moons) and MNIST, two seeds each: the energy-differential weight λ_div, the adversarial
weight λ_adv, the counterfactuals per epoch (nce, as a share of the paper's) and the search's
step. Each trained model is evaluated alone with a short run of the paper's protocol
(validity, IP) and on the test set (accuracy); the paper's own setting is the grid's CT cell."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import torch

from cfbook.atomic import atomic_write_text
from cfbook.evaluation.metrics import accuracy
from cfbook.evaluation.protocol import PaperProtocol, paper_evaluate
from cfbook.evaluation.statistics import mean_of
from cfbook.paper.grid import (
    Cell,
    Scale,
    _model,
    _reusable,
    cell_config,
    grid_cells,
    knob_rerun,
    missing_weights,
    run_cell,
)
from cfbook.paper.settings import (
    EXPERIMENTS,
    LAMBDA_ADV,
    LAMBDA_DIV,
    SEARCH,
    TEST_TAU,
    ExperimentData,
    load_experiment_data,
)

KNOB_DATA = ("moons", "mnist")
KNOB_SEEDS = (0, 1)
ROUNDS = 20  # rounds of the short evaluation per model
# Values per knob; the paper's value is the grid's CT cell (nce: shares of the paper's nce).
KNOBS = {
    "lambda_div": (0.1, LAMBDA_DIV, 2.0),
    "lambda_adv": (0.0, LAMBDA_ADV, 1.0),
    "nce": (0.1, 0.3, 1.0),
    "step_size": (0.05, SEARCH["step_size"], 0.25, 1.0),  # 0.25: the configs' unread lr
}
PAPER = {
    "lambda_div": LAMBDA_DIV,
    "lambda_adv": LAMBDA_ADV,
    "nce": 1.0,
    "step_size": SEARCH["step_size"],
}


def knob_cells(data: tuple[str, ...] = KNOB_DATA) -> list[tuple[str, float, Cell]]:
    """(knob, value, cell) for every point of the study; the paper's value is the grid's CT cell,
    with its number in the grid (the others have none: index 0)."""
    ct = {(c.data, c.seed): c for c in grid_cells(Scale.paper(), data) if c.training == "full"}
    out = []
    for key in data:
        for seed in KNOB_SEEDS:
            for knob, values in KNOBS.items():
                for value in values:
                    if value == PAPER[knob]:
                        out.append((knob, value, ct[key, seed]))
                        continue
                    if knob == "nce":
                        overrides = (("nce", round(value * EXPERIMENTS[key].nce)),)
                    else:
                        overrides = ((knob, value),)
                    out.append((knob, value, Cell(0, key, "full", seed, overrides)))
    return out


def _evaluate(
    cell: Cell,
    scale: Scale,
    out: Path,
    data: ExperimentData,
    device: torch.device,
    force: bool = False,
) -> dict[str, Any]:
    config = {"cell": cell_config(cell, scale), "rounds": ROUNDS}
    path = out / "knobs" / f"{cell.name}.json"
    saved = _reusable(path, config, force, knob_rerun(cell.data))
    if saved is not None:
        return saved
    weights = out / "cells" / f"{cell.name}.pt"
    if not weights.is_file():
        raise missing_weights(weights, f"{cell.rerun} --force")
    model = _model(data).to(device)
    model.load_state_dict(torch.load(weights, map_location=device, weights_only=True))
    model.eval()
    protocol = PaperProtocol(
        rounds=ROUNDS,
        individuals=EXPERIMENTS[cell.data].individuals,
        tau=TEST_TAU["none"],
        seed=cell.seed,
    )
    start = time.perf_counter()
    result = paper_evaluate({"ct": model}, data.x_test, data.y_test, protocol, domain=data.domain)
    rounds = result["per_round"]["ct"]
    saved = {
        "config": config,
        "seconds": time.perf_counter() - start,
        "validity": mean_of(rounds["validity"]),
        "ip": mean_of(rounds["ip"]),
        "accuracy": accuracy(model, data.x_test, data.y_test),
    }
    atomic_write_text(path, json.dumps(saved, indent=1))
    return saved


KNOB_MEASURES = ("validity", "ip", "accuracy")


def run_knobs(
    out: Path, device: torch.device, data: tuple[str, ...] = KNOB_DATA, force: bool = False
) -> Path:
    """Train (or reuse) and evaluate every point of the study, and write ``out/knobs.json``:
    per data set and knob, one row per value with the per-seed validity, IP and accuracy (the
    rows of data sets not run this time are kept from the file).
    ``force`` trains the study's own cells and evaluates every point again; the paper's points
    are the grid's CT cells, which only the grid retrains (``--cell N --force``)."""
    scale = Scale.paper()
    table: dict[str, Any] = {}
    loaded: dict[str, ExperimentData] = {}
    cells = knob_cells(data)
    for k, (knob, value, cell) in enumerate(cells, start=1):
        if cell.data not in loaded:
            loaded[cell.data] = load_experiment_data(cell.data, device)
        print(f"knob {k}/{len(cells)}: {cell.name}", flush=True)
        run_cell(
            cell,
            scale,
            out,
            device=device,
            data=loaded[cell.data],
            force=force and bool(cell.overrides),
            report=lambda _: None,
        )
        got = _evaluate(cell, scale, out, loaded[cell.data], device, force)
        points = table.setdefault(cell.data, {}).setdefault(knob, [])
        row = next((r for r in points if r["value"] == value), None)
        if row is None:
            row = {"value": value, **{m: [] for m in KNOB_MEASURES}}
            points.append(row)
        for measure in KNOB_MEASURES:
            row[measure].append(got[measure])
    path = out / "knobs.json"
    knobs = {k: list(v) for k, v in KNOBS.items()}
    table = {**_other_data_sets(path, knobs, data), **table}
    order = [*KNOB_DATA, *(k for k in table if k not in KNOB_DATA)]
    table = {key: table[key] for key in order if key in table}
    atomic_write_text(path, json.dumps({"knobs": knobs, "data": table}, indent=1))
    return path


def _other_data_sets(path: Path, knobs: dict[str, list], data: tuple[str, ...]) -> dict[str, Any]:
    """The rows of data sets other than ``data`` in an existing study file of the same knobs,
    so that a run of one data set keeps the others'."""
    try:
        saved = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(saved, dict) or saved.get("knobs") != knobs:
        return {}
    rows = saved.get("data")
    return {k: v for k, v in rows.items() if k not in data} if isinstance(rows, dict) else {}
