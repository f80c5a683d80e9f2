"""Benchmark 7: one training run on one process or two (DDP), and the threads of each process.

Every configuration trains the same run (data, global batch, nce, seeds) as a job of its own:
``python -m benchmarks.scaling --worker`` in one process, or under torchrun in two (gloo on CPUs,
NCCL on two GPUs). The first epoch is burn-in and warm-up, the middle ones are timed, the last
runs under ``torch.profiler`` to split an epoch into search, training passes and bookkeeping.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from benchmarks.common import Context, Table, fmt_ratio, fmt_seconds
from cfbook.book.scaling import launcher
from cfbook.device import cpu_cores

TITLE = "7. Scaling: one process or two (DDP), and threads per process"
CONFIG_TIMEOUT_S = 900.0


@dataclass(frozen=True)
class Config:
    processes: int
    threads: int | None  # per process; None: cfbook's default (cores / local processes)
    remark: str


def _configs(ctx: Context) -> list[Config]:
    if ctx.device.type == "cuda":
        configs = [Config(1, None, "one GPU")]
        if torch.cuda.device_count() >= 2:
            configs.append(Config(2, None, "two GPUs, NCCL"))
        return configs
    cores = cpu_cores()
    half = max(1, cores // 2)
    return [
        Config(1, cores, "one process, a thread per core (torch's default)"),
        Config(1, half, "one process on half the cores"),
        Config(2, half, "two processes sharing the cores (cfbook's default)"),
        Config(2, cores, "two processes, a thread per core each: oversubscribed"),
    ]


def _launch(ctx: Context, config: Config, out: Path) -> dict | None:
    """Run one configuration; its summary, or None when it ran out of time."""
    setup = ctx.sizes.scaling
    args = [
        "benchmarks.scaling",
        "--worker",
        str(out),
        "--device",
        ctx.device.type,
        "--model",
        ctx.sizes.scaling_model,
        "--samples",
        str(setup.n),
        "--batch-size",
        str(setup.batch_size),
        "--nce",
        str(setup.nce),
        "--maxiter",
        str(ctx.sizes.maxiter),
        "--epochs",
        str(ctx.sizes.scaling_epochs),
    ]
    if config.threads is not None:
        args += ["--threads", str(config.threads)]
    try:
        result = subprocess.run(
            launcher(config.processes) + args,
            capture_output=True,
            text=True,
            timeout=CONFIG_TIMEOUT_S,
            cwd=Path(__file__).resolve().parents[1],
        )
    except subprocess.TimeoutExpired:
        return None
    if result.returncode != 0:
        raise RuntimeError(f"scaling worker failed ({config}):\n{result.stderr[-4000:]}")
    return json.loads(out.read_text())


def run(ctx: Context) -> list[Table]:
    setup = ctx.sizes.scaling
    table = Table(
        f"Seconds per FullObjective epoch ({ctx.sizes.scaling_model}, N {setup.n}, global "
        f"batch {setup.batch_size}, nce {setup.nce}, maxiter {ctx.sizes.maxiter})",
        [
            "configuration",
            "processes x threads",
            "s/epoch",
            "speed-up",
            "search",
            "forward",
            "backward",
            "optimizer",
            "bookkeeping",
            "valid %",
            "final train loss",
        ],
    )
    base = None
    with tempfile.TemporaryDirectory(prefix="cfbook-bench-scaling-") as scratch:
        for i, config in enumerate(_configs(ctx)):
            ctx.log(f"scaling: {config.remark}")
            summary = _launch(ctx, config, Path(scratch) / f"{i}.json")
            if summary is None:
                table.add(
                    config.remark,
                    f"{config.processes} x {config.threads}",
                    f"> {CONFIG_TIMEOUT_S:.0f} s per run (stopped)",
                    *["-"] * 8,
                )
                continue
            seconds = statistics.median(summary["timed_s"])
            base = base or seconds
            regions = summary["profile"]["regions_s"]
            wall = summary["profile"]["wall_s"]
            shares = [
                f"{regions[k] / wall:.0%}"
                for k in ("search", "forward", "backward", "optimizer", "bookkeeping")
            ]
            table.add(
                config.remark,
                f"{summary['world_size']} x {summary['threads']}",
                fmt_seconds(seconds),
                fmt_ratio(base / seconds),
                *shares,
                f"{100 * summary['percent_valid']:.1f}",
                f"{summary['train_loss']:.3f}",
            )
    table.notes += [
        "Each configuration is its own job; the profile's global batch is split over the "
        "processes, so all train the same run. s/epoch: median of the epochs between the "
        f"burn-in (warm-up) epoch and the last one; {ctx.sizes.scaling_epochs - 2} timed. "
        "Shares: of the last epoch, run under torch.profiler (host time, device synchronised at "
        "each part's end); bookkeeping is the rest: loss checks, batch slicing, all-reduces of "
        "the logged figures.",
        "Under DDP the backward pass includes waiting for the gradient all-reduce. The final "
        "losses differ a little between configurations: thread counts change the order of "
        "floating-point sums, and under DDP BatchNorm statistics are per process (rank 0's are "
        "kept).",
        "Thread counts above the free cores stall: every OpenMP barrier waits for threads the "
        "kernel has descheduled. cfbook's default gives each process cores / local processes.",
    ]
    return [table]


def _worker(argv: list[str]) -> None:
    """One process of a configuration (``--worker OUT``); rank 0 writes the summary."""
    from cfbook.data import load_mnist
    from cfbook.models import build_model
    from cfbook.objectives import FullObjective
    from cfbook.search.generators import NativeGenerator
    from cfbook.training import counterfactual_training, distributed

    parser = argparse.ArgumentParser(prog="python -m benchmarks.scaling")
    parser.add_argument("--worker", type=Path, required=True)
    # (no option may abbreviate one of torchrun's, such as --n for --nnodes)
    for name in ("--samples", "--batch-size", "--nce", "--maxiter", "--epochs"):
        parser.add_argument(name, type=int, required=True)
    parser.add_argument("--threads", type=int)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--model", default="resnet18")
    args = parser.parse_args(argv)
    processes = distributed.init_distributed(args.device)
    threads = distributed.configure_threads(args.threads)
    data = load_mnist(args.samples, device=processes.device, seed=0, verbose=False)
    data = data.for_model(args.model)  # the ResNet takes images as they are
    torch.manual_seed(0)
    model = build_model(args.model)
    loader = data.loader(shuffle=True, seed=0, **distributed.loader_shard(args.batch_size))
    _, log = counterfactual_training(
        FullObjective(),
        model,
        NativeGenerator(maxiter=args.maxiter, cf_batchsize=args.nce),
        loader,
        torch.optim.Adam(model.parameters(), lr=1e-3),
        device=processes.device,
        nepochs=args.epochs,
        domain=data.domain,
        burnin=1 / args.epochs,
        nce=args.nce,
        accuracy_every=args.epochs,
        verbose=0,
        profile_epoch=args.epochs,
    )
    if processes.is_main:
        args.worker.write_text(
            json.dumps(
                {
                    "world_size": processes.world_size,
                    "threads": threads,
                    "timed_s": [r.time_taken for r in log[1:-1]],
                    "profile": log.meta["epoch_profile"],
                    "percent_valid": log[-1].percent_valid,
                    "train_loss": log[-1].train_loss,
                }
            )
        )
    distributed.cleanup()


if __name__ == "__main__":
    _worker(sys.argv[1:])
