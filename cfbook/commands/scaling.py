"""``python -m cfbook.commands.scaling``: train one stage of a book profile on 1 and on N
processes and keep the logs for the "Scaling up" chapter (:func:`cfbook.book.scaling.measure`).

    python -m cfbook.commands.scaling --profile cpu --mode full   # 1 process, then 2 (gloo)
    python -m cfbook.commands.scaling --profile tutorial --mode full --processes 1 2 --device cuda
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cfbook.book.profiles import PROFILES
from cfbook.book.scaling import measure
from cfbook.book.stages import TRAINING_MODES

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m cfbook.commands.scaling",
        description="Train one stage on 1 and on N processes and keep the logs for the "
        "Scaling up chapter. Measure on an otherwise idle machine.",
    )
    parser.add_argument(
        "--profile", choices=sorted(PROFILES), default="cpu", help="the book profile (default cpu)"
    )
    parser.add_argument(
        "--mode",
        choices=TRAINING_MODES,
        default="full",
        help="the stage: full (CT) or vanilla (the baseline); default full",
    )
    parser.add_argument(
        "--processes",
        type=int,
        nargs="+",
        default=[1, 2],
        help="process counts, run one after the other (default 1 2)",
    )
    parser.add_argument("--device", help="cpu or cuda (default: detected)")
    parser.add_argument("--profile-epoch", type=int, help="profile this epoch of every run")
    parser.add_argument("--data-dir", type=Path, help="MNIST/raw; logs go to <it>/scaling")
    args = parser.parse_args(argv)
    for processes in args.processes:
        measure(
            args.profile,
            args.mode,
            processes,
            data_dir=args.data_dir,
            device=args.device,
            profile_epoch=args.profile_epoch,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
