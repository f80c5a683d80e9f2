"""Measured runs for the "Scaling up" chapter: one training stage on 1 and on N processes
(the command: ``python -m cfbook.commands.scaling``).

Each run is ``python -m cfbook.commands.train_profile`` (under torchrun for several processes)
on a scratch copy of the data folder, so the profile's own logs stay as they are. Its log, with
the command, the number of processes and the command's wall time added, lands in
``data/scaling/<profile>-<mode>-<N>proc.json`` (:func:`run_path`). The chapter itself shows the
recorded scaling benchmark (``benchmarks/results.json``) and the launch command of
:func:`slurm_dry_run`.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cfbook.data import display_path, find_data_dir
from cfbook.training.log import load_log, save_log

__all__ = [
    "SCALING_DIR",
    "launcher",
    "measure",
    "run_path",
    "slurm_dry_run",
]

SCALING_DIR = "scaling"
RUN_TIMEOUT_S = 3600.0
REPO = Path(__file__).resolve().parents[2]


def launcher(processes: int) -> list[str]:
    """The command that starts ``processes`` local processes of a module (``-m`` ends it)."""
    if processes == 1:
        return [sys.executable, "-m"]
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={processes}",
        "--max-restarts=0",
        "-m",
    ]


def _shown(processes: int, args: list[str]) -> str:
    """The command as a reader would type it."""
    if processes == 1:
        return f"python -m {shlex.join(args)}"
    return f"torchrun --standalone --nproc_per_node={processes} -m {shlex.join(args)}"


def run_path(data_dir: str | Path | None, profile: str, mode: str, processes: int) -> Path:
    root = Path(data_dir) if data_dir is not None else find_data_dir()
    return root / SCALING_DIR / f"{profile}-{mode}-{processes}proc.json"


def measure(
    profile: str,
    mode: str,
    processes: int,
    *,
    data_dir: str | Path | None = None,
    device: str | None = None,
    profile_epoch: int | None = None,
) -> Path:
    """Run the stage on ``processes`` processes and keep its log; returns where it went."""
    data_dir = Path(data_dir) if data_dir is not None else find_data_dir()
    args = ["cfbook.commands.train_profile", "--profile", profile, "--mode", mode]
    if device is not None:
        args += ["--device", device]
    if profile_epoch is not None:
        args += ["--profile-epoch", str(profile_epoch)]
    with tempfile.TemporaryDirectory(prefix="cfbook-scaling-") as scratch:
        scratch_data = Path(scratch) / "data"
        # A copy, not a link: the log names its data folder relative to the data folder.
        shutil.copytree(data_dir / "MNIST" / "raw", scratch_data / "MNIST" / "raw")
        print(f"{_shown(processes, args)}", flush=True)
        start = time.perf_counter()
        subprocess.run(
            launcher(processes) + args + ["--data-dir", str(scratch_data)],
            check=True,
            timeout=RUN_TIMEOUT_S,
        )
        wall = time.perf_counter() - start
        log = load_log(scratch_data / profile / f"{mode}.json")
    log.meta.update(processes=processes, wall_s=wall, command=_shown(processes, args))
    path = run_path(data_dir, profile, mode, processes)
    save_log(log, path)
    print(f"  {wall:.0f} s in all; log in {display_path(path, data_dir)}", flush=True)
    return path


def slurm_dry_run(nodes: int, gpus_per_node: int, *args: str) -> str:
    """The launch command ``scripts/slurm-train.sh`` would run in a job of ``nodes`` nodes with
    ``gpus_per_node`` GPUs each (its ``--dry-run``, with the variables SLURM would set)."""
    env = {
        **os.environ,
        "SLURM_JOB_ID": "123456",
        "SLURM_NNODES": str(nodes),
        "SLURM_JOB_NODELIST": f"node[01-{nodes:02d}]",
        "SLURM_GPUS_ON_NODE": str(gpus_per_node),
        "RDZV_HOST": "node01",
    }
    result = subprocess.run(
        ["bash", str(REPO / "scripts" / "slurm-train.sh"), "--dry-run", *args],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    return result.stdout.strip()
