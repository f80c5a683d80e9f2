"""One training stage of one of the book's profiles (``tutorial``, ``cpu``, ``smoke``) from the
command line, in one process or as one of several under torchrun.

    python -m cfbook.commands.train_profile --profile cpu --mode full
    torchrun --nproc_per_node=2 -m cfbook.commands.train_profile --profile cpu --mode full  # 2 CPUs
    torchrun --nproc_per_node=4 -m cfbook.commands.train_profile --profile tutorial --mode full

It runs what the papermill stage runs (:func:`cfbook.book.stages.run_training_stage`) and writes the
same files: ``data/<profile>/<mode>.json`` (one log per run) and the weights, and a checkpoint per
epoch in ``data/<profile>/checkpoints/`` from which a rerun resumes. The
profile's ``batch_size`` is the global batch: each of N processes trains on ``batch_size / N``
samples of every batch, so one process and N processes train the same configuration. Only rank 0
writes files.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from cfbook.book.profiles import PROFILES, resolve_parameters
from cfbook.book.stages import TRAINING_MODES, run_training_stage
from cfbook.commands import USER_ERRORS
from cfbook.profiling import profile_markdown
from cfbook.training import distributed

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m cfbook.commands.train_profile",
        description="Train one objective with one of the book's profiles and save its logs and "
        "weights (the book's training stage); run it under torchrun for several processes "
        "(NCCL on GPUs, gloo on CPUs). To train your own model, call "
        "cfbook.counterfactual_training.",
    )
    parser.add_argument("--mode", required=True, choices=TRAINING_MODES, help="objective")
    parser.add_argument(
        "--profile",
        choices=sorted(PROFILES),
        help="training configuration (default: $CFBOOK_PROFILE, else tutorial on a GPU, cpu "
        "otherwise)",
    )
    parser.add_argument("--device", help="cpu, cuda or mps (default: detected)")
    parser.add_argument("--data-dir", type=Path, help="MNIST/raw and the logs (default: data/)")
    parser.add_argument(
        "--threads",
        type=int,
        help="torch CPU threads per process (default: the cores / processes on this node)",
    )
    parser.add_argument(
        "--accumulate",
        type=int,
        default=1,
        metavar="K",
        help="update once every K mini-batches, on their mean gradient",
    )
    parser.add_argument(
        "--profile-epoch",
        type=int,
        nargs="?",
        const=0,
        metavar="EPOCH",
        help="run torch.profiler over this epoch (without a number: the first one with "
        "counterfactuals) and report where its time goes",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=distributed.DEFAULT_TIMEOUT_S,
        metavar="SECONDS",
        help="a collective waiting longer than this fails the job (default: %(default).0f)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the process exit status."""
    args = _parser().parse_args(argv)
    if args.threads is not None:
        os.environ[distributed.THREADS_ENV] = str(args.threads)
    try:
        processes = distributed.init_distributed(args.device, timeout_s=args.timeout)
        mode, profile = resolve_parameters(args.mode, args.profile, processes.device)
        options = {"accumulate": args.accumulate}
        if args.profile_epoch is not None:
            first_search = round(profile.burnin * profile.nepochs) + 1
            options["profile_epoch"] = args.profile_epoch or first_search
        log = run_training_stage(
            mode, profile, device=processes.device, data_dir=args.data_dir, **options
        )
    except USER_ERRORS as err:
        # Any rank's failure ends the job: torchrun stops the others when this one exits.
        where = f" (rank {distributed.rank()})" if distributed.world_size() > 1 else ""
        sys.stderr.write(f"error{where}: {type(err).__name__}: {err}\n")
        return 2
    if "epoch_profile" in log.meta:
        print(profile_markdown(log.meta["epoch_profile"]))
    distributed.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
