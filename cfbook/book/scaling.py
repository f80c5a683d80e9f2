"""Measured runs for the "Scaling up" chapter: one training stage on 1 and on N processes
(the command: ``python -m cfbook.commands.scaling``).

Each run is ``python -m cfbook.commands.train_profile`` (under torchrun for several processes)
on a scratch copy of the data folder, so the profile's own logs stay as they are. Its log, with
the command, the number of processes and the command's wall time added, lands in
``data/scaling/<profile>-<mode>-<N>proc.json``, which :func:`load_scaling_runs` reads back for
:func:`scaling_markdown` and :func:`scaling_figure`. The chapter itself shows the recorded scaling
benchmark (``benchmarks/results.json``) and the launch command of :func:`slurm_dry_run`.
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

import plotly.graph_objects as go

from cfbook.book.profiles import PROFILES
from cfbook.book.stages import TRAINING_MODES, log_path
from cfbook.data import display_path, find_data_dir
from cfbook.training.log import TrainingLog, load_log, save_log

__all__ = [
    "SCALING_DIR",
    "device_comparison_markdown",
    "launcher",
    "load_scaling_runs",
    "measure",
    "run_path",
    "scaling_figure",
    "scaling_markdown",
    "scaling_profiles",
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


def scaling_profiles(data_dir: str | Path | None = None, mode: str = "full") -> list[str]:
    """The profiles with stored scaling runs of ``mode``, in the order of ``PROFILES``."""
    folder = run_path(data_dir, "", mode, 1).parent
    return [name for name in PROFILES if any(folder.glob(f"{name}-{mode}-*proc.json"))]


def load_scaling_runs(
    profile: str, mode: str, *, data_dir: str | Path | None = None
) -> dict[int, TrainingLog]:
    """The stored runs of one stage, by number of processes (empty when none was measured)."""
    folder = run_path(data_dir, profile, mode, 1).parent
    runs = {}
    for path in sorted(folder.glob(f"{profile}-{mode}-*proc.json")):
        log = load_log(path)
        runs[int(log.meta["processes"])] = log
    return dict(sorted(runs.items()))


def _searching(log: TrainingLog) -> list[float]:
    """Times of the epochs with counterfactuals, except one run under the profiler."""
    profiled = log.meta.get("epoch_profile", {}).get("epoch")
    return [
        r.time_taken for r in log if r.epoch > log.meta["burnin_epochs"] and r.epoch != profiled
    ]


def _seconds(value: float) -> str:
    return f"{value * 1e3:.0f} ms" if value < 1 else f"{value:.1f} s"


def scaling_markdown(runs: dict[int, TrainingLog]) -> str:
    """One row per process count: threads, epoch and wall times, final figures, speed-up."""
    if not runs:
        return (
            "No scaling runs stored: run "
            "`python -m cfbook.commands.scaling --profile cpu --mode full`."
        )
    base = sum(r.time_taken for r in next(iter(runs.values())))
    lines = [
        "| processes | threads each | epochs, summed | per epoch after burn-in | command wall "
        "time | final train loss | final accuracy (train / held-out) | speed-up of the epochs |",
        "|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for processes, log in runs.items():
        total = sum(r.time_taken for r in log)
        searching = _searching(log)
        per_epoch = _seconds(sum(searching) / len(searching)) if searching else "n/a"
        last = log[-1]
        accuracy = " / ".join("n/a" if a is None else f"{a:.3f}" for a in (last.acc, last.acc_val))
        lines.append(
            f"| {processes} | {log.meta.get('threads', '?')} | {_seconds(total)} | {per_epoch} | "
            f"{_seconds(log.meta['wall_s'])} | {last.train_loss:.4f} | {accuracy} | "
            f"{base / total:.2f}x |"
        )
    return "\n".join(lines)


def scaling_figure(runs: dict[int, TrainingLog], title: str) -> go.Figure:
    """Seconds per epoch for each process count; the dashed line ends the burn-in."""
    fig = go.Figure()
    for processes, log in runs.items():
        label = f"{processes} process{'es' if processes > 1 else ''}"
        fig.add_trace(
            go.Scatter(
                x=[r.epoch for r in log],
                y=[r.time_taken for r in log],
                mode="lines+markers",
                name=label,
            )
        )
    burnin = next(iter(runs.values())).meta["burnin_epochs"]
    if burnin:
        fig.add_vline(x=burnin + 0.5, line_dash="dash", line_color="#444444")
    fig.update_layout(
        title=title,
        xaxis_title="epoch",
        yaxis_title="seconds per epoch",
        template="plotly_white",
        height=380,
    )
    return fig


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


def device_comparison_markdown(
    data_dir: str | Path | None = None, profiles: tuple[str, ...] = ("cpu", "tutorial")
) -> str:
    """The stored stage logs of the showcase profiles side by side: device, size, and the mean
    epoch time after burn-in of each profile's first seed (the main example averages over
    every seed, so its ratio differs a little)."""
    lines = [
        "Seconds per epoch after burn-in, first seed of each profile:",
        "",
        "| profile | device | model, N, nce | CT s/epoch | baseline s/epoch | CT / baseline |",
        "|---|---|---|---:|---:|---:|",
    ]
    missing, unreadable = [], []
    for name in profiles:
        paths = [log_path(data_dir, name, mode) for mode in TRAINING_MODES]
        if not all(p.is_file() for p in paths):
            missing.append(name)
            continue
        try:
            full, vanilla = (load_log(p) for p in paths)
        except ValueError as err:  # e.g. written by an older cfbook
            unreadable.append(f"`{name}`: {err.__cause__ or err}")
            continue
        config = full.meta["config"]
        times = [sum(_searching(log)) / len(_searching(log)) for log in (full, vanilla)]
        lines.append(
            f"| `{name}` | {full.meta.get('device_name', '?')} | {config['model']}, "
            f"{config['n']}, {config['nce']} | {times[0]:.2f} | {times[1]:.2f} | "
            f"{times[0] / times[1]:.1f}x |"
        )
    for reason in unreadable:
        lines += ["", f"Not shown, {reason}"]
    if missing:
        lines.append("")
        lines.append(
            "No stored run of " + ", ".join(f"`{m}`" for m in missing) + " yet: "
            "`bash scripts/gpu-check.sh` on a GPU machine trains the `tutorial` profile."
        )
    return "\n".join(lines)
