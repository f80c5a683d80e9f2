"""Benchmark 10: the paper grid's two levers, measured side by side, and the grid's own time.

- The evaluation searches every round of one test-time energy weight in one batch per model
  (``paper_evaluate``); CT.jl's benchmark searches round by round. Both are timed here on the
  same factuals and targets (Adult: 100 rounds of 100 factuals).
- The training-time search of a tabular cell (Adult: 5,000 counterfactuals, 30 steps) with the
  compiled executor against the eager one.
- MNIST's measures: IP read from one distance matrix per class and search against IP from the
  reference points gathered per run and class (the earlier protocol).

The grid's total and per-data-set times come from the result files of the last
``python -m cfbook.commands.paper`` run (``data/reproduction/results.json``): a whole-process
measurement that cannot run side by side with anything.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from functools import partial

import torch

from benchmarks.common import (
    Case,
    Context,
    Table,
    Timing,
    Value,
    check,
    fmt_ratio,
    side_by_side,
)
from benchmarks.fixtures import fresh_model, trained_model
from cfbook.data import DeviceLoader, find_data_dir
from cfbook.evaluation import protocol as protocol_module
from cfbook.evaluation.metrics import predict
from cfbook.evaluation.protocol import PaperProtocol, paper_evaluate
from cfbook.models import mlp
from cfbook.objectives import VanillaObjective
from cfbook.paper.settings import EXPERIMENTS, SEARCH, load_experiment_data
from cfbook.search.generators import NativeGenerator
from cfbook.training import counterfactual_training

TITLE = "10. Paper grid: batched evaluation, compiled tabular search, the grid's time"
TARGET_MINUTES = 60.0


def _timed_table(
    ctx: Context,
    cases: dict[str, Case],
    *,
    log: str,
    label: str,
    title: str,
    columns: tuple[str, str],
    reference: str,
) -> tuple[Table, dict[str, Timing]]:
    """Time ``cases`` side by side and tabulate them: one row per case with its median time,
    its ratio to ``reference``'s and its repeats (``columns``: the first and the ratio's
    headers)."""
    ctx.log(log)
    timings = side_by_side(ctx, cases, label=label)
    table = Table(title, [columns[0], "time", columns[1], "repeats"])
    for name, timing in timings.items():
        ratio = fmt_ratio(timing.median / timings[reference].median)
        table.add(name, Value(f"{timing.median:.3f} s", timing.median, "s"), ratio, timing.repeats)
    return table, timings


def _adult_model(ctx: Context):
    data = load_experiment_data("adult", ctx.device)
    torch.manual_seed(0)
    model = mlp(data.x.shape[1], (32,), 2).to(ctx.device)
    counterfactual_training(
        VanillaObjective(),
        model,
        NativeGenerator(),
        DeviceLoader(data.x, data.y, 1000),
        torch.optim.Adam(model.parameters(), 1e-3),
        device=ctx.device,
        nepochs=3,
        domain=data.domain,
        verbose=0,
    )
    return data, model.eval()


def _factuals(data, model, rounds: int, per_round: int):
    """Test rows the model predicts as class 0, with target 1, as one round of the protocol."""
    pool = (predict(model, data.x_test) == 0).nonzero().flatten()
    g = torch.Generator().manual_seed(0)
    rows = pool[torch.randint(pool.numel(), (rounds * per_round,), generator=g).to(pool.device)]
    return data.x_test[rows], torch.ones(rows.numel(), dtype=torch.long, device=rows.device)


def run(ctx: Context) -> list[Table]:
    data, model = _adult_model(ctx)
    rounds, per_round = (20, 100) if ctx.quick else (100, 100)
    x, target = _factuals(data, model, rounds, per_round)
    search = PaperProtocol(tau=0.95).generator(1.0)

    def by_round() -> None:
        for s in range(0, x.shape[0], per_round):
            search.generate(
                model, x[s : s + per_round], target[s : s + per_round], domain=data.domain
            )

    cases = {
        "one batch": Case(partial(search.generate, model, x, target, domain=data.domain)),
        "round by round": Case(by_round),
    }
    table, _ = _timed_table(
        ctx,
        cases,
        log=f"paper evaluation: {rounds} rounds x {per_round} factuals, batched vs by round",
        label="grid evaluation",
        title=f"Adult, one test-time energy weight: {rounds} rounds x {per_round} factuals, "
        "50 steps",
        columns=("search", "vs one batch"),
        reference="one batch",
    )

    nce = 1000 if ctx.quick else EXPERIMENTS["adult"].nce
    train_search = NativeGenerator(**SEARCH, tau=EXPERIMENTS["adult"].tau)
    xs = data.x[:nce]
    ys = 1 - predict(model, xs)
    cases = {
        mode: Case(
            partial(
                replace(train_search, compile=mode == "compiled").generate,
                model,
                xs,
                ys,
                domain=data.domain,
            )
        )
        for mode in ("compiled", "eager")
    }
    compiled, _ = _timed_table(
        ctx,
        cases,
        log=f"training-time search, Adult, {nce} rows: compiled vs eager",
        label="grid training search",
        title=f"Adult training-time search: {nce} counterfactuals x 30 steps (one epoch's search)",
        columns=("step", "vs eager"),
        reference="eager",
    )

    measures = _mnist_measures(ctx)

    grid = Table(
        "The whole grid (from data/reproduction/results.json)", ["data", "training", "evaluation"]
    )
    targets = Table("Targets", ["target", "measured", "status"])
    path = find_data_dir() / "reproduction" / "results.json"
    if path.is_file():
        results = json.loads(path.read_text())
        total = 0.0
        for key, d in results["data"].items():
            total += d["training_seconds"] + d["evaluation_seconds"]
            grid.add(
                EXPERIMENTS[key].label,
                f"{d['training_seconds']:.0f} s",
                f"{d['evaluation_seconds']:.0f} s",
            )
        grid.add("all", "", f"{total / 60:.1f} min in all")
        targets.add(
            f"whole grid <= {TARGET_MINUTES:g} min (cells and evaluations, on the machine that "
            "made the shipped results)",
            f"{total / 60:.1f} min",
            check(total / 60 <= TARGET_MINUTES),
        )
        grid.notes.append(
            "Seconds inside the cells and evaluations; the command's wall time adds loading the "
            "data once per data set and starting Python (see RESULTS.md's note for the run)."
        )
    return [table, compiled, measures, grid, targets]


@contextmanager
def _whole_classes(factor: float) -> Iterator[None]:
    """The protocol with IP's whole-class distances held for classes of up to ``factor`` x
    ``ip_draws`` test points (0: none, every class gathered run by run, the earlier protocol)."""
    saved = protocol_module.WHOLE_CLASS
    protocol_module.WHOLE_CLASS = factor
    try:
        yield
    finally:
        protocol_module.WHOLE_CLASS = saved


def _mnist_measures(ctx: Context) -> Table:
    """MNIST's protocol at one energy weight (the grid's: 100 rounds of 25 individuals, two
    models), IP read from one distance matrix per class and search against IP from the points
    gathered per run and class: the same numbers (tested), other times."""
    data = load_experiment_data("mnist", ctx.device)
    ct, baseline = trained_model(ctx, "mlp"), fresh_model("mlp", ctx.device).eval()
    rounds = 20 if ctx.quick else 100
    protocol = PaperProtocol(rounds=rounds, individuals=25, energy_weights=(1.0,))
    models = {"ct": ct, "baseline": baseline}

    def evaluate(factor: float) -> dict:
        with _whole_classes(factor):
            return paper_evaluate(models, data.x_test, data.y_test, protocol, domain=data.domain)

    cases = {
        "whole classes": Case(partial(evaluate, protocol_module.WHOLE_CLASS)),
        "gathered per run": Case(partial(evaluate, 0.0)),
    }
    table, t = _timed_table(
        ctx,
        cases,
        log=f"MNIST protocol, {rounds} rounds: IP from whole classes vs gathered points",
        label="IP reference points",
        title=f"MNIST, the paper's protocol at one energy weight: {rounds} rounds x 25 "
        "individuals, two models",
        columns=("IP's distances", "vs gathered"),
        reference="gathered per run",
    )
    same = t["whole classes"].result == t["gathered per run"].result
    table.notes.append(
        "Search and measures together; the partially trained benchmark MLP against the same "
        f"MLP untrained. Both give the same result: {same}."
    )
    return table
