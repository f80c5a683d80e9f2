"""Benchmark 6: mixed precision (bf16, and fp16 on CUDA) vs fp32, for the search and for training.

The search comparison uses the converging setting (most samples reach tau early), so validity is
a real check: a counterfactual found under autocast must still pass tau when the fp32 model
re-evaluates it.
"""

from __future__ import annotations

import statistics
from functools import partial

import torch

from benchmarks.common import Case, Context, Table, fmt_ratio, fmt_seconds, side_by_side
from benchmarks.config import CONVERGING_SEARCH, MODEL_NAMES
from benchmarks.fixtures import DOMAIN, factuals, trained_model
from benchmarks.overhead import Trainer
from cfbook.objectives import FullObjective
from cfbook.search.generators import CounterfactualResult, NativeGenerator
from cfbook.training.log import EpochRecord

TITLE = "6. Mixed precision: bf16 / fp16 vs fp32"


def amp_modes(device: torch.device) -> list[str | None]:
    """fp32 (None) first, then what ``device`` supports."""
    return [None, "bf16"] + (["fp16"] if device.type == "cuda" else [])


def _label(amp: str | None) -> str:
    return amp or "fp32"


def _valid_in_fp32(
    model: torch.nn.Module, res: CounterfactualResult, target: torch.Tensor, tau: float
) -> float:
    """Share of the counterfactuals reported valid that the fp32 model also finds valid."""
    with torch.no_grad():
        prob = model(res.counterfactual).softmax(1).gather(1, target[:, None]).squeeze(1)
    valid = res.valid
    return float(((prob >= tau) & valid).sum()) / max(int(valid.sum()), 1)


def _search_table(ctx: Context) -> Table:
    table = Table(
        f"NativeGenerator under autocast (maxiter {ctx.sizes.maxiter}, converging setting)",
        [
            "model",
            "amp",
            "nce",
            "time",
            "speed-up vs fp32",
            "valid %",
            "still valid in fp32",
            "mean iters",
            "repeats",
        ],
    )
    slower = flipped = False
    for name in MODEL_NAMES:
        model = trained_model(ctx, name)
        nce = ctx.sizes.precision_nce[name]
        x, target = factuals(ctx, model, nce)
        settings = CONVERGING_SEARCH[name]
        # The compiled step runs without autocast only: all modes use the eager step here, so
        # the speed-ups are those of the precision alone.
        gens = {
            _label(a): NativeGenerator(maxiter=ctx.sizes.maxiter, amp=a, compile=False, **settings)
            for a in amp_modes(ctx.device)
        }
        cases = {
            k: Case(partial(g.generate, model, x, target, domain=DOMAIN)) for k, g in gens.items()
        }
        timings = side_by_side(ctx, cases, label=f"precision search {name} nce={nce}")
        base = timings["fp32"].median
        for k, t in timings.items():
            res = t.result
            still_valid = _valid_in_fp32(model, res, target, settings["tau"])
            slower |= t.median > base
            flipped |= still_valid < 1.0
            table.add(
                name,
                k,
                nce,
                fmt_seconds(t.median),
                fmt_ratio(base / t.median),
                f"{100 * float(res.valid.float().mean()):.1f}",
                f"{100 * still_valid:.1f}%",
                f"{float(res.iterations.float().mean()):.1f}",
                t.repeats,
            )
    table.notes.append(
        "Settings: "
        + "; ".join(
            f"{n}: tau {s['tau']}, step_size {s['step_size']}" for n, s in CONVERGING_SEARCH.items()
        )
        + ". Still valid in fp32: share of the counterfactuals reported valid whose target "
        "probability is >= tau when the fp32 model re-evaluates them. Every mode runs the eager "
        "step (compile=False): the compiled step does not run under autocast."
    )
    if slower:
        table.notes.append(
            "Speed-ups below 1x: autocast re-casts weights and activations on every forward; at "
            "these small batch sizes the casts cost more than the lower precision saves."
        )
    if flipped:
        table.notes.append(
            "Still valid in fp32 < 100%: a search under autocast stops as soon as the low-"
            "precision probability reaches tau, so counterfactuals sit at the threshold and "
            "rounding can put a few just below it in fp32."
        )
    return table


def _training_table(ctx: Context) -> Table:
    table = Table(
        f"One FullObjective epoch with amp (training passes and search; maxiter "
        f"{ctx.sizes.maxiter})",
        [
            "model",
            "N / batch / nce",
            "amp",
            "s/epoch",
            "speed-up vs fp32",
            "valid %",
            "avg_iter",
            "train loss",
            "epochs",
        ],
    )
    for name in MODEL_NAMES:
        setup = ctx.sizes.training[name]
        trainers = {
            _label(a): Trainer(ctx, name, FullObjective(), setup, amp=a, compile=False)
            for a in amp_modes(ctx.device)
        }
        records: dict[str, list[EpochRecord]] = {k: [] for k in trainers}
        for round_ in range(ctx.sizes.training_rounds + 1):  # round 0 is the warm-up
            order = list(trainers) if round_ % 2 == 0 else list(trainers)[::-1]
            for k in order:
                record = trainers[k].epoch()
                if round_:
                    records[k].append(record)
        seconds = {k: statistics.median(r.time_taken for r in v) for k, v in records.items()}
        ctx.log(
            "precision training "
            + name
            + ": "
            + ", ".join(f"{k} {v:.2f} s" for k, v in seconds.items())
        )
        for k, recs in records.items():
            last = recs[-1]
            table.add(
                name,
                f"{setup.n} / {setup.batch_size} / {setup.nce}",
                k,
                f"{seconds[k]:.2f}",
                fmt_ratio(seconds["fp32"] / seconds[k]),
                f"{100 * last.percent_valid:.1f}",
                f"{last.avg_iter:.1f}",
                f"{last.train_loss:.3f}",
                len(recs),
            )
    table.notes.append(
        "Each amp mode trains its own copy of the same partially trained model; epochs "
        "alternate between modes after a warm-up epoch each. Default search settings (eager "
        "step, as under autocast), so valid % is what training sees."
    )
    return table


def run(ctx: Context) -> list[Table]:
    return [_search_table(ctx), _training_table(ctx)]
