"""Command line of ``python -m benchmarks.run``: pick benchmarks and device, print, record."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path

import torch

from benchmarks import (
    calibration,
    efficiency,
    evaluation,
    fused,
    grid,
    images,
    memory,
    overhead,
    peers,
    precision,
    scaling,
    speedup,
    syncs,
    test_command,
    throughput,
)
from benchmarks.common import Context, Skipped, Table
from benchmarks.config import FULL, QUICK
from benchmarks.results import machine, record_block, write_block
from cfbook.book.benchmarks import RESULTS_JSON, block_markdown
from cfbook.device import detect_device

RESULTS = RESULTS_JSON
BENCHMARKS: dict[str, tuple[str, Callable[[Context], list[Table]]]] = {
    "throughput": (throughput.TITLE, throughput.run),
    "efficiency": (efficiency.TITLE, efficiency.run),
    "overhead": (overhead.TITLE, overhead.run),
    "memory": (memory.TITLE, memory.run),
    "speedup": (speedup.TITLE, speedup.run),
    "precision": (precision.TITLE, precision.run),
    "syncs": (syncs.TITLE, syncs.run),
    "evaluation": (evaluation.TITLE, evaluation.run),
    "scaling": (scaling.TITLE, scaling.run),
    "fused": (fused.TITLE, fused.run),
    "grid": (grid.TITLE, grid.run),
    "calibration": (calibration.TITLE, calibration.run),
    "peers": (peers.TITLE, peers.run),
    "images": (images.TITLE, images.run),
    "test_command": (test_command.TITLE, test_command.run),
}


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.run",
        description="Run cfbook's benchmarks, print their tables and record them in "
        "benchmarks/results.json (and RESULTS.md, rendered from it). Progress goes to stderr, "
        "tables to stdout.",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="small sizes and few repeats: checks that everything runs",
    )
    parser.add_argument(
        "--only", default=None, help=f"comma-separated subset of: {', '.join(BENCHMARKS)}"
    )
    parser.add_argument(
        "--device",
        default=None,
        help="cpu, cuda or mps (default: the GPU if there is one, else cpu)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch CPU threads (default: torch's choice, one per core)",
    )
    parser.add_argument(
        "--note",
        default="",
        help="remark added to each block's provenance line, e.g. 'shared machine'",
    )
    parser.add_argument(
        "--output",
        type=Path,
        default=RESULTS,
        help=f"results file to update, RESULTS.md beside it (default: {RESULTS})",
    )
    return parser.parse_args(argv)


def _selected(only: str | None) -> list[str]:
    if only is None:
        return list(BENCHMARKS)
    names = [n.strip() for n in only.split(",") if n.strip()]
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown or not names:
        raise SystemExit(
            f"--only: unknown benchmark(s) {', '.join(unknown) or '(none given)'}; "
            f"choose from {', '.join(BENCHMARKS)}"
        )
    return names


def main(argv: list[str] | None = None) -> int:
    """Run the selected benchmarks; each block is written as soon as it is measured."""
    args = _parse_args(argv)
    names = _selected(args.only)
    if args.output.suffix != ".json":
        raise SystemExit(
            f"--output: a .json file (RESULTS.md is rendered beside it), got {args.output}"
        )
    if args.threads is not None:
        if args.threads < 1:
            raise SystemExit(f"--threads must be a positive integer, got {args.threads}")
        torch.set_num_threads(args.threads)
    device = detect_device(args.device, verbose=False)
    ctx = Context(device, args.quick, QUICK if args.quick else FULL, note=args.note)
    ctx.log(f"benchmarks {', '.join(names)} on {device}: {machine(ctx)}")
    order = list(BENCHMARKS)
    for name in names:
        title, bench = BENCHMARKS[name]
        ctx.log(f"{name}: started")
        t0 = time.perf_counter()
        try:
            tables = bench(ctx)
        except Skipped as why:
            ctx.log(f"{name}: skipped ({why})")
            continue
        seconds = time.perf_counter() - t0
        record = record_block(ctx, title, tables, seconds)
        print(block_markdown(record), flush=True)
        write_block(args.output, ctx.device.type, name, record, order)
        ctx.log(f"{name}: done in {seconds:.0f} s, written to {args.output}")
    ctx.log(f"all done in {time.perf_counter() - ctx.started:.0f} s")
    return 0
