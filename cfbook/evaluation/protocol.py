"""The CT paper's test-time protocol, batched: individuals with fixed class pairs, runs that
draw each model's factuals, five test-time energy weights, measures on valid counterfactuals
against the test set, CT - baseline per run. It is cfbook's one evaluation of counterfactuals:
the grid's and the book's comparisons run it.

CT.jl runs one ``benchmark`` per test-time energy weight (``evaluation_1..5/eval_config.toml``),
each of ``n_runs`` = 100 runs of ``n_individuals`` factuals per model. Here every run of one
energy weight is searched in a single batch per model, so a whole evaluation is
``2 x len(energy_weights)`` searches rather than thousands of small ones (a search's rows are
independent, so batching them changes no result). The search is the paper's by default and any
``Generator`` otherwise; the measures are those of ``cfbook.evaluation.measures``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from copy import copy
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import Tensor, nn

from cfbook.errors import warn
from cfbook.evaluation.measures import (
    LENGTH_SCALES,
    Measure,
    References,
    Run,
    protocol_measures,
)
from cfbook.evaluation.metrics import is_valid, predict
from cfbook.evaluation.rounds import draw_individuals, draw_rows
from cfbook.evaluation.statistics import mean_of
from cfbook.inputs import (
    check_features,
    check_finite,
    check_label_range,
    check_labels,
    check_not_empty,
    require_int,
)
from cfbook.search.checks import count_classes
from cfbook.search.constraints import Categorical, Domain, Mutability
from cfbook.search.generators import NativeGenerator
from cfbook.search.interface import Generator, check_generator
from cfbook.search.targets import label_levels

# IP reads a class's distances from one matrix per search when the class has at most this many
# times ip_draws test points (``_WholeClasses``).
WHOLE_CLASS = 1.25


@dataclass(frozen=True)
class PaperProtocol:
    """Test-time settings of the paper (``eval_config.toml``): ``rounds`` runs per energy
    weight of ``individuals`` factuals per model (250 synthetic, 100 tabular, 25 MNIST); an ECCo
    search with lambda_cost 0 that stops at target probability ``tau`` (0.95; 0.5 in the
    mutability experiment) or after ``maxiter`` steps, at plain gradient steps of 0.1: the
    configuration's ``lr = 0.25`` is never read, CTExperiments builds the optimiser as Flux's
    ``Descent()``, whose default step is 0.1 (``training_params.jl``, ``get_opt``). A
    counterfactual is valid when its target probability reaches 0.5 (CE.jl's ``validity``). IP
    averages the L1 distance to up to ``ip_draws`` target-class test points; IP* is the unbiased
    MMD^2 of up to ``mmd_samples`` counterfactuals per target class against as many test points
    of that class (CTExperiments: ``compute_divergence(...; nsamples=ndiv=100)``), at each of
    ``length_scales``: 5.0, the code's (``globals.jl``), decides; 0.5, the text's, is reported
    as a sensitivity. ``categorical_gradient`` is how a search given one-hot groups steps
    (``NativeGenerator``; "frozen" as CE.jl)."""

    rounds: int = 100
    individuals: int = 100
    energy_weights: tuple[float, ...] = (0.1, 0.5, 1.0, 5.0, 10.0)
    tau: float = 0.95
    maxiter: int = 50
    step_size: float = 0.1
    ip_draws: int = 1000
    mmd_samples: int = 100
    length_scales: tuple[float, ...] = LENGTH_SCALES
    seed: int = 2025
    categorical_gradient: str = "frozen"

    def __post_init__(self) -> None:
        for name in ("rounds", "individuals", "maxiter", "ip_draws", "mmd_samples"):
            require_int(name, getattr(self, name))
        if self.mmd_samples < 2:
            raise ValueError(
                "mmd_samples must be at least 2 (an MMD^2 needs two points a side), got "
                f"{self.mmd_samples}"
            )
        if not self.energy_weights or not self.length_scales:
            raise ValueError("energy_weights and length_scales must not be empty")

    def config(self) -> dict[str, Any]:
        """The settings as plain values, as records and run identities keep them."""
        return asdict(self)

    def measures(self) -> tuple[Measure, ...]:
        """The measures of each run, in the order of the results.

        Validity, cost, IP and IP* at each of ``length_scales`` (``cfbook.evaluation.measures``).
        """
        return protocol_measures(self.length_scales)

    def generator(self, lambda_energy: float) -> NativeGenerator:
        """The test-time search at one energy weight."""
        return NativeGenerator(
            maxiter=self.maxiter,
            tau=self.tau,
            lambda_cost=0.0,
            lambda_energy=lambda_energy,
            step_size=self.step_size,
            categorical_gradient=self.categorical_gradient,
        )


class _References:
    """One run's reference points per target class (``cfbook.evaluation.measures.References``):
    the test points IP compares with (up to ``ip_draws``) and IP* (up to ``mmd_samples``), the
    first of one random order of the class. The order is drawn for every class, the points
    gathered only for the classes a run's valid counterfactuals need (with ten classes and 25
    individuals, most are not needed)."""

    def __init__(self, members: dict[int, Tensor], order: dict[int, Tensor], p: PaperProtocol):
        self._members, self._order, self._sizes = members, order, (p.ip_draws, p.mmd_samples)

    def near(self, c: int) -> Tensor:
        """IP's reference points of class ``c``."""
        return self._members[c][self.columns(c)]

    def columns(self, c: int) -> Tensor:
        """IP's reference points of class ``c``, as positions among the class's test points."""
        return self._order[c].to(self._members[c].device)[: self._sizes[0]]

    def sample(self, c: int) -> Tensor:
        """IP*'s reference points of class ``c``."""
        m = self._members[c]
        return m[self._order[c].to(m.device)[: self._sizes[1]]]


class _WholeClasses:
    """L1 distances from one search's valid counterfactuals to every test point of their target
    class, one matrix per class: a run's IP selects its rows and, in its own reference order,
    the columns, the same values in the same order as the distances to the gathered points,
    without gathering a thousand points per class and run. Held only for classes of at most
    ``WHOLE_CLASS`` x ``ip_draws`` test points (MNIST's, of 892 to 1,135), where the distances
    to the few undrawn points cost less than the gathers; a larger class is gathered."""

    def __init__(
        self, cf: Tensor, valid: Tensor, target: Tensor, members: dict[int, Tensor], limit: int
    ):
        self._slot = torch.zeros(cf.shape[0], dtype=torch.long, device=cf.device)
        self._distances: dict[int, Tensor] = {}
        self._offset = 0
        for c, m in members.items():
            rows = (valid & (target == c)).nonzero().flatten()
            if m.shape[0] <= WHOLE_CLASS * limit and rows.numel():
                self._slot[rows] = torch.arange(rows.numel(), device=cf.device)
                self._distances[c] = torch.cdist(cf[rows].flatten(1), m.flatten(1), p=1)

    def run(self, offset: int) -> _WholeClasses:
        """The same matrices for the run whose rows start at ``offset``."""
        out = copy(self)
        out._offset = offset
        return out

    def distances(self, c: int, rows: Tensor, references: _References) -> Tensor | None:
        """The distances of the run's ``rows`` to IP's reference points of class ``c``, or None
        when the class is not held whole."""
        if c not in self._distances:
            return None
        return self._distances[c][self._slot[rows + self._offset]][:, references.columns(c)]


def _references(
    members: dict[int, Tensor], protocol: PaperProtocol, rng: torch.Generator
) -> list[_References]:
    """Per run, the reference points of each target class (``_References``; ``members``: the
    test points of each class): drawn once for all models, so that CT and the baseline meet the
    same reference points in each run."""
    return [
        _References(
            members,
            {c: torch.randperm(m.shape[0], generator=rng) for c, m in members.items()},
            protocol,
        )
        for _ in range(protocol.rounds)
    ]


def _run_measures(
    x0: Tensor,
    cf: Tensor,
    valid: Tensor,
    target: Tensor,
    references: References,
    protocol: PaperProtocol,
    rng: torch.Generator,
    whole: _WholeClasses | None = None,
) -> dict[str, float | None]:
    """The protocol's measures of one run of one model at one energy weight
    (``PaperProtocol.measures``): validity over all its individuals, the others over the valid
    counterfactuals (None when there are none). ``references``: the run's reference points of
    each target class; ``whole`` (with ``_References``): the distances already computed for the
    classes it holds."""
    run = Run(
        x0,
        cf,
        valid,
        target,
        references,
        protocol.mmd_samples,
        protocol.length_scales,
        rng,
        None if whole is None else lambda c, rows: whole.distances(c, rows, references),
    )
    return {m.key: m.of(run) for m in protocol.measures()}


def _check_test_set(models: Mapping[str, nn.Module], x_test: Tensor, y_test: Tensor) -> None:
    """The test set checked once, before any search: float samples, at least one, all finite,
    one integer label each, and rows and labels that every model takes."""
    check_features(x_test, "x_test", "x_test")
    check_not_empty(
        x_test,
        "the test set",
        "pass x_test and y_test holding test points of at least two classes",
    )
    check_labels(y_test, x_test.shape[0], "y_test", "y_test", "x_test")
    check_finite(x_test, "x_test")
    for name, model in models.items():
        named = f"model {name!r}"
        n_classes = count_classes(model, x_test, "x_test", "x_test", named)
        check_label_range(y_test, n_classes, "y_test", named)


def _search_weight(
    models: Mapping[str, nn.Module],
    predicted: Mapping[str, Tensor],
    levels: list[int],
    x_test: Tensor,
    members: dict[int, Tensor],
    search: Generator,
    protocol: PaperProtocol,
    rng: torch.Generator,
    **constraints: Any,
) -> dict[str, tuple[Tensor, Tensor, Tensor, Tensor, list[_References]]]:
    """One energy weight's draws (individuals, each model's rows of every run, each run's
    reference points), then one search per model over all its runs. Per model: factuals,
    counterfactuals, validity, targets and each run's references."""
    n, rounds = protocol.individuals, protocol.rounds
    people = draw_individuals(predicted, levels, n, rng)
    rows = {
        name: [draw_rows(p, people.factual, rng) for _ in range(rounds)]
        for name, p in predicted.items()
    }
    references = _references(members, protocol, rng)
    target = people.target.repeat(rounds).to(x_test.device)
    # Only a search with one-hot groups needs the keyword: other generators keep working.
    if not constraints["categorical"]:
        del constraints["categorical"]
    found = {}
    for name, model in models.items():
        x0 = x_test[torch.cat(rows[name]).to(x_test.device)]
        cf = search.generate(model, x0, target, **constraints).counterfactual
        found[name] = (x0, cf, is_valid(model, cf, target), target, references)
    return found


def _warn_empty_rounds(per_round: dict[str, dict[str, list[float | None]]], rounds: int) -> None:
    """Say which models' rounds found no valid counterfactual at any energy weight: their
    measures of valid counterfactuals are None, and statistics over rounds leave them out."""
    for name, figures in per_round.items():
        others = [k for k in figures if k != "validity"]
        if not others:
            continue
        empty = sum(v is None for v in figures[others[0]])
        if empty:
            warn(
                f"model {name!r}: {empty} of {rounds} rounds found no valid counterfactual at "
                f"any energy weight, so their {', '.join(others)} are None and means and "
                f"comparisons over rounds rest on the other {rounds - empty}. A search that "
                "reaches its target more often (more steps, a larger step size) fills them"
            )


def paper_evaluate(
    models: Mapping[str, nn.Module],
    x_test: Tensor,
    y_test: Tensor,
    protocol: PaperProtocol,
    *,
    domain: Domain = None,
    mutability: Mutability = None,
    categorical: Categorical = None,
    search: Callable[[float], Generator] | None = None,
) -> dict[str, Any]:
    """Counterfactual measures of each model under the paper's protocol, per run.

    For each energy weight (one CE.jl ``benchmark`` each), ``protocol.individuals`` individuals
    get a factual and a target class, once; each of ``protocol.rounds`` runs then draws, per
    model, a test point it predicts as each individual's factual class
    (``cfbook.evaluation.rounds``). Each model's runs of one weight are searched in one batch.
    A run's figure for a model is the mean over energy weights of its per-weight figures (CT.jl
    averages out ``lambda_energy_eval`` before it compares objectives). ``categorical`` (one-hot
    column groups) is decoded at every search step and the measures use the decoded point, as
    CE.jl does with ``features_categorical``.

    ``search`` is the test-time search: a function from an energy weight to the ``Generator``
    that searches at it (``cfbook.search.Generator``; only its ``generate`` is called), by
    default ``protocol.generator``, the paper's. A search of one's own does not read the
    protocol's ``tau``, ``maxiter``, ``step_size`` and ``categorical_gradient``, so the result
    then records its ``settings()`` at each weight under ``"search"``.

    Returns ``{"per_round": {model: {measure: [value or None per run]}}, "by_weight": {model:
    [{"energy_weight": w, measure: mean over runs, ...} per weight]}, "protocol": ...}``, the
    measures those of ``protocol.measures()``.
    """
    if len(models) < 1:
        raise ValueError("paper_evaluate needs at least one model")
    _check_test_set(models, x_test, y_test)
    rng = torch.Generator().manual_seed(protocol.seed)
    levels = label_levels(y_test, "y_test").tolist()
    predicted = {name: predict(model, x_test) for name, model in models.items()}
    members = {c: x_test[y_test == c] for c in levels}
    keys = [m.key for m in protocol.measures()]
    per_weight: dict[str, dict[float, dict[str, list[float | None]]]] = {m: {} for m in models}
    n, rounds = protocol.individuals, protocol.rounds
    settings = []
    for weight in protocol.energy_weights:
        generator = check_generator((search or protocol.generator)(weight))
        settings.append(generator.settings())
        found = _search_weight(
            models,
            predicted,
            levels,
            x_test,
            members,
            generator,
            protocol,
            rng,
            domain=domain,
            mutability=mutability,
            categorical=categorical,
        )
        for name in models:
            x0, cf, valid, target, references = found[name]
            whole = _WholeClasses(cf, valid, target, members, protocol.ip_draws)
            figures: dict[str, list[float | None]] = {k: [] for k in keys}
            for r in range(rounds):
                part = slice(r * n, (r + 1) * n)
                got = _run_measures(
                    x0[part],
                    cf[part],
                    valid[part],
                    target[part],
                    references[r],
                    protocol,
                    rng,
                    whole.run(r * n),
                )
                for k in keys:
                    figures[k].append(got[k])
            per_weight[name][weight] = figures
    per_round = {
        name: {
            k: [
                mean_of([per_weight[name][w][k][i] for w in protocol.energy_weights])
                for i in range(protocol.rounds)
            ]
            for k in keys
        }
        for name in models
    }
    _warn_empty_rounds(per_round, protocol.rounds)
    by_weight = {
        name: [
            {"energy_weight": w, **{k: mean_of(per_weight[name][w][k]) for k in keys}}
            for w in per_weight[name]
        ]
        for name in models
    }
    out = {
        "protocol": protocol.config(),
        "categorical": [list(g) for g in categorical] if categorical else None,
        "per_round": per_round,
        "by_weight": by_weight,
    }
    if search is not None:
        out["search"] = settings
    return out
