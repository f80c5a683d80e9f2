"""Benchmark 8: the evaluation's search against the training-time search.

The paper's test-time protocol searches with the same batched engine as training, only with other
settings (no cost term, tau 0.95, 50 steps). Both searches run on the same factuals, targets and
weights; time per counterfactual-step (one row through one iteration) shows whether the
evaluation pays anything beyond its longer searches.
"""

from __future__ import annotations

from functools import partial

from benchmarks.common import Case, Context, Table, check, fmt, fmt_ratio, side_by_side
from benchmarks.config import MODEL_NAMES
from benchmarks.fixtures import DOMAIN, factuals, trained_model
from cfbook.evaluation.protocol import PaperProtocol
from cfbook.search.generators import CounterfactualResult, NativeGenerator

TITLE = "8. Evaluation search: throughput beside the training-time search"
TARGET = 1.15  # evaluation µs per counterfactual-step / training search's


def _steps(result: CounterfactualResult) -> int:
    """Counterfactual-steps the search really took (rows x iterations they stepped)."""
    return max(int(result.iterations.sum()), 1)


def run(ctx: Context) -> list[Table]:
    protocol, weight = PaperProtocol(), 1.0
    table = Table(
        f"Same factuals and weights; evaluation (the paper's protocol): lambda_cost 0, "
        f"lambda_energy {weight:g}, tau {protocol.tau}, step {protocol.step_size}, maxiter "
        f"{protocol.maxiter}; training: NativeGenerator() with maxiter {protocol.maxiter}",
        [
            "model",
            "batch",
            "search",
            "valid %",
            "mean iters",
            "time",
            "cf/s",
            "µs per cf-step",
            "vs training",
            "repeats",
        ],
    )
    targets = Table("Targets", ["target", "measured", "status"])
    for name in MODEL_NAMES:
        model = trained_model(ctx, name)
        n = ctx.sizes.efficiency_batch[name]
        x, target = factuals(ctx, model, n)
        searches = {
            "evaluation": protocol.generator(weight),
            "training": NativeGenerator(maxiter=protocol.maxiter),
        }
        cases = {
            k: Case(partial(g.generate, model, x, target, domain=DOMAIN))
            for k, g in searches.items()
        }
        timings = side_by_side(ctx, cases, label=f"evaluation search {name} batch={n}")
        per_step = {k: t.median / _steps(t.result) for k, t in timings.items()}
        for k, t in timings.items():
            result = t.result
            table.add(
                name,
                n,
                k,
                f"{100 * float(result.valid.float().mean()):.1f}",
                f"{float(result.iterations.float().mean()):.1f}",
                f"{t.median:.3f} s",
                fmt(n / t.median, 1),
                f"{1e6 * per_step[k]:.2f}",
                fmt_ratio(per_step[k] / per_step["training"]),
                t.repeats,
            )
        ratio = per_step["evaluation"] / per_step["training"]
        targets.add(
            f"evaluation µs per cf-step <= {TARGET}x the training search's ({name})",
            fmt_ratio(ratio),
            check(ratio <= TARGET),
        )
    table.notes += [
        "cf/s: counterfactuals of one energy weight per second; the protocol runs one search "
        f"per model and weight ({len(protocol.energy_weights)} weights).",
        "µs per cf-step: time over the rows' iterations summed; searches that stop early and "
        "rows that converge at once count only the steps they took.",
    ]
    return [table, targets]
