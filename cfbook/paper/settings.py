"""The settings of the CT paper's experiments, per data set, as its grid configurations resolve
them (CT.jl: ``paper/experiments/evaluations/satml/{single,mutability}/mlp/<data>/evaluation/
grid_config.toml`` and ``evaluation_1..5/eval_config.toml``).

Shared by every data set: an MLP with one hidden layer of 32 ReLU units, Adam at 1e-3, 100
epochs, no burn-in, lambdas [clf, div, adv] = [1, 0.5, 0.25], and an ECCo training-time search of
30 plain gradient steps of 0.25 with lambda_cost 0.001 and lambda_energy 5. (``PAPER.md`` says a
step of 0.1; every ``grid_config.toml`` says ``lr = 0.25``, which is what we use.)
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
from cfbook.models import IMAGE_SHAPE
from cfbook.search.constraints import Domain

EPOCHS = 100
LR = 1e-3
HIDDEN = 32
LAMBDA_DIV, LAMBDA_ADV = 0.5, 0.25
SEARCH = {"maxiter": 30, "step_size": 0.25, "lambda_cost": 0.001, "lambda_energy": 5.0}
TEST_TAU = {"none": 0.95, "protected": 0.5}  # eval_config.toml's decision_threshold

# MNIST's protected features: the top and bottom five pixel rows (CT.jl's 1-based 1-140, 645-784).
_ROWS = IMAGE_SHAPE[1]
MNIST_PROTECTED_ROWS = (*range(5), *range(_ROWS - 5, _ROWS))


@dataclass(frozen=True)
class Experiment:
    """One data set's training and evaluation settings. ``lambda_reg`` weighs the energy ridge;
    ``protected_reg`` / ``protected_adv`` are the mutability experiment's ridge and adversarial
    weights where they differ (the synthetic sets train that experiment without either)."""

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
    protected_reg: float | None = None
    protected_adv: float | None = None

    def lambdas(self, training: str) -> tuple[float, float, float, float]:
        """(clf, div, reg, adv) of the full objective in the experiment ``training``."""
        if training == "full_protected":
            reg = self.lambda_reg if self.protected_reg is None else self.protected_reg
            adv = LAMBDA_ADV if self.protected_adv is None else self.protected_adv
            return (1.0, LAMBDA_DIV, reg, adv)
        return (1.0, LAMBDA_DIV, self.lambda_reg, LAMBDA_ADV)


def _synthetic(key: str, label: str, tau: float, reg: float) -> Experiment:
    return Experiment(key, label, "synthetic", 3000, 30, tau, 1000, reg, ("x1",), 250, 0.0, 0.0)


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
    and the per-column mutability of the protected experiment."""

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


def check_key(key: str) -> Experiment:
    """The experiment of data set ``key``; an unknown key is an error that lists the valid ones."""
    if key not in EXPERIMENTS:
        raise ValueError(f"unknown data set {key!r}; valid: {', '.join(EXPERIMENTS)}")
    return EXPERIMENTS[key]


def load_experiment_data(key: str, device: torch.device | str = "cpu") -> ExperimentData:
    """The data of ``key`` as the paper splits it, on ``device``."""
    e = check_key(key)
    if e.kind == "image":
        # 11,000 images of the training split (training + validation), the whole test split.
        data = load_mnist(e.n_train + 1000, device=device, val_fraction=1.0, verbose=False)
        if data.split != "train":
            raise FileNotFoundError(
                "the paper's MNIST experiment trains on the 60,000-image training split, which "
                f"was not found ({data.source}); restore data/MNIST/raw/train-*.gz"
            )
        width = IMAGE_SHAPE[2]
        protected = {r * width + c for r in MNIST_PROTECTED_ROWS for c in range(width)}
        x_test, y_test, domain = data.x_val, data.y_val, (-1.0, 1.0)
        columns = [f"pixel{i}" for i in range(data.x.shape[1])]
        mutability = ["none" if i in protected else "both" for i in range(len(columns))]
    else:
        data = _LOADERS[key](device=device)
        x_test, y_test, domain = data.x_test, data.y_test, data.domain
        columns, mutability = data.columns, data.mutability(e.protected)
    return ExperimentData(
        x=data.x[: e.n_train],
        y=data.y[: e.n_train],
        x_val=data.x[e.n_train :],
        y_val=data.y[e.n_train :],
        x_test=x_test,
        y_test=y_test,
        domain=domain,
        columns=columns,
        protected_mutability=mutability,
        source=data.source,
    )
