"""The experiment grid: data set x training x seed cells, each trained on its own and resumable,
and per data set and seed one evaluation of CT against the baseline with the paper's protocol.

A training is ``vanilla`` (the baseline), ``full`` (CT, no protected feature) or
``full_protected`` (CT with the paper's protected features immutable in the training-time
search). The baseline trains without counterfactuals, so one baseline serves both comparisons.
Every cell writes ``cells/<name>.pt`` (the weights) and ``cells/<name>.json`` (its log); an
evaluation writes ``evaluations/<data>-s<seed>.json``. A cell whose files exist is not run
again; an interrupted one resumes from its last epoch.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from cfbook.atomic import atomic_torch_save, atomic_write_text
from cfbook.data import DeviceLoader
from cfbook.data.synthetic import DATA_SEED
from cfbook.evaluation.attacks import PAPER_EPSILONS, PAPER_PGD, attack_accuracy
from cfbook.evaluation.attribution import (
    integrated_gradients,
    protected_sensitivity,
    standardise,
)
from cfbook.evaluation.metrics import accuracy
from cfbook.evaluation.protocol import PaperProtocol, paper_evaluate
from cfbook.models import mlp
from cfbook.objectives import (
    AdversarialObjective,
    EnergyDifferentialObjective,
    FullObjective,
    Objective,
    VanillaObjective,
)
from cfbook.paper.files import locked, read_json
from cfbook.paper.settings import (
    COMPILED,
    DEFAULT_LAMBDAS,
    EPOCHS,
    EXPERIMENTS,
    HIDDEN,
    LR,
    PAPER_SETUP,
    SEARCH,
    TEST_TAU,
    ZERO_LAMBDAS,
    ExperimentData,
    Variant,
    check_key,
    load_experiment_data,
)
from cfbook.progress import format_duration
from cfbook.search.generators import NativeGenerator
from cfbook.training import counterfactual_training
from cfbook.training.log import EpochRecord

TRAININGS = ("vanilla", "full", "full_protected")
IG_SAMPLES = 2500  # test points per IG round (the paper's appendix: 100 rounds of 2,500)
# The paper's ablation (``satml/ablation``): each half of CT's extra loss on its own.
ABLATION = ("energy", "adversarial")


@dataclass(frozen=True)
class Scale:
    """How much of the paper's grid to run: ``paper()`` is the paper's sizes with ``seeds``
    seeds; ``smoke()`` shrinks epochs, data, counterfactuals and rounds to seconds per cell, and
    searches eagerly (``compiled``: whether the data sets in ``COMPILED`` compile their training
    searches; a smoke cell's few steps never repay a compile)."""

    seeds: int = 3
    epochs: int = EPOCHS
    rounds: int = 100
    max_train: int | None = None
    max_nce: int | None = None
    max_individuals: int | None = None
    max_attack: int | None = None
    compiled: bool = True

    @classmethod
    def paper(cls, seeds: int = 3) -> Scale:
        return cls(seeds=seeds)

    @classmethod
    def smoke(cls, seeds: int = 2) -> Scale:
        return cls(seeds, 2, 4, 400, 100, 10, 200, compiled=False)


def _cap(value: int, cap: int | None) -> int:
    return value if cap is None else min(value, cap)


@dataclass(frozen=True)
class Cell:
    """One training of the grid; ``index`` numbers it in the full grid at its scale (the number
    a SLURM array task receives)."""

    index: int
    data: str
    training: str
    seed: int
    # Settings changed from the paper's (the knob study): ("lambda_div" | "lambda_adv" | "nce"
    # | "step_size", value) pairs.
    overrides: tuple[tuple[str, float], ...] = ()

    @property
    def name(self) -> str:
        knobs = "".join(f"-{k}{v:g}" for k, v in self.overrides)
        return f"{self.data}-{self.training}{knobs}-s{self.seed}"

    @property
    def label(self) -> str:
        """The cell in messages: its number and name, or only its name for a cell of the knob
        study, which has no number in the grid."""
        return f"knob cell {self.name}" if self.overrides else f"cell {self.index} ({self.name})"

    @property
    def rerun(self) -> str:
        """The command's options that run this cell again (with ``--force``)."""
        return knob_rerun(self.data) if self.overrides else f"--cell {self.index}"


def knob_rerun(key: str) -> str:
    """The command's options that run the knob study on ``key`` again (with ``--force``): only
    the study, never the whole grid, which ``--knobs --force`` alone would retrain."""
    return f"--merge-only --knobs --data {key}"


def grid_cells(
    scale: Scale, data: Sequence[str] | None = None, ablation: bool = False
) -> list[Cell]:
    """The cells of the grid (data set, then seed, then training), restricted to ``data``; with
    ``ablation``, also the energy-only and adversarial-only trainings, numbered after the main
    grid's cells so that those keep their numbers."""
    keys = list(EXPERIMENTS)
    wanted = keys if data is None else [check_key(k).key for k in data]
    main = len(keys) * scale.seeds * len(TRAININGS)
    cells = []
    for i, key in enumerate(keys):
        for seed in range(scale.seeds):
            group = i * scale.seeds + seed
            trainings = [(group * len(TRAININGS) + t, name) for t, name in enumerate(TRAININGS)]
            if ablation:
                trainings += [
                    (main + group * len(ABLATION) + t, name) for t, name in enumerate(ABLATION)
                ]
            if key in wanted:
                cells += [Cell(index, key, name, seed) for index, name in trainings]
    return cells


def cell_config(cell: Cell, scale: Scale, variant: Variant = PAPER_SETUP) -> dict[str, Any]:
    """Everything that decides a cell's result; a saved result must match it to be reused. A
    ``variant`` that retrains names itself and its changes (the paper's cells stay as they are)."""
    config = _paper_config(cell, scale)
    if variant.retrains:
        config["variant"] = variant.name
        config["shuffle"] = variant.shuffle
        config["generator"] = variant.generator
        if variant.data_seed != DATA_SEED:
            config["data_seed"] = variant.data_seed
        if config["search"] is not None:
            config["search"] = {**config["search"], "step_size": variant.step_size}
        if cell.training == "full_protected" and variant.protected_lambdas != "main":
            lambdas = {"zeros": ZERO_LAMBDAS, "defaults": DEFAULT_LAMBDAS}
            config["lambdas"] = list(lambdas[variant.protected_lambdas])
    for knob, value in cell.overrides:
        if knob == "nce":
            config["nce"] = int(value)
        elif knob == "step_size":
            config["search"] = {**config["search"], "step_size": value}
        else:
            config["lambdas"][{"lambda_div": 1, "lambda_adv": 3}[knob]] = value
    return config


def _paper_config(cell: Cell, scale: Scale) -> dict[str, Any]:
    e = EXPERIMENTS[cell.data]
    return {
        "data": cell.data,
        "training": cell.training,
        "seed": cell.seed,
        "epochs": scale.epochs,
        "n_train": _cap(e.n_train, scale.max_train),
        "batch_size": e.batch_size,
        "shuffle": False,
        "nce": _cap(e.nce, scale.max_nce) if cell.training != "vanilla" else None,
        "lambdas": list(e.lambdas) if cell.training != "vanilla" else None,
        "search": {**SEARCH, "tau": e.tau} if cell.training != "vanilla" else None,
        "lr": LR,
        "hidden": HIDDEN,
    }


def _objective(training: str, clf: float, div: float, reg: float, adv: float) -> Objective:
    """The loss of a training: the full one, or one half of it for the ablation."""
    if training == "energy":
        return EnergyDifferentialObjective(lambda_clf=clf, lambda_div=div, lambda_reg=reg)
    if training == "adversarial":
        return AdversarialObjective(lambda_clf=clf, lambda_adv=adv)
    return FullObjective(lambda_clf=clf, lambda_div=div, lambda_reg=reg, lambda_adv=adv)


def _model(data: ExperimentData) -> nn.Module:
    return mlp(data.x.shape[1], (HIDDEN,), int(data.y.max()) + 1)


def _as_today(config: Any) -> Any:
    """A saved stamp in today's terms: a setting added or renamed since it was saved takes the
    value that then held. A variant's evaluation saved without ``data_seed`` drew the synthetic
    data with ``DATA_SEED``; one saved without ``protected_lambdas``, or with "mutability" (the
    protected experiment's recorded grids), trained the protected CT with 0 and 0 on the
    synthetic sets and with the main grid's weights on the others."""
    variant = config.get("variant") if isinstance(config, dict) else None
    if not isinstance(variant, dict):
        return config
    today = {"data_seed": DATA_SEED, **variant}
    if today.get("protected_lambdas", "mutability") == "mutability":
        synthetic = EXPERIMENTS[config["data"]].kind == "synthetic"
        today["protected_lambdas"] = "zeros" if synthetic else "main"
    return {**config, "variant": today}


def _reusable(path: Path, config: dict[str, Any], force: bool, rerun: str) -> dict[str, Any] | None:
    """A saved result for ``config``; an error if it was made with other settings or cannot be
    read, naming ``rerun``, the grid's options that run it again."""
    if force:
        return None
    saved = read_json(path, f"run it again (python -m cfbook.commands.paper {rerun} --force)")
    if saved is None:
        return None
    if _as_today(saved.get("config")) != config:
        raise ValueError(
            f"{path} was made with other settings ({saved.get('config')}, now {config}): pass "
            "--force to run it again, or --out to write the results elsewhere"
        )
    return saved


def run_cell(
    cell: Cell,
    scale: Scale,
    out: Path,
    *,
    device: torch.device,
    data: ExperimentData | None = None,
    force: bool = False,
    report: Callable[[str], None] = print,
    variant: Variant = PAPER_SETUP,
) -> dict[str, Any]:
    """Train one cell (or reuse its saved result) and return its result file's content."""
    config = cell_config(cell, scale, variant)
    result_path = out / "cells" / f"{cell.name}.json"
    saved = _reusable(result_path, config, force, cell.rerun)
    if saved is not None:
        return saved
    with locked(result_path, cell.label):
        # A process that held the lock before this one may have just finished the cell.
        saved = _reusable(result_path, config, force, cell.rerun)
        return saved or _train_cell(cell, scale, out, config, device, data, report, variant)


def _train_cell(
    cell: Cell,
    scale: Scale,
    out: Path,
    config: dict[str, Any],
    device: torch.device,
    data: ExperimentData | None,
    report: Callable[[str], None],
    variant: Variant,
) -> dict[str, Any]:
    """Train one cell, resuming from its checkpoint, and save its weights and result."""
    result_path = out / "cells" / f"{cell.name}.json"
    data = data if data is not None else load_experiment_data(cell.data, device, variant)
    n = config["n_train"]
    torch.manual_seed(cell.seed)
    model = _model(data).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    # CTExperiments' Flux.DataLoader keeps its default shuffle=false: the same batches each epoch.
    loader = DeviceLoader(
        data.x[:n], data.y[:n], config["batch_size"], seed=cell.seed, shuffle=config["shuffle"]
    )
    if cell.training == "vanilla":
        objective, generator, mutability = VanillaObjective(), NativeGenerator(), None
    else:
        objective = _objective(cell.training, *config["lambdas"])
        # Whether the search runs compiled follows from the data set (COMPILED) and the scale
        # (a smoke grid searches eagerly); the log's meta records it with the search's settings.
        compiled = scale.compiled and cell.data in COMPILED
        generator = NativeGenerator(**config["search"], compile=compiled)
        mutability = data.protected_mutability if cell.training == "full_protected" else None
    start = time.perf_counter()

    def progress(record: EpochRecord, *_: object) -> None:
        every = max(scale.epochs // 5, 1)
        if record.epoch % every == 0 or record.epoch == scale.epochs:
            left = (time.perf_counter() - start) / record.epoch * (scale.epochs - record.epoch)
            valid = f", valid {record.percent_valid:.0%}" if config["nce"] else ""
            report(
                f"  {cell.name}: epoch {record.epoch}/{scale.epochs}, "
                f"{record.time_taken:.2f} s/epoch{valid}, {format_duration(left)} left"
            )

    checkpoints = out / "checkpoints" / cell.name
    _, log = counterfactual_training(
        objective,
        model,
        generator,
        loader,
        optimizer,
        device=device,
        nepochs=scale.epochs,
        domain=data.domain,
        mutability=mutability,
        nce=config["nce"],
        checkpoint_dir=checkpoints,
        callback=progress,
        verbose=0,
    )
    seconds = time.perf_counter() - start
    atomic_torch_save(model.state_dict(), out / "cells" / f"{cell.name}.pt")
    result = {
        "config": config,
        "seconds": seconds,
        "test_accuracy": accuracy(model, data.x_test, data.y_test),
        "meta": log.meta,
        "log": [asdict(r) for r in log],
    }
    atomic_write_text(result_path, json.dumps(result, indent=1))
    shutil.rmtree(checkpoints, ignore_errors=True)
    return result


def evaluation_config(
    data: str, seed: int, scale: Scale, variant: Variant = PAPER_SETUP
) -> dict[str, Any]:
    e = EXPERIMENTS[data]
    extra = {} if variant == PAPER_SETUP else {"variant": _variant_fields(variant)}
    return {
        **extra,
        "data": data,
        "seed": seed,
        "cells": {t: cell_config(Cell(0, data, t, seed), scale, variant) for t in TRAININGS},
        "rounds": scale.rounds,
        "individuals": _cap(e.individuals, scale.max_individuals),
        "attack_rows": scale.max_attack,
        # The evaluation design and the search it runs (step 0.1, per-individual classes, MMD
        # per target class, one-hot groups decoded as CE.jl's with CT.jl's groups).
        "protocol": {
            "design": 2,
            "categorical": "get_cats, frozen" if e.kind == "tabular" else None,
        },
    }


def missing_weights(weights: Path, how: str) -> FileNotFoundError:
    """The error for a cell's weights that are not there; ``how``: the command's options that
    train the cell again."""
    return FileNotFoundError(
        f"{weights} is missing: the grid ships its cells' results and the weights of seed 0 of "
        "the synthetic sets only (the two-dimensional chapter's models); train the cell again "
        f"(python -m cfbook.commands.paper {how}; on another processor its model differs in the "
        "last bits from the one the shipped results were made with)"
    )


def _trained(
    key: str,
    seed: int,
    trainings: Sequence[str],
    cells: Path,
    data: ExperimentData,
    device: torch.device,
) -> dict[str, nn.Module]:
    """The trained models of (``key``, ``seed``) in the folder ``cells``, in eval mode; an error
    names a missing one."""
    models = {}
    for training in trainings:
        weights = cells / f"{Cell(0, key, training, seed).name}.pt"
        if not weights.is_file():
            raise missing_weights(weights, "--cell <its index> --force, --list shows the indices")
        model = _model(data).to(device)
        try:
            model.load_state_dict(torch.load(weights, map_location=device, weights_only=True))
        except (RuntimeError, EOFError, OSError, ValueError) as err:
            raise ValueError(
                f"{weights} cannot be loaded ({str(err).splitlines()[0]}): it is truncated, "
                "corrupt or of another model; train its cell again (python -m "
                "cfbook.commands.paper --cell <its index> --force, --list shows the indices)"
            ) from err
        models[training] = model.eval()
    return models


def _robustness(
    models: dict[str, nn.Module], data: ExperimentData, scale: Scale, seed: int
) -> dict[str, Any]:
    """Each model's accuracy on the test set (its first ``scale.max_attack`` rows, counted in
    ``rows``), clean and under the paper's FGSM and PGD over its epsilon grid."""
    x, y = data.x_test[: scale.max_attack], data.y_test[: scale.max_attack]
    return {
        t: {
            **attack_accuracy(
                m, x, y, epsilons=PAPER_EPSILONS, domain=data.domain, seed=seed, **PAPER_PGD
            ),
            "rows": x.shape[0],
        }
        for t, m in models.items()
    }


Evaluate = Callable[[dict[str, nn.Module], ExperimentData], dict[str, Any]]


def _evaluated(
    out: Path,
    kind: str,
    config: dict[str, Any],
    trainings: Sequence[str],
    evaluate: Evaluate,
    *,
    device: torch.device,
    data: ExperimentData | None,
    force: bool,
    cells: Path | None = None,
) -> dict[str, Any]:
    """What every evaluation of the grid does around its own measures: reuse the saved
    ``out/<kind>/<data>-s<seed>.json`` of the same ``config``, else load the data and the trained
    models (from ``cells``, default ``out/cells``), time ``evaluate`` and save its result with
    the config and the seconds."""
    key, seed = config["data"], config["seed"]
    path = out / kind / f"{key}-s{seed}.json"
    also = {"ablation": "--objectives energy,adversarial ", "ig": "--ig "}.get(kind, "")
    rerun = f"{also}--evaluate {key}:{seed}"
    saved = _reusable(path, config, force, rerun)
    if saved is not None:
        return saved
    with locked(path, f"the {kind.rstrip('s')} of {key}:{seed}"):
        saved = _reusable(path, config, force, rerun)
        if saved is not None:
            return saved
        data = data if data is not None else load_experiment_data(key, device)
        models = _trained(key, seed, trainings, cells or out / "cells", data, device)
        start = time.perf_counter()
        measured = evaluate(models, data)
        result = {"config": config, "seconds": time.perf_counter() - start, **measured}
        atomic_write_text(path, json.dumps(result, indent=1))
    return result


def run_evaluation(
    key: str,
    seed: int,
    scale: Scale,
    out: Path,
    *,
    device: torch.device,
    data: ExperimentData | None = None,
    force: bool = False,
    variant: Variant = PAPER_SETUP,
    cells: Path | None = None,
) -> dict[str, Any]:
    """Evaluate the three trainings of (``key``, ``seed``): CT against the baseline without and
    with the protected features, and every model's accuracy under attack; under ``variant``,
    with its test-time step and one-hot groups, on the models in ``cells``."""
    config = evaluation_config(key, seed, scale, variant)
    base = PaperProtocol(
        rounds=scale.rounds,
        individuals=config["individuals"],
        seed=seed,
        step_size=variant.step_size,
        categorical_gradient=variant.categorical_gradient,
    )

    def evaluate(models: dict[str, nn.Module], data: ExperimentData) -> dict[str, Any]:
        unconstrained = paper_evaluate(
            {"full": models["full"], "vanilla": models["vanilla"]},
            data.x_test,
            data.y_test,
            replace(base, tau=TEST_TAU["none"]),
            domain=data.domain,
            categorical=data.categorical,
        )
        protected = paper_evaluate(
            {"full": models["full_protected"], "vanilla": models["vanilla"]},
            data.x_test,
            data.y_test,
            replace(base, tau=TEST_TAU["protected"]),
            domain=data.domain,
            mutability=data.protected_mutability,
            categorical=data.categorical,
        )
        return {
            "unconstrained": unconstrained,
            "protected": protected,
            "robustness": _robustness(models, data, scale, seed),
        }

    return _evaluated(
        out,
        "evaluations",
        config,
        TRAININGS,
        evaluate,
        device=device,
        data=data,
        force=force,
        cells=cells,
    )


def _variant_fields(variant: Variant) -> dict[str, Any]:
    fields = asdict(variant)
    del fields["data"]
    return fields


def run_ablation(
    key: str,
    seed: int,
    scale: Scale,
    out: Path,
    *,
    device: torch.device,
    data: ExperimentData | None = None,
    force: bool = False,
) -> dict[str, Any]:
    """The ablation of (``key``, ``seed``), as the paper's ``satml/ablation`` evaluates it: the
    full, energy-only, adversarial-only and baseline models under the unconstrained protocol,
    all four in the same rounds, and the two ablated models' accuracy under attack."""
    config = {
        **evaluation_config(key, seed, scale),
        "cells": {
            t: cell_config(Cell(0, key, t, seed), scale) for t in ("vanilla", "full", *ABLATION)
        },
    }
    protocol = PaperProtocol(
        rounds=scale.rounds, individuals=config["individuals"], seed=seed, tau=TEST_TAU["none"]
    )

    def evaluate(models: dict[str, nn.Module], data: ExperimentData) -> dict[str, Any]:
        result = paper_evaluate(
            models,
            data.x_test,
            data.y_test,
            protocol,
            domain=data.domain,
            categorical=data.categorical,
        )
        robustness = _robustness({t: models[t] for t in ABLATION}, data, scale, seed)
        return {"unconstrained": result, "robustness": robustness}

    trainings = ("full", *ABLATION, "vanilla")
    return _evaluated(
        out, "ablation", config, trainings, evaluate, device=device, data=data, force=force
    )


def run_ig(
    key: str,
    seed: int,
    scale: Scale,
    out: Path,
    *,
    device: torch.device,
    data: ExperimentData | None = None,
    force: bool = False,
) -> dict[str, Any]:
    """IG sensitivity of the baseline and of CT trained with protection to the protected
    features of (``key``, ``seed``), per round (``cfbook.evaluation.attribution``)."""
    e = EXPERIMENTS[key]
    samples = _cap(IG_SAMPLES, scale.max_individuals and scale.max_individuals * 10)
    config = {
        "data": key,
        "seed": seed,
        "cells": {
            t: cell_config(Cell(0, key, t, seed), scale) for t in ("vanilla", "full_protected")
        },
        "rounds": scale.rounds,
        "samples": samples,
    }

    def evaluate(models: dict[str, nn.Module], data: ExperimentData) -> dict[str, Any]:
        protected = [i for i, m in enumerate(data.protected_mutability) if m == "none"]
        per_round = {
            t: protected_sensitivity(
                m,
                data.x_test,
                data.y_test,
                protected,
                two_dimensional=e.kind == "synthetic",
                rounds=scale.rounds,
                samples=samples,
                seed=seed,
            )
            for t, m in models.items()
        }
        result: dict[str, Any] = {"per_round": per_round}
        if e.kind == "image":
            result["maps"] = {t: _class_maps(m, data, samples) for t, m in models.items()}
        return result

    trainings = ("vanilla", "full_protected")
    return _evaluated(out, "ig", config, trainings, evaluate, device=device, data=data, force=force)


def _class_maps(model: nn.Module, data: ExperimentData, samples: int) -> list[list[float]]:
    """Per class, the mean IG map of up to ``samples / 10`` test images of that class, against a
    seeded U(-1, 1) baseline, standardised to [0, 1]: where an image model looks, per digit."""
    rng = torch.Generator().manual_seed(0)
    baseline = (torch.rand(1, data.x_test.shape[1], generator=rng) * 2 - 1).to(data.x_test.device)
    maps = []
    for c in range(int(data.y_test.max()) + 1):
        x = data.x_test[data.y_test == c][: max(samples // 10, 1)]
        target = torch.full((x.shape[0],), c, device=x.device)
        g = integrated_gradients(model, x, target, baseline).mean(0)
        maps.append([round(v, 4) for v in standardise(g, False).tolist()])
    return maps
