"""Benchmark 9: the compiled executor (``NativeGenerator(compile=True)``) against the eager one
(``compile=False``, the default) and against bare passes.

Three tables:

1. Time per counterfactual-step of the whole search (``NativeGenerator.generate``) with the eager
   and the compiled executor, next to bare forward+backward passes over the same rows, for each
   model, batch size and thread count, timed side by side in one run.
2. Compile time on its own: the first search in a fresh process with a cold inductor cache (a new
   machine) and with a warm one (any later run), against the same process's later searches.
3. CT training epochs with the compile cost included: each generator trains in a fresh process,
   so the compiled run pays for its compile inside its first epoch.

A counterfactual-step is one row searched for one iteration: the default settings make every row
of these searches take all ``maxiter`` iterations, so a search costs N x maxiter of them.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import torch
from torch import Tensor, nn

from benchmarks.common import Case, Context, Table, check, fmt_ratio, fmt_seconds, side_by_side
from benchmarks.config import FULL, MODEL_NAMES, QUICK
from benchmarks.efficiency import bare_passes
from benchmarks.fixtures import DOMAIN, factuals, fresh_model, trained_model
from benchmarks.overhead import Trainer
from cfbook.objectives import FullObjective
from cfbook.search.generators import NativeGenerator

TITLE = "9. Compiled search step: time per counterfactual-step, compile time, training epochs"
TARGET = 1.5  # whole compiled MLP search at N = 1,024 / its bare forward+backward passes
TARGET_N = 1024
ROOT = Path(__file__).resolve().parents[1]


def _inputs(ctx: Context, model: nn.Module, n: int) -> tuple[Tensor, Tensor]:
    """``n`` factuals and targets; beyond the loaded data the same rows repeat (the search's
    cost per row does not depend on which digit it is)."""
    have = min(n, ctx.sizes.n_data)
    x, target = factuals(ctx, model, have)
    reps = -(-n // have)
    return x.repeat(reps, 1)[:n], target.repeat(reps)[:n]


def _bare(model: nn.Module, x: Tensor, grad_out: Tensor, maxiter: int, chunk: int) -> None:
    """``maxiter`` bare passes over all rows, ``chunk`` rows at a time (as the search does)."""
    for s in range(0, x.shape[0], chunk):
        rows = min(chunk, x.shape[0] - s)
        bare_passes(model, x[s : s + rows], [rows] * maxiter, grad_out[s : s + rows])


def _nothing() -> None:
    """Warm-up of a case whose first call already ran (or needs none)."""


def graphs_compiled() -> int:
    """Graphs torch.compile has compiled in this process so far (dynamo's own count)."""
    return int(torch._dynamo.utils.counters["stats"]["unique_graphs"])


def _per_step(seconds: float, n: int, maxiter: int) -> str:
    return f"{1e6 * seconds / (n * maxiter):.2f}"


def _step_table(ctx: Context, targets: Table) -> Table:
    sizes = ctx.sizes
    threads = sizes.fused_threads if ctx.device.type == "cpu" else (torch.get_num_threads(),)
    table = Table(
        "Whole search vs bare passes, µs per counterfactual-step (defaults: tau 0.75, step 0.1; "
        "every row takes all maxiter iterations)",
        [
            "model",
            "N",
            "threads",
            "maxiter",
            "eager µs",
            "compiled µs",
            "bare µs",
            "eager / bare",
            "compiled / bare",
            "compiled vs eager",
            "repeats",
        ],
    )
    before = torch.get_num_threads()
    try:
        for name in MODEL_NAMES:
            model = trained_model(ctx, name)
            for n in sizes.fused_n[name]:
                maxiter = sizes.fused_maxiter[name][n]
                chunk = min(n, sizes.fused_chunk[name])
                x, target = _inputs(ctx, model, n)
                grad_out = torch.randn(n, 10, generator=torch.Generator().manual_seed(1))
                grad_out = grad_out.to(ctx.device)
                for t in threads:
                    if t == 1 and n > sizes.fused_one_thread_max[name]:
                        continue
                    torch.set_num_threads(t)
                    _step_row(
                        ctx, table, targets, name, model, x, target, grad_out, maxiter, chunk, t
                    )
    finally:
        torch.set_num_threads(before)
    table.notes += [
        "eager: NativeGenerator(compile=False), the default; compiled: compile=True (the MLP "
        "only: for ResNet-18 the model's passes are nearly all of the time, and compiling them "
        "would take minutes), after its first call (table 2 times the compile). Both include "
        "the whole generate() call (argument checks, compaction reads, the final convergence "
        "check), which is why a search at maxiter 1-3 sits above its bare passes by about one "
        "extra forward pass.",
        "bare: model(x) and autograd.grad w.r.t. x with a fixed output gradient, maxiter times "
        "over the same rows (in chunks of cf_batchsize where the search uses chunks).",
        f"Larger N than the {sizes.n_data} loaded digits repeats them. ResNet-18 searches in "
        f"chunks of {sizes.fused_chunk['resnet18']} rows (cf_batchsize), so its N = 10,000 costs "
        "about ten times its chunk-sized search; to keep the run short it is timed once, with "
        "two threads only. The peers benchmark times the same MLP search against ReLax.",
    ]
    return table


def _step_row(
    ctx: Context,
    table: Table,
    targets: Table,
    name: str,
    model: nn.Module,
    x: Tensor,
    target: Tensor,
    grad_out: Tensor,
    maxiter: int,
    chunk: int,
    threads: int,
) -> None:
    n = x.shape[0]
    kwargs = {"domain": DOMAIN}
    gens = {"eager": NativeGenerator(maxiter=maxiter, cf_batchsize=chunk, compile=False)}
    if name == "mlp":
        gens["compiled"] = NativeGenerator(maxiter=maxiter, cf_batchsize=chunk, compile=True)
    heavy = n * maxiter > ctx.sizes.fused_heavy[name]
    cases = {
        k: Case(
            partial(g.generate, model, x, target, **kwargs),
            warmup=partial(g.generate, model, x[:chunk], target[:chunk], **kwargs),
        )
        for k, g in gens.items()
    }
    cases["bare"] = Case(
        partial(_bare, model, x, grad_out, maxiter, chunk), warmup=_nothing if heavy else None
    )
    timings = side_by_side(
        ctx,
        cases,
        label=f"fused {name} N={n} threads={threads}",
        min_repeats=1 if heavy else None,
        max_repeats=1 if heavy else None,
    )
    bare = timings["bare"].median
    eager = timings["eager"].median
    compiled = timings["compiled"].median if "compiled" in timings else None
    table.add(
        name,
        n,
        threads,
        maxiter,
        _per_step(eager, n, maxiter),
        "-" if compiled is None else _per_step(compiled, n, maxiter),
        _per_step(bare, n, maxiter),
        fmt_ratio(eager / bare),
        "-" if compiled is None else fmt_ratio(compiled / bare),
        "-" if compiled is None else f"{eager / compiled:.2f}x faster",
        timings["eager"].repeats,
    )
    main_threads = max(ctx.sizes.fused_threads) if ctx.device.type == "cpu" else threads
    if name == "mlp" and n == TARGET_N and threads == main_threads:
        ratio = compiled / bare
        per_step = 1e6 * compiled / (n * maxiter)
        targets.add(
            f"MLP, N = {n}, {threads} threads: whole search <= {TARGET}x its bare passes",
            fmt_ratio(ratio),
            check(ratio <= TARGET),
            f"{per_step:.2f} µs per counterfactual-step (bare {1e6 * bare / (n * maxiter):.2f}). "
            "Beyond the passes: the update's memory-bound loops over the N x 784 iterate (read "
            "x, x0, the gradient and the lazy nascent point, write x and nascent), the compiled "
            "call with torch.compile's guards, compaction reads and the final convergence check",
        )


def _child_env(cache_dir: str | None, extra: dict[str, str] | None = None) -> dict[str, str]:
    paths = [str(ROOT), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p), **(extra or {})}
    if cache_dir is not None:
        env["TORCHINDUCTOR_CACHE_DIR"] = cache_dir
    return env


def _run_child(spec: dict, cache_dir: str | None, extra: dict[str, str] | None = None) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.fused", json.dumps(spec)],
        cwd=ROOT,
        env=_child_env(cache_dir, extra),
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode:
        raise RuntimeError(f"fused child {spec} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _isa_probe() -> Callable[[], object] | None:
    """Inductor's vector-ISA probe (private: another torch may lack it; the column then reads
    "-")."""
    try:
        module = importlib.import_module("torch._inductor.cpu_vec_isa")
    except ImportError:
        return None
    return getattr(module, "valid_vec_isa_list", None)


def _compile_child(spec: dict) -> dict:
    """First and later searches of a fresh process (MLP, N rows, compile=True). On a CPU the
    first search's share spent in inductor's vector-ISA probes (it builds and loads a test
    library per instruction set the processor reports, once per cache folder) is timed on its
    own: the probes run first, alone, and the first search then finds their result."""
    device = torch.device(spec["device"])
    model = fresh_model("mlp", device).eval()
    generator = torch.Generator().manual_seed(0)
    x = (torch.rand(spec["n"], 784, generator=generator) * 2 - 1).to(device)
    target = torch.randint(0, 10, (spec["n"],), generator=generator).to(device)
    gen = NativeGenerator(compile=True)
    probes = None
    probe = _isa_probe() if device.type == "cpu" else None
    if probe is not None:
        t0 = time.perf_counter()
        probe()
        probes = time.perf_counter() - t0
    times = []
    for _ in range(4):
        t0 = time.perf_counter()
        gen.generate(model, x, target, domain=DOMAIN)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - t0)
    first = times[0] + (probes or 0.0)
    return {"first": first, "later": min(times[1:]), "graphs": graphs_compiled(), "probes": probes}


def _compile_table(ctx: Context) -> Table:
    table = Table(
        f"Compile time of the compiled step (MLP, N = {TARGET_N}, maxiter 30; a fresh process "
        "per row)",
        [
            "inductor cache",
            "first search",
            "later searches",
            "compile (first - later)",
            "of which ISA probes",
            "graphs compiled",
        ],
    )
    spec = {"probe": "compile", "device": str(ctx.device), "n": TARGET_N}
    rows = [
        ("cold (new machine, empty cache)", "cold", None),
        ("warm (any later process)", "cold", None),
        ("cold, TORCHINDUCTOR_VEC_ISA_OK=1", "trusted", {"TORCHINDUCTOR_VEC_ISA_OK": "1"}),
    ]
    with tempfile.TemporaryDirectory(prefix="cfbook-inductor-") as caches:
        for label, cache, extra in rows:
            r = _run_child(spec, str(Path(caches) / cache), extra)
            ctx.log(f"fused compile {label}: first {r['first']:.1f} s, later {r['later']:.3f} s")
            table.add(
                label,
                fmt_seconds(r["first"]),
                fmt_seconds(r["later"]),
                fmt_seconds(r["first"] - r["later"]),
                "-" if r["probes"] is None else fmt_seconds(r["probes"]),
                r["graphs"],
            )
    # In this process the graph exists: does another model of the same architecture reuse it?
    model = trained_model(ctx, "mlp")
    x, target = _inputs(ctx, model, TARGET_N)
    gen = NativeGenerator(compile=True)
    gen.generate(model, x, target, domain=DOMAIN)
    other = fresh_model("mlp", ctx.device).eval()
    before = graphs_compiled()
    t0 = time.perf_counter()
    gen.generate(other, x, target, domain=DOMAIN)
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    gen.generate(other, x, target, domain=DOMAIN)
    later = time.perf_counter() - t0
    table.add(
        "in process, another MLP of the same architecture",
        fmt_seconds(first),
        fmt_seconds(later),
        fmt_seconds(first - later),
        "-",
        graphs_compiled() - before,
    )
    table.notes += [
        "One graph serves every batch size (the row count is a symbol), every tau, lambda, step "
        "size and energy weight (tensor inputs) and every later search of the same model "
        "(parameters are inputs); the last row asks whether another model of the same "
        "architecture (the next seed, say) reuses it. A new architecture, constraint layout "
        "(domain or not, mutability or not) or torch thread count compiles once more. Graphs "
        "compiled: torch.compile's own count in the process (dynamo's unique_graphs).",
        "The inductor cache lives in /tmp/torchinductor_$USER unless TORCHINDUCTOR_CACHE_DIR "
        "says otherwise; only the cold row's compile is paid once per machine.",
        "Of which ISA probes: before its first CPU kernel, inductor compiles and loads a test "
        "library for each vector instruction set the processor reports (AVX2, AVX-512 and its "
        "extensions, AMX), each in a C++ compiler run and a Python process; the results are kept "
        "in the cache folder. TORCHINDUCTOR_VEC_ISA_OK=1 (inductor's own switch) trusts the base "
        "sets without building them; the extensions' probes still run. cfbook leaves the switch "
        "to the user: it skips a check that a compiler can build what the processor reports.",
    ]
    return table


def _epochs_child(spec: dict) -> dict:
    """``epochs`` Full-objective epochs of the MLP with one generator, in a fresh process."""
    sizes = QUICK if spec["quick"] else FULL
    ctx = Context(torch.device(spec["device"]), spec["quick"], sizes)
    setup = sizes.training["mlp"]
    trainer = Trainer(ctx, "mlp", FullObjective(), setup, compile=spec["compile"])
    records = [trainer.epoch() for _ in range(spec["epochs"])]
    return {
        "times": [r.time_taken for r in records],
        "valid": records[-1].percent_valid,
        "graphs": graphs_compiled(),
    }


def _epoch_table(ctx: Context) -> Table:
    sizes = ctx.sizes
    setup = sizes.training["mlp"]
    epochs = sizes.fused_epochs
    table = Table(
        f"CT training epochs with the compile cost included (MLP, FullObjective, N / batch / nce "
        f"= {setup.n} / {setup.batch_size} / {setup.nce}, maxiter {sizes.maxiter}; a fresh "
        "process per row)",
        [
            "search",
            "epoch 1",
            "later epochs (mean)",
            f"total, {epochs} epochs",
            "graphs compiled",
            "compile repaid after",
            "repaid after, counterfactual-steps",
        ],
    )
    base = {"probe": "epochs", "device": str(ctx.device), "quick": ctx.quick, "epochs": epochs}
    runs: dict[str, tuple[bool, str | None]] = {"eager (compile=False)": (False, None)}
    with tempfile.TemporaryDirectory(prefix="cfbook-inductor-") as cache:
        runs["compiled, cold cache"] = (True, cache)
        runs["compiled, warm cache"] = (True, cache)
        results = {}
        for label, (compile, cache_dir) in runs.items():
            results[label] = _run_child({**base, "compile": compile}, cache_dir)
            ctx.log(f"fused epochs {label}: {results[label]['times']}")
    eager_later = _mean(results["eager (compile=False)"]["times"][1:])
    per_epoch = setup.nce * sizes.maxiter  # the counterfactual-steps an epoch plans
    for label, r in results.items():
        later = _mean(r["times"][1:])
        saving = eager_later - later
        extra = r["times"][0] - later
        repaid = steps = "-"
        if label.startswith("compiled"):
            repaid, steps = "never (no saving)", "-"
            if saving > 0:
                repaid = f"{extra / saving:.0f} epochs"
                steps = f"{extra / saving * per_epoch:,.0f}"
        table.add(
            label,
            fmt_seconds(r["times"][0]),
            fmt_seconds(later),
            fmt_seconds(sum(r["times"])),
            r["graphs"],
            repaid,
            steps,
        )
    table.notes += [
        "Epoch times are the training log's time_taken (search + training); epoch 1 of a "
        "compiled run includes its compile. Compile repaid after = (epoch 1 - later epochs) / "
        "(eager later epochs - compiled later epochs): the epochs after which the compiled run "
        "has caught up.",
        "The search is one part of an epoch; its share, and so the saving per epoch, grows with "
        "nce (the paper's MNIST run searches 5,000 counterfactuals per epoch for 100 epochs).",
        f"Repaid after, counterfactual-steps: the same in counterfactual-steps ({per_epoch:,} "
        "an epoch: nce x maxiter), a measure that carries over to other nce and epochs. Each "
        "epoch is its own counterfactual_training call in the same process: the compile is "
        "paid once, in epoch 1.",
    ]
    return table


def _mean(values: list[float]) -> float:
    return sum(values) / max(len(values), 1)


def run(ctx: Context) -> list[Table]:
    targets = Table("Targets", ["target", "measured", "status", "notes"])
    tables = [_step_table(ctx, targets), _compile_table(ctx), _epoch_table(ctx)]
    return [*tables, targets]


if __name__ == "__main__":
    request = json.loads(sys.argv[1])
    child = {"compile": _compile_child, "epochs": _epochs_child}[request["probe"]]
    print(json.dumps(child(request)))
