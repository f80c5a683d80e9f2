"""Benchmark 12 (CPU): cfbook's search against ReLax's ``VanillaCF``, the JAX library of batched
counterfactual search, on the same problem, measured side by side in one run.

The parent writes one problem (a partially trained 784-32-10 MLP's weights, MNIST digits and
target classes) and starts every measurement in a process of its own (``benchmarks.peer_side``),
so torch's and XLA's thread pools never meet and a first call is first in its process. Both
sides take a fixed number of steps on every row and clip to the domain every step. The
algorithms differ (ReLax: RMSprop on a KL loss plus a squared distance; cfbook: plain descent
on cross-entropy, the energy penalty and an L1 distance, with convergence bookkeeping), so this
compares the cost of a step of each library's own search, not the counterfactuals found.

Needs the ``peers`` extra (``pip install -e '.[peers]'``: jax, jax-relax and the two packages it
imports without declaring them, nbdev and fastcore); skipped with a line saying so without it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

from benchmarks.common import Context, Skipped, Table, fmt_ratio, fmt_seconds
from benchmarks.fixtures import SEED, trained_model
from cfbook.data import load_mnist
from cfbook.evaluation.metrics import predict
from cfbook.search import onednn, prepared
from cfbook.search.generators import CPU_CHUNK_ELEMENTS, chunk_rows

TITLE = "12. Against ReLax: the same search problem, side by side"
PEERS = ("jax", "relax", "nbdev", "fastcore")
SIZES = {False: ((100, 1000, 10000), (30, 100)), True: ((100, 1000), (10,))}  # by ctx.quick
# Each side is measured this many times per size, in alternating order (A B C, then C B A), each
# time in a fresh process: on a shared machine the load drifts over minutes, and one process per
# side once moved ReLax's own time by 1.75x between two runs of the benchmark (2026-12-06).
ROUNDS = 3


def missing_peers() -> list[str]:
    """The modules of the ``peers`` extra that this environment lacks."""
    return [name for name in PEERS if importlib.util.find_spec(name) is None]


def write_problem(ctx: Context, n: int, path: Path) -> None:
    """The MLP's weights (the benchmarks' partially trained one), ``n`` digits and targets drawn
    among the classes the model does not predict, as ``benchmarks.fixtures.factuals`` draws
    them."""
    model = trained_model(ctx, "mlp", torch.device("cpu"))
    data = load_mnist(n, device="cpu", verbose=False)
    generator = torch.Generator().manual_seed(SEED)
    shift = torch.randint(1, 10, (n,), generator=generator)
    target = (predict(model, data.x[:n]) + shift) % 10
    weights = {k: v.numpy() for k, v in model.state_dict().items()}
    np.savez(
        path,
        w1=weights["0.weight"],
        b1=weights["0.bias"],
        w2=weights["2.weight"],
        b2=weights["2.bias"],
        x=data.x[:n].numpy(),
        target=target.numpy(),
    )


def measure(ctx: Context, side: str, problem: Path, n: int, steps: int, **options: str) -> dict:
    """One measurement in a fresh process: its first call and the median of the later ones.
    cfbook's searches see no prepared step unless ``prepared`` names the folder of one."""
    command = [sys.executable, "-m", "benchmarks.peer_side", side, str(problem)]
    command += ["--n", str(n), "--steps", str(steps)]
    command += ["--repeats", str(ctx.sizes.max_repeats), "--budget", str(ctx.sizes.budget_s)]
    command += ["--threads", str(torch.get_num_threads())]
    env = {**os.environ, "CFBOOK_PREPARED_DIR": prepared.OFF}
    for key, value in options.items():
        if key == "cache":  # inductor's on-disk cache: a fresh folder makes a cold compile
            env["TORCHINDUCTOR_CACHE_DIR"] = value
        elif key == "prepared":
            env["CFBOOK_PREPARED_DIR"] = value
        else:  # an empty value: a flag
            command += [f"--{key}", value] if value else [f"--{key}"]
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{side} side failed (n={n}, steps={steps}):\n{done.stderr[-2000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if side == "prepare":
        ctx.log(f"peers: prepared step built in {result['seconds']:.1f} s")
        return result
    if side == "products":
        ctx.log(f"peers products {options} n={n}: {result}")
        return result
    result["median"] = float(np.median(result["times"]))
    ctx.log(
        f"peers {side} {options or ''} n={n} steps={steps}: first {result['first']:.3f} s, "
        f"then {result['median']:.4f} s (median of {len(result['times'])})"
    )
    return result


def combined(results: list[dict]) -> dict:
    """One side's measurements over the rounds: the median of their first calls and of their
    medians; the first round's steps per row and digest."""
    return {
        **results[0],
        "first": float(np.median([r["first"] for r in results])),
        "median": float(np.median([r["median"] for r in results])),
    }


def run(ctx: Context) -> list[Table]:
    if ctx.device.type != "cpu":
        raise Skipped("CPU only (ReLax's side runs jax on the CPU here)")
    missing = missing_peers()
    if missing:
        raise Skipped(
            f"needs the peers extra: pip install -e '.[peers]' ({', '.join(missing)} missing)"
        )
    rows, step_counts = SIZES[ctx.quick]
    speed = Table(
        "Milliseconds per search, later calls (median); ratio: cfbook / ReLax",
        [
            "N, steps",
            "ReLax jit(vmap)",
            "cfbook default",
            "ratio",
            "default, BLAS products",
            "ratio",
            "default, one batch",
            "ratio",
            "default, prepared step",
            "ratio",
            "cfbook compile=True",
            "ratio",
        ],
    )
    first = Table(
        "The first call in a process (tracing and compiling included)",
        [
            "N, steps",
            "ReLax",
            "cfbook default",
            "ratio",
            "default, prepared step",
            "ratio",
            "cfbook compile=True, cold cache",
            "warm cache",
            "default's steps per row",
            "chunks' bits = one batch's",
        ],
    )
    library_names = {"blas": "torch, MKL", "onednn": "torch, oneDNN (cfbook)", "xla": "JAX, XLA"}
    products = Table(
        "The first layer's two products alone, microseconds per call (median): forward "
        "x @ w1.T + b1 (N x 784 by 784 x 32) / backward g @ w1 (N x 32 by 32 x 784)",
        ["N", *library_names.values(), "MKL / oneDNN", "MKL / XLA"],
    )
    with tempfile.TemporaryDirectory() as tmp:
        problem = Path(tmp) / "problem.npz"
        write_problem(ctx, max(rows), problem)
        folder = str(Path(tmp) / "prepared")
        fresh = str(Path(tmp) / "inductor-prepare")  # built twice: inductor's cache cold, warm
        cold_build = measure(ctx, "prepare", problem, 0, 0, prepared=folder, cache=fresh)
        built = measure(ctx, "prepare", problem, 0, 0, prepared=folder, cache=fresh)
        for steps in step_counts:
            for n in rows:
                cache = str(Path(tmp) / f"inductor-{n}-{steps}")
                cold = measure(ctx, "cfbook", problem, n, steps, compile="true", cache=cache)
                sides = {
                    "relax": ("relax", {}),
                    "default": ("cfbook", {"compile": "auto"}),
                    "blas": ("cfbook", {"compile": "auto", "blas": ""}),
                    "whole": ("cfbook", {"compile": "auto", "batch": str(n)}),
                    "ready": ("cfbook", {"compile": "auto", "prepared": folder}),
                    "warm": ("cfbook", {"compile": "true", "cache": cache}),
                }
                runs: dict[str, list[dict]] = {name: [] for name in sides}
                for r in range(1 if ctx.quick else ROUNDS):  # A B C, then C B A
                    for name in list(sides) if r % 2 == 0 else reversed(sides):
                        side, options = sides[name]
                        runs[name].append(measure(ctx, side, problem, n, steps, **options))
                relax, default, blas, whole, ready, warm = (combined(runs[name]) for name in sides)
                speed.add(
                    f"{n:,}, {steps}",
                    fmt_seconds(relax["median"]),
                    fmt_seconds(default["median"]),
                    fmt_ratio(default["median"] / relax["median"]),
                    fmt_seconds(blas["median"]),
                    fmt_ratio(blas["median"] / relax["median"]),
                    fmt_seconds(whole["median"]),
                    fmt_ratio(whole["median"] / relax["median"]),
                    fmt_seconds(ready["median"]),
                    fmt_ratio(ready["median"] / relax["median"]),
                    fmt_seconds(warm["median"]),
                    fmt_ratio(warm["median"] / relax["median"]),
                )
                first.add(
                    f"{n:,}, {steps}",
                    fmt_seconds(relax["first"]),
                    fmt_seconds(default["first"]),
                    fmt_ratio(default["first"] / relax["first"]),
                    fmt_seconds(ready["first"]),
                    fmt_ratio(ready["first"] / relax["first"]),
                    fmt_seconds(cold["first"]),
                    fmt_seconds(warm["first"]),
                    f"{default['mean_steps']:.1f}",
                    "yes" if default["digest"] == whole["digest"] else "NO",
                )
        for n in rows:
            times = {
                name: measure(ctx, "products", problem, n, 0, library=name)
                for name in library_names
            }
            both = {name: t["forward"] + t["backward"] for name, t in times.items()}
            products.add(
                f"{n:,}",
                *(
                    f"{t['forward'] * 1e6:,.0f} / {t['backward'] * 1e6:,.0f}"
                    for t in times.values()
                ),
                fmt_ratio(both["blas"] / both["onednn"]),
                fmt_ratio(both["blas"] / both["xla"]),
            )
    speed.notes.append(
        f"Same MLP weights (784-32-10), digits and targets on both sides; each cell the median "
        f"over {1 if ctx.quick else ROUNDS} rounds, each side in a fresh "
        "process per round, in alternating order (A B C, then C B A), each round's time the "
        "median of its later calls; each side in its own "
        "process, torch with the run's thread count and XLA with its default pool over every "
        "core (the same two threads on a 2-core machine); every row takes the given number of "
        "steps (cfbook "
        "at tau = 1.0, so no row stops early: the last column of the next table checks it) and "
        "both clip to [-1, 1] every step. ReLax 0.2.9's VanillaCF runs under jax.jit(vmap), "
        "its progress bar included, as the library ships it. cfbook default: "
        "NativeGenerator(maxiter=steps, tau=1.0), compile='auto', which decides from the call's "
        "own rows x steps, on a machine without prepared steps (CFBOOK_PREPARED_DIR=off), "
        f"in chunks of at most {CPU_CHUNK_ELEMENTS:,} numbers (CPU_CHUNK_ELEMENTS; "
        f"{chunk_rows(None, torch.empty(10_000, 784)):,} rows of 784 at N = 10,000). "
        "Default, BLAS products: the same call with oneDNN turned off "
        "(torch.backends.mkldnn.enabled = False), so that its matrix products are MKL's, as "
        "before 2026-12-06 (cfbook.search.onednn; the last table times the products alone). "
        "Default, one batch: the same call with cf_batchsize = N, as the default "
        "searched before 2026-12-05 (the next table's last column compares the two results' "
        "bits). "
        "Default, prepared step: the same call where NativeGenerator.prepare has built the "
        "step for this layout beforehand (once, for every row count and step count, in a "
        f"process of its own: {cold_build['seconds']:.1f} s with inductor's cache cold, the "
        f"first compile on a machine, {built['seconds']:.1f} s with it warm), "
        "so that compile='auto' takes it with no compile (cfbook.search.prepared)."
    )
    first.notes.append(
        "Cold cache: inductor's on-disk cache in a fresh folder; warm: a second process on that "
        "folder. The default's first call compiles only where compile='auto' decides to; with a "
        "prepared step it loads the package instead (milliseconds). "
        "Ratio: the default's first call over ReLax's, whose first call includes its jit "
        "compile: what a lone search in a fresh process costs on each side. The issue's targets "
        "are the later calls' (the table above)."
    )
    products.notes.append(
        "Each library in its own process with the run's thread count (XLA: its default pool), "
        "the problem's weights and digits; a random g. Ratios: the two products' time together. "
        "MKL picks its code by the processor's vendor, oneDNN by its instruction sets (on an "
        "AMD EPYC with AVX-512, MKL_VERBOSE names no AVX-512 path where ONEDNN_VERBOSE names "
        "avx512_core). cfbook's search sends a product to oneDNN from "
        f"{onednn.MIN_MACS:,} multiply-adds (cfbook.search.onednn.MIN_MACS; this layer from "
        f"{-(-onednn.MIN_MACS // (784 * 32)):,} rows), where the fixed cost of a oneDNN call "
        "no longer outweighs its speed in any layer measured, so at 100 rows its products "
        "stay MKL's."
    )
    return [speed, first, products]
