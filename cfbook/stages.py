"""The two training stages and the plot stage's loader: everything the chapters call.

Each training runs in its own process (one CT_MODE per kernel) and leaves only a JSON log behind,
so a second heavy training never inherits the first one's fragmented accelerator memory.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from cfbook import distributed
from cfbook.data import DeviceLoader, MNISTData, display_path, find_data_dir, load_mnist
from cfbook.device import describe_device, free_cached_memory
from cfbook.generators import NativeGenerator
from cfbook.log import TrainingLog, load_log, save_log
from cfbook.models import build_model
from cfbook.objectives import FullObjective, Objective, VanillaObjective
from cfbook.profiles import Profile, check_mode
from cfbook.training import counterfactual_training

__all__ = [
    "TRAINING_MODES",
    "load_comparison_logs",
    "log_path",
    "profile_data",
    "profile_dir",
    "run_training_stage",
]

TRAINING_MODES = ("full", "vanilla")

_OBJECTIVES: dict[str, Callable[[], Objective]] = {
    "full": FullObjective,
    # VanillaObjective() skips the counterfactual search entirely, as in the tutorial.
    "vanilla": VanillaObjective,
}


def profile_dir(data_dir: str | Path | None, profile_name: str) -> Path:
    """Folder holding one profile's logs and executed stage notebooks."""
    root = Path(data_dir) if data_dir is not None else find_data_dir()
    return root / profile_name


def log_path(data_dir: str | Path | None, profile_name: str, mode: str) -> Path:
    """Where the training stage ``mode`` (full or vanilla) saves its log."""
    if check_mode(mode) not in TRAINING_MODES:
        raise ValueError(f"only {' and '.join(TRAINING_MODES)} stages write logs, not {mode!r}")
    return profile_dir(data_dir, profile_name) / f"{mode}.json"


def profile_data(
    profile: Profile, *, device: str | torch.device, data_dir: str | Path | None = None
) -> tuple[MNISTData, DeviceLoader]:
    """The profile's MNIST subset and its shuffling loader: what both stages train on, and what the
    MNIST chapter shows. Under DDP the profile's batch is the global one, split over processes."""
    data = load_mnist(profile.n, device=device, seed=profile.seed, root=data_dir)
    shard = distributed.loader_shard(profile.batch_size)
    return data, data.loader(shuffle=True, seed=profile.seed, **shard)


def run_training_stage(
    mode: str,
    profile: Profile,
    *,
    device: str | torch.device,
    data_dir: str | Path | None = None,
    **training: Any,
) -> TrainingLog | None:
    """Train the objective selected by ``mode`` and save its log; any other mode trains nothing.

    The model is built right after re-seeding with ``profile.seed``, so the full and the vanilla
    stage start from identical weights and see the same mini-batch order. ``training`` goes on to
    ``counterfactual_training`` (e.g. ``accumulate``, ``profile_epoch``). Torch's CPU threads
    follow $CFBOOK_THREADS, else this process's share of the cores. Under DDP only rank 0 saves.
    """
    if check_mode(mode) not in TRAINING_MODES:
        print(f"CT_MODE={mode}: skipping the training stages (profile {profile.name}).")
        return None
    distributed.configure_threads()
    device = torch.device(device)
    path = log_path(data_dir, profile.name, mode)
    data, loader = profile_data(profile, device=device, data_dir=path.parents[1])
    torch.manual_seed(profile.seed)
    model = build_model(profile.model)
    optimizer = torch.optim.Adam(model.parameters(), lr=profile.lr)
    model, log = counterfactual_training(
        _OBJECTIVES[mode](),
        model,
        NativeGenerator(maxiter=profile.maxiter),
        loader,
        optimizer,
        device=device,
        nepochs=profile.nepochs,
        domain=data.domain,
        burnin=profile.burnin,
        nce=profile.nce,
        cf_batchsize=profile.cf_batchsize,
        accuracy_every=profile.accuracy_every,
        val_loader=data.val_loader(),
        **training,
    )
    log.meta.update(
        profile=profile.name,
        config=asdict(profile),
        data_source=data.source,
        device_name=describe_device(device),
        threads=torch.get_num_threads(),
    )
    if distributed.is_main():
        save_log(log, path)
        print(f"Saved the {mode} log ({len(log)} epochs) to {display_path(path, path.parents[1])}")
    # Hand the accelerator's cached blocks back before the kernel moves on or exits.
    del model, optimizer, data, loader
    free_cached_memory(device)
    return log


def load_comparison_logs(
    profile_name: str, *, data_dir: str | Path | None = None
) -> tuple[TrainingLog, TrainingLog] | None:
    """Both logs of ``profile_name``, or ``None`` after saying which command produces them."""
    paths = [log_path(data_dir, profile_name, mode) for mode in TRAINING_MODES]
    missing = [p for p in paths if not p.is_file()]
    if missing:
        command = f"python -m cfbook.pipeline --profile {profile_name} --stages-only"
        if data_dir is not None:
            command += f" --data-dir {Path(data_dir)}"
        print(
            "Missing training log(s): "
            + ", ".join(display_path(p, p.parents[1]) for p in missing)
            + f"\nRun both training stages first: {command}"
        )
        return None
    log_full, log_vanilla = (load_log(p) for p in paths)
    return log_full, log_vanilla
