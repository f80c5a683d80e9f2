"""Benchmark 12 (CPU): cfbook's search against ReLax's ``VanillaCF``, the JAX library of batched
counterfactual search, on the same problem, measured side by side in one run.

cfbook searches with its eager executor (``NativeGenerator()``, the default) and with its
compiled one (``compile=True``): its first call in a process, with inductor's cache cold and
warm, beside ReLax's first call (which compiles with XLA), and the later calls of each.

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
from typing import Any

import numpy as np
import torch

from benchmarks.common import Context, Skipped, Table, Value, check, fmt_ratio, fmt_seconds
from benchmarks.fixtures import SEED, trained_model
from cfbook.book.benchmarks import benchmark_record
from cfbook.data import load_mnist
from cfbook.evaluation.metrics import predict
from cfbook.search.generators import CPU_CHUNK_ELEMENTS, chunk_rows

TITLE = "12. Against ReLax: the same search problem, side by side"
PEERS = ("jax", "relax", "nbdev", "fastcore")
ROOT = Path(__file__).resolve().parents[1]
SIZES = {False: ((100, 1000, 10000), (30, 100)), True: ((100, 1000), (10,))}  # by ctx.quick
# Each side is measured this many times per size, in alternating order (A B C, then C B A), each
# time in a fresh process: on a shared machine the load drifts over minutes.
ROUNDS = 3
TARGET = 1.0  # the compiled executor's later calls / ReLax's
TARGET_ROWS = (1000, 10000)
# The table of the eager default before the search's rewrite, carried from record to record.
BEFORE_TITLE = "The eager default before the rewrite"


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


def measure(
    ctx: Context, side: str, problem: Path, n: int, steps: int, cache: str | None = None
) -> dict[str, Any]:
    """One measurement in a fresh process: its first call and the median of the later ones.
    ``side``: "relax", "eager" or "compiled", or "relax products" or "torch products" (one
    step's first-layer products alone); ``cache``: inductor's on-disk cache folder (a fresh one
    makes a cold compile)."""
    library = "relax" if side.startswith("relax") else "cfbook"
    command = [sys.executable, "-m", "benchmarks.peer_side", library, str(problem)]
    command += ["--n", str(n), "--steps", str(steps)]
    if side.endswith("products"):
        command.append("--products")
    command += ["--repeats", str(ctx.sizes.max_repeats), "--budget", str(ctx.sizes.budget_s)]
    command += ["--threads", str(torch.get_num_threads())]
    if side == "compiled":
        command.append("--compile")
    env = dict(os.environ)
    if cache is not None:
        env["TORCHINDUCTOR_CACHE_DIR"] = cache
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{side} side failed (n={n}, steps={steps}):\n{done.stderr[-2000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["median"] = float(np.median(result["times"]))
    ctx.log(
        f"peers {side} n={n} steps={steps}: first {result['first']:.3f} s, "
        f"then {result['median']:.4f} s (median of {len(result['times'])})"
    )
    return result


def combined(results: list[dict]) -> dict:
    """One side's measurements over the rounds: the median of their first calls and of their
    medians; the first round's steps per row."""
    return {
        **results[0],
        "first": float(np.median([r["first"] for r in results])),
        "median": float(np.median([r["median"] for r in results])),
    }


def _value(cell: dict[str, Any]) -> Value:
    """A recorded cell as a table takes it again: its text, its value, its unit."""
    return Value(cell["text"], cell["value"], cell.get("unit"))


def recorded_before(record: dict[str, Any] | None) -> Table | None:
    """The eager default's times and ratio to ReLax before the search's rewrite, as this
    benchmark's ``record`` (``benchmarks/results.json``) holds them: its ``BEFORE_TITLE`` table,
    copied, where the record has one (a record made since), else its first table's "ReLax
    jit(vmap)", "cfbook default" and ratio columns (the record made before the rewrite, whose
    default was its eager search). None without either."""
    if record is None:
        return None
    for table in record["tables"]:
        if table["title"].startswith(BEFORE_TITLE):
            return Table(
                table["title"],
                table["columns"],
                [[_value(c) for c in row] for row in table["rows"]],
                list(table["notes"]),
            )
    speed = record["tables"][0] if record["tables"] else None
    if speed is None or "cfbook default" not in speed["columns"]:
        return None
    at = [speed["columns"].index(c) for c in ("N, steps", "ReLax jit(vmap)", "cfbook default")]
    made = record["provenance"]
    how = f"; {made['note']}" if made.get("note") else ""
    before = Table(
        f"{BEFORE_TITLE} (recorded {made['when']}, {made['machine']}{how})",
        ["N, steps", "ReLax jit(vmap)", "cfbook default", "ratio"],
        [[_value(row[i]) for i in (*at, at[-1] + 1)] for row in speed["rows"]],
    )
    before.notes.append(
        "The eager default (NativeGenerator()) before the search was rewritten as one step "
        "function run eagerly or compiled, as that run recorded it; carried over from "
        "benchmarks/results.json at each run. Ratios, not times, compare across runs."
    )
    return before


def run(ctx: Context) -> list[Table]:
    if ctx.device.type != "cpu":
        raise Skipped("CPU only (ReLax's side runs jax on the CPU here)")
    missing = missing_peers()
    if missing:
        raise Skipped(
            f"needs the peers extra: pip install -e '.[peers]' ({', '.join(missing)} missing)"
        )
    rows, step_counts = SIZES[ctx.quick]
    rounds = 1 if ctx.quick else ROUNDS
    before = recorded_before(benchmark_record("peers", "cpu"))
    ratio_before = {} if before is None else {row[0]["text"]: row[-1] for row in before.rows}
    speed = Table(
        "Milliseconds per search, later calls (median); ratio: cfbook / ReLax",
        [
            "N, steps",
            "ReLax jit(vmap)",
            "cfbook eager (default)",
            "ratio",
            "eager ratio before",
            "cfbook compiled",
            "ratio",
        ],
    )
    first = Table(
        "The first call in a process (tracing and compiling included); ratio: cfbook / ReLax",
        [
            "N, steps",
            "ReLax",
            "cfbook eager",
            "ratio",
            "compiled, cold cache",
            "ratio",
            "compiled, warm cache",
            "ratio",
            "steps per row (eager / compiled)",
        ],
    )
    products = Table(
        "Milliseconds per step: the first layer's two matrix products alone (x W1^T and g W1), "
        "and the rest of a step at 100 steps; ratio: torch / XLA",
        ["N", "XLA", "torch", "ratio", "rest of a step: ReLax", "cfbook compiled"],
    )
    per_step: dict[int, dict[str, float]] = {}
    targets = Table("Targets", ["target", "measured", "status"])
    with tempfile.TemporaryDirectory() as tmp:
        problem = Path(tmp) / "problem.npz"
        write_problem(ctx, max(rows), problem)
        for steps in step_counts:
            for n in rows:
                cache = str(Path(tmp) / f"inductor-{n}-{steps}")
                cold = measure(ctx, "compiled", problem, n, steps, cache)
                sides = {"relax": None, "eager": None, "compiled": cache}  # compiled: warm cache
                runs: dict[str, list[dict]] = {name: [] for name in sides}
                for r in range(rounds):  # A B C, then C B A
                    for name in list(sides) if r % 2 == 0 else reversed(sides):
                        runs[name].append(measure(ctx, name, problem, n, steps, sides[name]))
                relax, eager, compiled = (combined(runs[name]) for name in sides)
                key = f"{n:,}, {steps}"
                ratio = compiled["median"] / relax["median"]
                speed.add(
                    key,
                    fmt_seconds(relax["median"]),
                    fmt_seconds(eager["median"]),
                    fmt_ratio(eager["median"] / relax["median"]),
                    _value(ratio_before[key]) if key in ratio_before else "-",
                    fmt_seconds(compiled["median"]),
                    fmt_ratio(ratio),
                )
                first.add(
                    key,
                    fmt_seconds(relax["first"]),
                    fmt_seconds(eager["first"]),
                    fmt_ratio(eager["first"] / relax["first"]),
                    fmt_seconds(cold["first"]),
                    fmt_ratio(cold["first"] / relax["first"]),
                    fmt_seconds(compiled["first"]),
                    fmt_ratio(compiled["first"] / relax["first"]),
                    f"{eager['mean_steps']:.1f} / {compiled['mean_steps']:.1f}",
                )
                if steps == max(step_counts):
                    per_step[n] = {
                        "relax": relax["median"] / steps,
                        "compiled": compiled["median"] / steps,
                    }
                if n in TARGET_ROWS:
                    targets.add(
                        f"compiled, after its first call, <= {TARGET:.1f}x ReLax ({key} steps)",
                        fmt_ratio(ratio),
                        check(ratio <= TARGET),
                    )
        for n in rows:
            runs = {"relax products": [], "torch products": []}
            for r in range(rounds):
                for name in list(runs) if r % 2 == 0 else reversed(runs):
                    runs[name].append(measure(ctx, name, problem, n, max(step_counts)))
            xla, aten = (combined(runs[name])["median"] / max(step_counts) for name in runs)
            products.add(
                f"{n:,}",
                fmt_seconds(xla),
                fmt_seconds(aten),
                fmt_ratio(aten / xla),
                fmt_seconds(per_step[n]["relax"] - xla),
                fmt_seconds(per_step[n]["compiled"] - aten),
            )
    products.notes.append(
        "Each side in a fresh process per round, as above: XLA under jax.jit, a fori_loop "
        "(ReLax's side), and torch's matrix product (cfbook's, eager and compiled alike) with "
        "the run's threads, as many steps as the longest search above, each step the N rows "
        "times the first layer's weights (32 x 784) and the 32-wide result times them again, "
        "feeding the next step. Rest of a step: the search's time per step at that many steps "
        "less these products (the second layer, the loss, the update and the bookkeeping)."
    )
    speed.notes.append(
        "Same MLP weights (784-32-10), digits and targets on both sides, each side in a fresh "
        "process per round (torch with the run's thread count, XLA with its default pool over "
        f"every core); each cell the median over {rounds} round(s) in alternating order (A B C, "
        "then C B A), each round's time the median of its later calls. Every row takes the "
        "given number of steps (cfbook at tau = 1.0, so no row stops early: the next table's "
        "last column checks it) and both clip to [-1, 1] every step. ReLax 0.2.9's VanillaCF "
        "runs under jax.jit(vmap), its progress bar included, as the library ships it. cfbook "
        "eager: NativeGenerator(maxiter=steps, tau=1.0), the default executor, in chunks of at "
        f"most {CPU_CHUNK_ELEMENTS:,} numbers (CPU_CHUNK_ELEMENTS; "
        f"{chunk_rows(None, torch.empty(10_000, 784)):,} rows of 784 at N = 10,000). cfbook "
        "compiled: the same with compile=True, in a process whose inductor cache is warm; the "
        "next table has its first calls."
    )
    speed.notes.append(
        f"Eager ratio before: the eager default's ratio as recorded before the search's rewrite "
        f"({'the table below' if before else 'none recorded'})."
    )
    first.notes.append(
        "ReLax's first call includes its jit compile by XLA; cfbook's eager one compiles "
        "nothing. Compiled, cold cache: inductor's on-disk cache in a fresh folder, as on a new "
        "machine (one process per size); warm cache: later processes on that folder, as any "
        "later run (the median over the rounds). Steps per row: the mean number of steps the "
        "rows took, which tau = 1.0 makes the given number."
    )
    return [speed, first, products, *([before] if before else []), targets]
