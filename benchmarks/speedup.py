"""Benchmark 5 (GPU runs only): the same workloads on this machine's CPU and on its GPU.

Both sides use identical weights, factuals and targets and are timed side by side in one run,
so the speed-up does not mix machines or days.
"""

from __future__ import annotations

from functools import partial

import torch

from benchmarks.common import (
    Case,
    Context,
    Skipped,
    Table,
    fmt_ratio,
    fmt_seconds,
    side_by_side,
)
from benchmarks.config import MODEL_NAMES
from benchmarks.fixtures import DOMAIN, factuals, trained_model
from benchmarks.overhead import Trainer
from cfbook.device import describe_device
from cfbook.objectives import FullObjective
from cfbook.search.generators import NativeGenerator

TITLE = "5. CPU vs GPU: speed-up of the same workloads"
CPU = torch.device("cpu")


def _search_case(ctx: Context, name: str, nce: int, device: torch.device) -> Case:
    model = trained_model(ctx, name, device)
    x, target = factuals(ctx, model, nce, device)
    gen = NativeGenerator(maxiter=ctx.sizes.maxiter)
    warm = NativeGenerator(maxiter=2)
    return Case(
        partial(gen.generate, model, x, target, domain=DOMAIN),
        warmup=partial(warm.generate, model, x, target, domain=DOMAIN),
        device=device,
    )


def run(ctx: Context) -> list[Table]:
    if ctx.device.type != "cuda":
        raise Skipped("needs a CUDA GPU; the GPU run compares with the CPU")
    table = Table(
        f"Wall-clock time, CPU vs GPU ({describe_device(CPU)} vs {describe_device(ctx.device)})",
        ["workload", "CPU", "GPU", "GPU speed-up", "repeats (CPU / GPU)"],
    )
    for name in MODEL_NAMES:
        nce = max(ctx.sizes.throughput_nce[name])
        cases = {d.type: _search_case(ctx, name, nce, d) for d in (CPU, ctx.device)}
        t = side_by_side(ctx, cases, label=f"speedup search {name}", min_repeats=1)
        table.add(
            f"NativeGenerator {name}, nce {nce}, maxiter {ctx.sizes.maxiter}",
            fmt_seconds(t["cpu"].median),
            fmt_seconds(t["cuda"].median),
            fmt_ratio(t["cpu"].median / t["cuda"].median),
            f"{t['cpu'].repeats} / {t['cuda'].repeats}",
        )
    for name in MODEL_NAMES:
        setup = ctx.sizes.training[name]
        trainers = {
            d.type: Trainer(ctx.on(d), name, FullObjective(), setup) for d in (CPU, ctx.device)
        }
        cases = {k: Case(tr.epoch, device=torch.device(k)) for k, tr in trainers.items()}
        t = side_by_side(ctx, cases, label=f"speedup training {name}", min_repeats=1)
        table.add(
            f"FullObjective epoch {name}, N {setup.n}, nce {setup.nce}",
            fmt_seconds(t["cpu"].median),
            fmt_seconds(t["cuda"].median),
            fmt_ratio(t["cpu"].median / t["cuda"].median),
            f"{t['cpu'].repeats} / {t['cuda'].repeats}",
        )
    table.notes.append(
        "Same weights, factuals, targets and default search settings on both devices; the "
        "CPU side uses all the cores torch sees on the GPU machine. Training epochs are "
        "wall-clock per counterfactual_training call of one epoch (search + training)."
    )
    return [table]
