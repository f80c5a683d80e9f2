"""What the two-dimensional chapter draws, from the grid's trained models (seed 0): for each
synthetic data set, the decision regions of the baseline, of CT and of CT trained with the first
feature protected, a sample of the training data, and a dozen factuals with their search paths,
searched freely and with the first feature immutable. Written to ``two_d.json`` so that the
chapter renders without a model."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import torch

from cfbook.atomic import atomic_write_text
from cfbook.evaluation.metrics import is_valid, predict
from cfbook.evaluation.protocol import PaperProtocol
from cfbook.paper.grid import Scale, _trained
from cfbook.paper.settings import EXPERIMENTS, load_experiment_data
from cfbook.search.path import search_path

GRID = 40  # points per axis of the decision-region grid
FACTUALS = 12  # searched per panel, half from each predicted class
SHOWN = 150  # training points drawn
# The test-time search of the paper's protocol at one energy weight, short enough to draw.
SEARCH = PaperProtocol(tau=0.95).generator(lambda_energy=1.0)
# (panel, model, protected search)
PANELS = (
    ("baseline", "vanilla", False),
    ("CT", "full", False),
    ("baseline, x1 protected", "vanilla", True),
    ("CT trained with x1 protected", "full_protected", True),
)


def _round(t: torch.Tensor, digits: int = 3) -> list:
    """``t`` rounded to ``digits`` decimals, as nested lists of the decimals themselves: float32's
    nearest value to 0.123 prints as 0.12300000339746475, which doubled the file's size. Torch
    rounds (in float32, as the file always was) and Python only writes the decimal, so that no
    number moves at a half."""
    return _decimals(torch.round(t * 10**digits).div(10**digits).tolist(), digits)


def _decimals(values: list | float, digits: int) -> list | float:
    if isinstance(values, list):
        return [_decimals(v, digits) for v in values]
    return round(values, digits)


def two_d_data(key: str, out: Path, device: torch.device) -> dict[str, Any]:
    """The chapter's figure data for one synthetic data set."""
    data = load_experiment_data(key, device)
    models = _trained(key, 0, ("vanilla", "full", "full_protected"), out / "cells", data, device)
    low, high = data.x.amin(0), data.x.amax(0)
    pad = 0.1 * (high - low)
    axes = [
        torch.linspace(float(lo - p), float(hi + p), GRID)
        for lo, hi, p in zip(low, high, pad, strict=True)
    ]
    gx, gy = torch.meshgrid(*axes, indexing="xy")
    points = torch.stack([gx.flatten(), gy.flatten()], 1).to(device)
    rng = torch.Generator().manual_seed(0)
    shown = torch.randperm(data.x.shape[0], generator=rng)[:SHOWN].to(device)
    panels = []
    for title, name, protected in PANELS:
        model = models[name]
        with torch.no_grad():
            prob = model(points).softmax(1)[:, 1].reshape(GRID, GRID)
        pred = predict(model, data.x_test)
        rows = torch.cat([(pred == c).nonzero().flatten()[: FACTUALS // 2] for c in (0, 1)])
        target = 1 - pred[rows]
        mutability = ["none", "both"] if protected else None
        path = search_path(
            SEARCH, model, data.x_test[rows], target, domain=data.domain, mutability=mutability
        )
        valid = is_valid(model, path[-1], target)
        steps = (path[1:] != path[:-1]).any(2).sum(0)
        paths = [_round(path[: int(s) + 1, i], 2) for i, s in enumerate(steps)]
        length = (path[1:] - path[:-1]).abs().sum(2).sum(0)
        panels.append(
            {
                "title": title,
                "model": name,
                "protected": protected,
                "prob": _round(prob, 2),
                "paths": paths,
                "valid": valid.tolist(),
                "path_l1": _round(length),
                "moved_x1": bool((path[-1, :, 0] != path[0, :, 0]).any()),
            }
        )
    return {
        "key": key,
        "label": EXPERIMENTS[key].label,
        "axes": [_round(a) for a in axes],
        "train_x": _round(data.x[shown]),
        "train_y": data.y[shown].tolist(),
        "panels": panels,
    }


def write_two_d(out: Path, device: torch.device) -> Path:
    """``out/two_d.json`` for the four synthetic data sets."""
    start = time.perf_counter()
    keys = [k for k, e in EXPERIMENTS.items() if e.kind == "synthetic"]
    result = {
        "search": SEARCH.settings(),
        "scale": Scale.paper().epochs,
        "data": [two_d_data(k, out, device) for k in keys],
    }
    result["seconds"] = time.perf_counter() - start
    path = out / "two_d.json"
    atomic_write_text(path, json.dumps(result))
    return path
