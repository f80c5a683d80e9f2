"""``python -m cfbook.commands.paper``: the CT paper's experiment grid, or part of it, then
the merge.

Examples::

    python -m cfbook.commands.paper                     # 9 data sets x 3 trainings x 3 seeds
    python -m cfbook.commands.paper --data adult,mnist  # two data sets
    python -m cfbook.commands.paper --cell 17 --no-merge  # one training cell (a SLURM task)
    python -m cfbook.commands.paper --evaluate adult:0  # one evaluation, once its cells exist
    python -m cfbook.commands.paper --merge-only        # rebuild results.json from what is there
    python -m cfbook.commands.paper --objectives energy,adversarial --ig  # + ablation and IG
    python -m cfbook.commands.paper --variant sklearn_data  # one departure from the paper
    python -m cfbook.commands.paper --list              # the cells and their numbers
    bash scripts/slurm-paper.sh --dry-run               # the same grid as SLURM job arrays
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from cfbook.data import find_data_dir
from cfbook.device import detect_device
from cfbook.errors import SetupError
from cfbook.paper.grid import (
    ABLATION,
    Scale,
    grid_cells,
    run_ablation,
    run_cell,
    run_evaluation,
    run_ig,
)
from cfbook.paper.knobs import KNOB_DATA, run_knobs
from cfbook.paper.merge import merge_results
from cfbook.paper.settings import VARIANTS, ExperimentData, Variant, load_experiment_data
from cfbook.paper.two_d import write_two_d
from cfbook.progress import format_duration


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m cfbook.commands.paper",
        description="Train and evaluate the CT paper's experiment grid; every cell is resumable.",
    )
    p.add_argument("--data", help="comma-separated data sets (default: all nine)")
    p.add_argument("--cell", type=int, action="append", help="train only this cell (repeatable)")
    p.add_argument("--evaluate", action="append", metavar="DATA:SEED", help="only this evaluation")
    p.add_argument("--seeds", type=int, default=None, help="seeds per training (default 3)")
    p.add_argument("--smoke", action="store_true", help="tiny sizes: seconds per cell (for CI)")
    p.add_argument("--out", type=Path, help="result folder (default data/reproduction)")
    p.add_argument("--device", help="cpu, cuda, ... (default: the best available)")
    p.add_argument("--force", action="store_true", help="run again what already has a result")
    p.add_argument("--no-merge", action="store_true", help="do not build results.json")
    p.add_argument("--merge-only", action="store_true", help="only build results.json")
    p.add_argument(
        "--objectives",
        help="also the paper's ablation: energy,adversarial (each half of CT's loss on its own)",
    )
    p.add_argument("--ig", action="store_true", help="also integrated-gradients sensitivity")
    p.add_argument(
        "--two-d", action="store_true", help="write two_d.json for the two-dimensional chapter"
    )
    p.add_argument(
        "--knobs", action="store_true", help="the knob study on moons and MNIST (knobs.json)"
    )
    p.add_argument(
        "--variant",
        action="append",
        choices=list(VARIANTS),
        help="run one departure from the paper's setup into <out>/variants/<name> (repeatable)",
    )
    p.add_argument("--list", action="store_true", help="print the cells and exit")
    p.add_argument("--list-evaluations", action="store_true", help="print the evaluations")
    p.add_argument("--train-task", type=int, help="train the N-th cell of the list (SLURM array)")
    p.add_argument("--eval-task", type=int, help="run the N-th evaluation (SLURM array)")
    return p


def _evaluation(text: str) -> tuple[str, int]:
    key, _, seed = text.partition(":")
    if not seed.isdigit():
        raise SystemExit(f"error: --evaluate takes DATA:SEED, such as adult:0, not {text!r}")
    return key, int(seed)


def run_variant(
    variant: Variant, scale: Scale, out: Path, device: torch.device, data: list[str] | None
) -> Path:
    """Train (when it must) and evaluate ``variant`` on its data sets into
    ``out/variants/<name>``, evaluating the paper setup's own models when it changes only the
    test-time search; returns its merged ``results.json``."""
    here = out / "variants" / variant.name
    keys = [k for k in variant.data if data is None or k in data]
    start = time.perf_counter()
    for key in keys:
        loaded = load_experiment_data(key, device, variant)
        if variant.retrains:
            for cell in grid_cells(scale, [key]):
                result = run_cell(cell, scale, here, device=device, data=loaded, variant=variant)
                print(f"  {variant.name} {cell.name}: {result['seconds']:.0f} s", flush=True)
        for seed in range(scale.seeds):
            cells = None if variant.retrains else out / "cells"
            result = run_evaluation(
                key, seed, scale, here, device=device, data=loaded, variant=variant, cells=cells
            )
            print(f"  {variant.name} evaluation {key}:{seed}: {result['seconds']:.0f} s")
    path = merge_results(here, None if variant.retrains else out / "cells")
    print(f"{variant.name}: {format_duration(time.perf_counter() - start)}, merged into {path}")
    return path


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    seeds = args.seeds
    scale = Scale.smoke(seeds or 2) if args.smoke else Scale.paper(seeds or 3)
    out = args.out or find_data_dir() / ("reproduction-smoke" if args.smoke else "reproduction")
    data = args.data.split(",") if args.data else None
    if args.variant:
        device = detect_device(args.device, verbose=False)
        for name in args.variant:
            run_variant(VARIANTS[name], scale, out, device, data)
        return 0
    ablation = False
    if args.objectives:
        asked = set(args.objectives.split(","))
        if not asked <= set(ABLATION):
            print(f"error: --objectives takes {','.join(ABLATION)}", file=sys.stderr)
            return 2
        ablation = True  # both halves: the ablation table compares them side by side
    cells = grid_cells(scale, data, ablation)
    if args.cell:
        known = {c.index: c for c in grid_cells(scale, ablation=True)}
        unknown = [i for i in args.cell if i not in known]
        if unknown:
            print(f"error: no cell {unknown} (cells are 0-{len(known) - 1})", file=sys.stderr)
            return 2
        cells = [known[i] for i in args.cell]
    evaluations = list(dict.fromkeys((c.data, c.seed) for c in cells))
    if args.list:
        for c in cells:
            print(f"{c.index:3d}  {c.name}")
        return 0
    if args.list_evaluations:
        for key, seed in evaluations:
            print(f"{key}:{seed}")
        return 0
    if args.train_task is not None:
        cells, evaluations = [cells[args.train_task]], []
    elif args.eval_task is not None:
        cells, evaluations = [], [evaluations[args.eval_task]]
    elif args.evaluate:
        evaluations = [_evaluation(s) for s in args.evaluate]
        cells = []
    elif args.cell:
        evaluations = []
    if args.merge_only:
        cells, evaluations = [], []
    device = detect_device(args.device, verbose=False)
    start = time.perf_counter()
    done_work = 0
    total = len(cells) + len(evaluations)
    cache: dict[str, ExperimentData] = {}

    def data_of(key: str) -> ExperimentData:  # one load per data set and process
        if key not in cache:
            cache[key] = load_experiment_data(key, device)
        return cache[key]

    def status(k: int) -> str:
        elapsed = time.perf_counter() - start
        left = elapsed / k * (total - k) if k else 0.0
        return f"[{k}/{total}, {format_duration(elapsed)} so far, ~{format_duration(left)} left]"

    failed: list[str] = []

    def attempt(what: str, run: Callable[[], dict[str, Any]]) -> dict[str, Any] | None:
        """One cell or evaluation; a file it cannot use, or a lock held by another process, is
        reported and the rest of the grid goes on."""
        try:
            return run()
        except (ValueError, FileNotFoundError, SetupError) as err:
            print(f"  {what} failed: {err}", file=sys.stderr, flush=True)
            failed.append(what)
            return None

    for cell in cells:
        print(f"cell {cell.index} {cell.name} {status(done_work)}", flush=True)
        result = attempt(
            f"cell {cell.index} ({cell.name})",
            lambda cell=cell: run_cell(
                cell, scale, out, device=device, data=data_of(cell.data), force=args.force
            ),
        )
        if result is not None:
            print(
                f"  {cell.name}: {result['seconds']:.0f} s of training, test accuracy "
                f"{result['test_accuracy']:.3f}",
                flush=True,
            )
        done_work += 1
    extras = [run_evaluation] + ([run_ablation] if ablation else []) + ([run_ig] if args.ig else [])
    total += len(evaluations) * (len(extras) - 1)
    for key, seed in evaluations:
        for run in extras:
            what = run.__name__.removeprefix("run_")
            print(f"{what} {key}:{seed} {status(done_work)}", flush=True)
            result = attempt(
                f"{what} {key}:{seed}",
                lambda run=run, key=key, seed=seed: run(
                    key, seed, scale, out, device=device, data=data_of(key), force=args.force
                ),
            )
            if result is not None:
                print(f"  {what} {key}:{seed}: {result['seconds']:.0f} s", flush=True)
            done_work += 1
    if failed:
        print(
            f"{len(failed)} part(s) of the grid failed, the rest is saved in {out}: "
            + "; ".join(failed)
            + ". Fix them as each message says and run the same command again (finished "
            "cells and evaluations are reused); results.json was not merged.",
            file=sys.stderr,
        )
        return 1
    partial = (
        args.cell or args.evaluate or args.train_task is not None or args.eval_task is not None
    )
    if not args.no_merge and not partial:
        path = merge_results(out)
        print(f"merged the results into {path}")
    try:
        if args.two_d:
            print(f"wrote {write_two_d(out, device)}")
        if args.knobs:
            keys = KNOB_DATA if data is None else tuple(data)
            print(f"wrote {run_knobs(out, device, keys, force=args.force)}")
    except (ValueError, FileNotFoundError, SetupError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(f"done in {format_duration(time.perf_counter() - start)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
