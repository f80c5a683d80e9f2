"""The settings of the CT paper's experiments, per data set, as its grid configurations resolve
them (CT.jl: ``paper/experiments/evaluations/satml/{single,mutability}/mlp/<data>/evaluation/
grid_config.toml`` and ``evaluation_1..5/eval_config.toml``).

Shared by every data set: an MLP with one hidden layer of 32 ReLU units, Adam at 1e-3, 100
epochs, no burn-in, lambdas [clf, div, adv] = [1, 0.5, 0.25], and an ECCo training-time search of
30 plain gradient steps of 0.1 with lambda_cost 0.001 and lambda_energy 5. Every
``grid_config.toml`` and ``eval_config.toml`` says ``lr = 0.25``, but that field is never read:
CTExperiments' ``get_generator`` (``src/training_params.jl``) builds the search's optimiser with
``get_opt(params)``, i.e. ``Flux.Optimise.Descent()`` without an argument, Flux's default step of
0.1, at training and at test time alike. We follow the code.

The protected runs (``satml/mutability``) train with the main grid's per-data-set weights. Their
configurations leave ``lambda_energy_reg`` and ``lambda_adversarial`` empty, and an empty field
is not ``TrainingParams``' bare default: ``training_params.jl`` resolves it through
``get_global_param("reg_strength", 0.1)``, the ``--reg_strength=`` flag of the launch command
(``globals.jl``), which the main grid's launches pass per data set (its configurations leave
``reg`` and ``tau`` empty too, while its records hold the per-data-set values). The one committed
record of the mutability grids (``e14b747b``) says 0 and 0 on the synthetic sets; that setting is
the ``zero_lambdas_protected`` variant.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from cfbook.data import (
    load_adult,
    load_california_housing,
    load_circles,
    load_credit_default,
    load_gmsc,
    load_linearly_separable,
    load_mnist,
    load_moons,
    load_overlapping,
)
from cfbook.data.synthetic import DATA_SEED
from cfbook.models import IMAGE_SHAPE
from cfbook.search.constraints import Domain

EPOCHS = 100
LR = 1e-3
HIDDEN = 32
LAMBDA_DIV, LAMBDA_ADV = 0.5, 0.25
# (clf, div, reg, adv) when a configuration leaves them empty: CTExperiments' TrainingParams
# (training_params.jl:181-186; reg is `--reg_strength`, default 0.1: CT.jl objectives.jl:8-9).
DEFAULT_LAMBDAS = (1.0, 0.5, 0.1, 0.25)
# (clf, div, reg, adv) of the mutability grids as committed once (e14b747b) on the synthetic sets.
ZERO_LAMBDAS = (1.0, 0.5, 0.0, 0.0)
SEARCH = {"maxiter": 30, "step_size": 0.1, "lambda_cost": 0.001, "lambda_energy": 5.0}
# The data sets whose training-time searches run compiled (NativeGenerator(compile=True)): many
# features searched for a hundred epochs, where the compiled step repays its compile
# (benchmarks/README.md). The others search eagerly.
COMPILED = ("adult", "mnist")
TEST_TAU = {"none": 0.95, "protected": 0.5}  # eval_config.toml's decision_threshold

# MNIST's protected features: the top and bottom five pixel rows (CT.jl's 1-based 1-140, 645-784).
_ROWS = IMAGE_SHAPE[1]
MNIST_PROTECTED_ROWS = (*range(5), *range(_ROWS - 5, _ROWS))


@dataclass(frozen=True)
class Experiment:
    """One data set's training and evaluation settings. ``lambda_reg`` weighs the energy ridge,
    in CT with and without protected features alike (the module's docstring says why)."""

    key: str
    label: str
    kind: str  # "synthetic", "tabular" or "image"
    n_train: int
    batch_size: int
    tau: float
    nce: int
    lambda_reg: float
    protected: tuple[str, ...]
    individuals: int  # per round and test-time energy weight

    @property
    def lambdas(self) -> tuple[float, float, float, float]:
        """(clf, div, reg, adv) of CT's full objective."""
        return (1.0, LAMBDA_DIV, self.lambda_reg, LAMBDA_ADV)


def _synthetic(key: str, label: str, tau: float, reg: float) -> Experiment:
    return Experiment(key, label, "synthetic", 3000, 30, tau, 1000, reg, ("x1",), 250)


def _tabular(key: str, label: str, n: int, tau: float, reg: float, protected: str) -> Experiment:
    return Experiment(key, label, "tabular", n, 1000, tau, 5000, reg, (protected,), 100)


EXPERIMENTS: dict[str, Experiment] = {
    e.key: e
    for e in (
        _synthetic("lin_sep", "LS", 0.5, 0.01),
        _synthetic("circles", "Circ", 0.5, 0.5),
        _synthetic("moons", "Moon", 0.9, 0.25),
        _synthetic("over", "OL", 0.5, 0.25),
        _tabular("adult", "Adult", 25049, 0.75, 0.25, "age"),
        _tabular("cali", "CH", 15504, 0.5, 0.25, "HouseAge"),
        _tabular("credit", "Cred", 9617, 0.5, 0.25, "AGE"),
        _tabular("gmsc", "GMSC", 12371, 0.5, 0.5, "age"),
        Experiment("mnist", "MNIST", "image", 10000, 1000, 0.5, 5000, 0.01, ("rows",), 25),
    )
}

_LOADERS: dict[str, Callable[..., Any]] = {
    "lin_sep": load_linearly_separable,
    "circles": load_circles,
    "moons": load_moons,
    "over": load_overlapping,
    "adult": load_adult,
    "cali": load_california_housing,
    "credit": load_credit_default,
    "gmsc": load_gmsc,
}


@dataclass
class ExperimentData:
    """What a cell needs from its data set: training rows (the first ``n_train`` of the training
    part; the rest of it is CT.jl's validation part), the test part, the domain, the columns
    the per-column mutability of the protected experiment, and the one-hot groups that the
    test-time search decodes (``None`` without categoricals): those CTExperiments passes,
    ``get_cats`` by TaijaData's substring match (``TabularData.categorical_groups``)."""

    x: torch.Tensor
    y: torch.Tensor
    x_val: torch.Tensor
    y_val: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    domain: Domain
    columns: list[str]
    protected_mutability: list[str]
    source: str
    categorical: list[list[int]] | None = None


def check_key(key: str) -> Experiment:
    """The experiment of data set ``key``; an unknown key is an error that lists the valid ones."""
    if key not in EXPERIMENTS:
        raise ValueError(f"unknown data set {key!r}; valid: {', '.join(EXPERIMENTS)}")
    return EXPERIMENTS[key]


def paper_mnist_rows(
    labels: torch.Tensor, per_class: int, held_per_class: int, seed: int = 42
) -> tuple[torch.Tensor, torch.Tensor]:
    """TaijaData's ``load_mnist(n)`` and CTExperiments' validation split, as row indices:
    ``per_class`` images per class drawn **with replacement** and sorted (so the sample keeps the
    file's order and holds duplicates; TaijaData ``vision/mnist.jl``, ``subsample`` in
    ``utils.jl``), then a stratified ``held_per_class`` per class held out for validation (CE.jl
    ``train_test_split(...; keep_class_ratio=true)``, ``experiment.jl``), the rest training, in
    order. Julia's random streams cannot be reproduced: these are other draws of the same kind."""
    rng = torch.Generator().manual_seed(seed)
    labels = labels.cpu()
    classes = labels.unique().tolist()
    picked = []
    for c in classes:
        members = (labels == c).nonzero().flatten()
        picked.append(members[torch.randint(members.numel(), (per_class,), generator=rng)])
    sample = torch.cat(picked).sort().values
    held = torch.zeros(sample.numel(), dtype=torch.bool)
    for c in classes:
        where = (labels[sample] == c).nonzero().flatten()
        held[where[torch.randperm(where.numel(), generator=rng)[:held_per_class]]] = True
    return sample[~held], sample[held]


SYNTHETIC = ("lin_sep", "circles", "moons", "over")
CATEGORICAL = ("adult", "credit")


@dataclass(frozen=True)
class Variant:
    """One departure from the paper's setup, run on ``data`` to measure what it changes: the
    synthetic ``generator`` ("mlj", the paper's; "sklearn") and its ``data_seed`` (the draw of
    the synthetic points), the search ``step_size`` at training and test time, ``shuffle``
    (mini-batches reshuffled each epoch), and the test-time one-hot groups: ``groups``
    "get_cats" (CT.jl's, TaijaData's substring match), "own" (each categorical's own columns) or
    "none" (no decoding), decoded with ``categorical_gradient``; ``protected_lambdas``: the ridge
    and adversarial weights of CT with protected features, the main grid's ("main", the paper's),
    0 and 0 ("zeros", the mutability grids as once committed) or CTExperiments' bare defaults
    ("defaults"). ``retrains`` says whether it needs its own trained models or evaluates the
    paper setup's."""

    name: str
    data: tuple[str, ...] = tuple(EXPERIMENTS)
    generator: str = "mlj"
    data_seed: int = DATA_SEED
    step_size: float = SEARCH["step_size"]
    shuffle: bool = False
    groups: str = "get_cats"
    categorical_gradient: str = "frozen"
    protected_lambdas: str = "main"

    @property
    def retrains(self) -> bool:
        training = (
            self.generator,
            self.data_seed,
            self.step_size,
            self.shuffle,
            self.protected_lambdas,
        )
        return training != ("mlj", DATA_SEED, SEARCH["step_size"], False, "main")


PAPER_SETUP = Variant("paper")
# The data sets whose draws the data_draw variants change: LS, whose IP and IP* reductions are
# about half the paper's in every seed, and Circles, whose IP reduction is above it in every seed.
DRAWN = ("lin_sep", "circles")
VARIANTS = {
    v.name: v
    for v in (
        Variant("sklearn_data", SYNTHETIC, generator="sklearn"),
        Variant("data_draw_43", DRAWN, data_seed=43),
        Variant("data_draw_44", DRAWN, data_seed=44),
        Variant("step_0.25", SYNTHETIC, step_size=0.25),
        Variant("shuffled", SYNTHETIC, shuffle=True),
        Variant("no_decoding", CATEGORICAL, groups="none"),
        Variant("own_groups", ("adult",), groups="own"),
        Variant("straight_through", CATEGORICAL, categorical_gradient="straight_through"),
        Variant("zero_lambdas_protected", SYNTHETIC, protected_lambdas="zeros"),
        Variant("default_lambdas_protected", SYNTHETIC, protected_lambdas="defaults"),
    )
}


def load_experiment_data(
    key: str, device: torch.device | str = "cpu", variant: Variant = PAPER_SETUP
) -> ExperimentData:
    """The data of ``key`` as the paper splits it (or as ``variant`` changes it), on
    ``device``."""
    e = check_key(key)
    if e.kind == "image":
        # The whole training split to resample from, the whole test split to evaluate on.
        data = load_mnist(None, device=device, val_fraction=1.0, verbose=False)
        if data.split != "train":
            raise FileNotFoundError(
                "the paper's MNIST experiment trains on the 60,000-image training split, which "
                f"was not found ({data.source}); restore data/MNIST/raw/train-*.gz"
            )
        rows = torch.cat(paper_mnist_rows(data.y, (e.n_train + 1000) // 10, 100)).to(data.y.device)
        x_all, y_all = data.x[rows], data.y[rows]
        width = IMAGE_SHAPE[2]
        protected = {r * width + c for r in MNIST_PROTECTED_ROWS for c in range(width)}
        x_test, y_test, domain = data.x_val, data.y_val, (-1.0, 1.0)
        columns = [f"pixel{i}" for i in range(data.x.shape[1])]
        mutability = ["none" if i in protected else "both" for i in range(len(columns))]
        categorical = None
    else:
        options = (
            {"generator": variant.generator, "seed": variant.data_seed}
            if e.kind == "synthetic"
            else {}
        )
        data = _LOADERS[key](device=device, **options)
        x_all, y_all = data.x, data.y
        x_test, y_test, domain = data.x_test, data.y_test, data.domain
        columns, mutability = data.columns, data.mutability(e.protected)
        groups = {"get_cats": data.categorical_groups(), "own": data.categorical_groups(False)}
        categorical = groups.get(variant.groups) or None
    return ExperimentData(
        x=x_all[: e.n_train],
        y=y_all[: e.n_train],
        x_val=x_all[e.n_train :],
        y_val=y_all[e.n_train :],
        x_test=x_test,
        y_test=y_test,
        domain=domain,
        columns=columns,
        protected_mutability=mutability,
        categorical=categorical,
        source=data.source
        if e.kind != "image"
        else f"{data.source}, resampled as TaijaData's load_mnist: "
        f"{(e.n_train + 1000) // 10:,} per class with replacement, 100 of each held out",
    )
