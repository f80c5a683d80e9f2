"""Merge the grid's evaluation files into the tables the chapter shows (``results.json``).

Each seed trained its own models, as the paper trained one per objective, so each seed's CT is
compared with its baseline on its own 100 runs, as CT.jl's tables do (``compare_rounds``), and
never pooled with another seed's: the chapter sets each seed beside the paper's number
(``cfbook.paper.agreement``). The ablation and IG parts judge each seed the same way and also
keep the seeds' rounds pooled, for a summary figure and the medians set beside the paper's.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import torch

from cfbook.atomic import atomic_write_text
from cfbook.evaluation.attacks import ATTACKS
from cfbook.evaluation.measures import COST, compared_measures
from cfbook.evaluation.statistics import (
    compare_rounds_or_none,
    fragile_significance,
    mean_of,
    mean_se,
)
from cfbook.paper.files import read_json
from cfbook.paper.settings import EXPERIMENTS

# Measure -> (experiment, per-round key), the compared measures of the protocol
# (``cfbook.evaluation.measures``) with IP* at every length scale: IP and IP* without
# constraints, as in the paper's main table, the cost both with the protected features (the
# main table's) and without (appendix).
MEASURES = {
    **{
        m.key: ("protected" if m == COST else "unconstrained", m.key)
        for m in compared_measures(sensitivities=True)
    },
    "cost_unconstrained": ("unconstrained", "cost"),
}


def _pooled(evals: list[dict[str, Any]], experiment: str, model: str, key: str) -> list:
    return [v for e in evals for v in e[experiment]["per_round"][model][key]]


def mean_accuracies(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Accuracies under attack (``attack_accuracy``'s results), averaged over the seeds."""
    epsilons = runs[0]["epsilons"]
    return {
        "clean": mean_of([r["clean"] for r in runs]),
        "epsilons": epsilons,
        **{a: [mean_of([r[a][i] for r in runs]) for i in range(len(epsilons))] for a in ATTACKS},
    }


def _level(values: list[float | None]) -> dict[str, Any]:
    """A seed's level over its runs: the mean and the runs' standard deviation (the scale of the
    paper's SE), as ``mean`` and ``se``."""
    kept = [v for v in values if v is not None]
    stats = mean_se(kept)
    sd = stats["se"] * len(kept) ** 0.5 if stats["se"] is not None else None
    return {"mean": stats["mean"], "se": sd, "runs": stats["n"]}


def _compared(per_round: dict[str, Any], key: str) -> dict[str, Any] | None:
    """One seed's CT against its baseline on ``key``, and whether a single round decides its
    significance (``fragile``)."""
    ct, baseline = per_round["full"][key], per_round["vanilla"][key]
    result = compare_rounds_or_none(ct, baseline)
    if result is not None:
        result["fragile"] = fragile_significance(ct, baseline)
    return result


def _data_set(evals: list[dict[str, Any]], cells: list[dict[str, Any]]) -> dict[str, Any]:
    main = {
        name: {"per_seed": [_compared(e[experiment]["per_round"], key) for e in evals]}
        for name, (experiment, key) in MEASURES.items()
    }
    validity = {
        experiment: {
            m: [_level(e[experiment]["per_round"][m]["validity"]) for e in evals]
            for m in ("full", "vanilla")
        }
        for experiment in ("unconstrained", "protected")
    }
    robustness = {
        training: [e["robustness"][training] for e in evals]
        for training in ("vanilla", "full", "full_protected")
    }
    return {
        "seeds": [e["config"]["seed"] for e in evals],
        "rounds": [len(e["unconstrained"]["per_round"]["full"]["ip"]) for e in evals],
        "main": main,
        "validity": validity,
        "robustness": robustness,
        "training_seconds": sum(c["seconds"] for c in cells),
        "evaluation_seconds": sum(e["seconds"] for e in evals),
        "valid_at_training": {
            t: [
                mean_of([r["percent_valid"] for r in c["log"]])
                for e in evals
                for c in cells
                if c["config"] == e["config"]["cells"][t]
            ]
            for t in ("full", "full_protected")
        },
        # How large CT's adversarial term was in training: its mean over epochs, per seed.
        "adv_loss_at_training": [
            mean_of([r["adv_loss"] for r in c["log"]])
            for e in evals
            for c in cells
            if c["config"] == e["config"]["cells"]["full"]
        ],
    }


ABLATION_MEASURES = tuple(m.key for m in compared_measures())


def _ablation(evals: list[dict[str, Any]]) -> dict[str, Any]:
    """Each objective against the baseline in the ablation's shared rounds, each seed's models
    on their own (``per_seed``, the unit of its verdicts: the seeds' rounds are not pooled into
    one comparison, which would mix the spread between models into that of the rounds)."""
    out: dict[str, Any] = {"seeds": [e["config"]["seed"] for e in evals]}
    for objective in ("full", "energy", "adversarial"):
        per_seed = {
            key: [
                compare_rounds_or_none(
                    *(e["unconstrained"]["per_round"][m][key] for m in (objective, "vanilla"))
                )
                for e in evals
            ]
            for key in ABLATION_MEASURES
        }
        validity = mean_of(_pooled(evals, "unconstrained", objective, "validity"))
        out[objective] = {"per_seed": per_seed, "validity": validity}
    out["vanilla"] = {"validity": mean_of(_pooled(evals, "unconstrained", "vanilla", "validity"))}
    for objective in ("energy", "adversarial"):
        runs = [e["robustness"][objective] for e in evals]
        out[objective]["robustness"] = mean_accuracies(runs)
        out[objective]["robustness_per_seed"] = runs
    return out


def _ig_stats(ct: list[float], bl: list[float]) -> dict[str, Any]:
    """Medians of per-round IG sensitivities and the 0.5-99.5 % percentile interval of the
    per-round differences CT - BL: 99 %, the level of every other table (the paper's IG table
    gives 95 % intervals)."""
    diff = torch.tensor(ct, dtype=torch.float64) - torch.tensor(bl, dtype=torch.float64)
    low, high = torch.quantile(diff, torch.tensor([0.005, 0.995], dtype=torch.float64))
    return {
        "ct_median": float(torch.tensor(ct).median()),
        "bl_median": float(torch.tensor(bl).median()),
        "diff_low": float(low),
        "diff_high": float(high),
        "rounds": len(ct),
    }


def _ig(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """IG sensitivity to the protected features, CT against the baseline: the seeds' rounds
    pooled, and each seed's models on their own (``per_seed``, the unit of its verdicts)."""
    sides = [(r["per_round"]["full_protected"], r["per_round"]["vanilla"]) for r in runs]
    ct = [v for seed_ct, _ in sides for v in seed_ct]
    bl = [v for _, seed_bl in sides for v in seed_bl]
    return {
        **_ig_stats(ct, bl),
        "seeds": [r["config"]["seed"] for r in runs],
        "per_seed": [_ig_stats(ct, bl) for ct, bl in sides],
    }


def _load_all(folder: Path) -> list[dict[str, Any]]:
    """Every result file in ``folder``; a corrupt one is refused, naming it."""
    fix = "run its part of the grid again with --force, or delete it, then merge"
    return [read_json(p, fix) or {} for p in sorted(folder.glob("*.json"))]


def _missing_cells(loaded: list[dict[str, Any]], cells: list[dict[str, Any]]) -> list[str]:
    """The trained cells that an evaluation tested but whose result file is not in cells/."""
    have = [c["config"] for c in cells]
    return [
        f"{e['config']['data']}-{training}-s{e['config']['seed']}"
        for e in loaded
        for training, config in e["config"]["cells"].items()
        if config not in have
    ]


def merge_results(out: Path, cells_dir: Path | None = None) -> Path:
    """Write ``out/results.json`` from ``out/evaluations`` and the cells they tested
    (``cells_dir``, default ``out/cells``); returns its path. A cell an evaluation tested that
    is not there is an error naming it."""
    evaluations = sorted((out / "evaluations").glob("*.json"))
    if not evaluations:
        raise FileNotFoundError(f"no evaluation in {out / 'evaluations'}: run the grid first")
    loaded = _load_all(out / "evaluations")
    cells_dir = cells_dir or out / "cells"
    cells = _load_all(cells_dir)
    missing = _missing_cells(loaded, cells)
    if missing:
        raise FileNotFoundError(
            f"the evaluations in {out / 'evaluations'} tested cells whose result is not in "
            f"{cells_dir}: {', '.join(missing)}; train them (python -m cfbook.commands.paper "
            "--list gives their numbers, --cell N trains one) or copy their .json there, then merge"
        )
    tables = {}
    for key in EXPERIMENTS:
        evals = sorted(
            (e for e in loaded if e["config"]["data"] == key), key=lambda e: e["config"]["seed"]
        )
        if evals:
            # The cells these evaluations tested (not the ablation's or the knob study's).
            tested = [cfg for e in evals for cfg in e["config"]["cells"].values()]
            tables[key] = _data_set(evals, [c for c in cells if c["config"] in tested])
    extras: dict[str, dict[str, Any]] = {"ablation": {}, "ig": {}}
    for name, build in (("ablation", _ablation), ("ig", _ig)):
        files = _load_all(out / name)
        for key in EXPERIMENTS:
            mine = sorted(
                (f for f in files if f["config"]["data"] == key), key=lambda f: f["config"]["seed"]
            )
            if mine:
                extras[name][key] = {**build(mine), "seconds": sum(f["seconds"] for f in mine)}
    scale = {k: loaded[0]["config"]["cells"]["full"][k] for k in ("epochs",)}
    path = out / "results.json"
    atomic_write_text(path, json.dumps({"scale": scale, "data": tables, **extras}, indent=1))
    return path


def read_result(data_dir: str | Path, name: str) -> dict[str, Any] | None:
    """The shipped result ``<data_dir>/reproduction/<name>`` (``results.json``, ``two_d.json``,
    ``knobs.json``, ``ig/mnist-s0.json``, ...), or None if it has not been made; a damaged file
    is an error naming it and the command that makes it again."""
    path = Path(data_dir) / "reproduction" / name
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(
            f"{path} is not valid JSON ({err}): run `python -m cfbook.commands.paper` to make it "
            "again"
        ) from err


def read_cell_logs(
    data_dir: str | Path, training: str, variant: str | None = None
) -> dict[str, dict[int, dict[str, Any]]]:
    """The shipped training logs of every cell trained as ``training`` (``full_protected``, ...),
    of the paper setup or of ``variant``: by data set, then seed, each cell's ``meta`` (its
    lambdas) and per-epoch ``log``. Empty when none is shipped."""
    folder = Path("variants") / variant / "cells" if variant else Path("cells")
    pattern = re.compile(rf"^(?P<data>.+)-{re.escape(training)}-s(?P<seed>\d+)\.json$")
    found: dict[str, dict[int, dict[str, Any]]] = {}
    for path in sorted((Path(data_dir) / "reproduction" / folder).glob(f"*-{training}-s*.json")):
        if match := pattern.match(path.name):
            cell = read_result(data_dir, str(folder / path.name))
            if cell is not None:
                by_seed = found.setdefault(match["data"], {})
                by_seed[int(match["seed"])] = {"meta": cell["meta"], "log": cell["log"]}
    return found


def read_variants(data_dir: str | Path) -> dict[str, dict[str, Any]]:
    """The shipped variants' merged results (``reproduction/variants/<name>/results.json``), by
    name; a variant not run is absent."""
    found = {}
    for path in sorted((Path(data_dir) / "reproduction" / "variants").glob("*/results.json")):
        found[path.parent.name] = read_result(data_dir, str(path.relative_to(path.parents[2])))
    return found
