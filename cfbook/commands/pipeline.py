"""``python -m cfbook.commands.pipeline``: train the book's stages, evaluate them, execute every
chapter and build the website (:func:`cfbook.book.pipeline.run_pipeline`).

    python -m cfbook.commands.pipeline --profile cpu          # train or reuse, chapters, site
    python -m cfbook.commands.pipeline --profile cpu --force  # retrain even if logs exist
    python -m cfbook.commands.pipeline --stages-only          # only trainings and evaluation
"""

from __future__ import annotations

import argparse
import logging
import sys
import traceback
from pathlib import Path

from cfbook.book.pipeline import StageFailed, run_pipeline
from cfbook.book.profiles import PROFILES, resolve_parameters
from cfbook.book.toc import CONFIG_FILE
from cfbook.commands import USER_ERRORS

__all__ = ["main"]

_SITE_BUILDERS = {"auto": None, "quarto": True, "nbconvert": False}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m cfbook.commands.pipeline",
        description="Train both objectives of a book profile in fresh kernels (or reuse their "
        "logs), evaluate them, execute every chapter in plot mode, and build the website.",
    )
    parser.add_argument(
        "--profile",
        choices=sorted(PROFILES),
        help="training configuration (default: $CFBOOK_PROFILE, else tutorial on a GPU, cpu "
        "otherwise)",
    )
    parser.add_argument("--force", action="store_true", help="retrain even if the logs exist")
    parser.add_argument(
        "--stages-only", action="store_true", help="run only the two trainings and the evaluation"
    )
    parser.add_argument("--no-site", action="store_true", help="skip building the website")
    parser.add_argument("--project-dir", type=Path, help=f"folder holding {CONFIG_FILE}")
    parser.add_argument("--data-dir", type=Path, help="MNIST/raw and the logs (default: data/)")
    parser.add_argument(
        "--build-dir",
        type=Path,
        help="where executed chapters go, at their _quarto.yml paths (default: the project "
        "itself, executed in place)",
    )
    parser.add_argument("--site-dir", type=Path, help="website output (default: _site/)")
    parser.add_argument(
        "--site-builder",
        choices=sorted(_SITE_BUILDERS),
        default="auto",
        help="auto: Quarto when it is on PATH, else nbconvert",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="stream the notebooks' output")
    parser.add_argument(
        "--threads",
        type=int,
        help="torch CPU threads of the training stages (default: one per core; fewer when other "
        "work shares the cores)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the process exit status."""
    args = _parser().parse_args(argv)
    if args.verbose:
        logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        _, profile = resolve_parameters("plot", args.profile)
        run_pipeline(
            profile,
            project_dir=args.project_dir,
            data_dir=args.data_dir,
            build_dir=args.build_dir,
            site_dir=args.site_dir,
            force=args.force,
            stages_only=args.stages_only,
            site=not args.no_site,
            use_quarto=_SITE_BUILDERS[args.site_builder],
            verbose=args.verbose,
            threads=args.threads,
        )
    except StageFailed as err:
        print(f"error: {err}", file=sys.stderr)
        if args.verbose and err.__cause__ is not None:
            traceback.print_exception(err.__cause__)
        return 1
    except USER_ERRORS as err:
        # Bad parameters, a missing chapter or device, a kernel or Quarto that will not run.
        print(f"error: {type(err).__name__}: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
