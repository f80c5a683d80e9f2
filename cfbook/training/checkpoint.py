"""Per-epoch checkpoints, so an interrupted training run resumes where it stopped, and only the
run it belongs to."""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path
from typing import Any

import torch

from cfbook.atomic import atomic_torch_save, atomic_write_text

CHECKPOINT_NAME = "checkpoint.pt"
CONFIG_NAME = "config.json"  # the configuration of the run the checkpoint belongs to


def checkpoint_path(checkpoint_dir: str | Path) -> Path:
    return Path(checkpoint_dir) / CHECKPOINT_NAME


def save_checkpoint(state: dict[str, Any], checkpoint_dir: str | Path) -> Path:
    """Write ``state`` atomically: a crash leaves the previous epoch's checkpoint intact."""
    path = checkpoint_path(checkpoint_dir)
    atomic_torch_save(state, path)
    return path


def load_checkpoint(checkpoint_dir: str | Path) -> dict[str, Any] | None:
    """The saved state, or ``None`` when there is none; a damaged file is an error naming it."""
    path = checkpoint_path(checkpoint_dir)
    if not path.is_file():
        return None
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except (RuntimeError, EOFError, OSError, ValueError, pickle.UnpicklingError) as err:
        raise ValueError(
            f"corrupt checkpoint {path}: {err}. Delete it to start the run afresh."
        ) from err
    if not isinstance(state, dict) or "epoch" not in state or "model" not in state:
        raise ValueError(f"corrupt checkpoint {path}: missing epoch/model entries")
    return state


# The samplers of a torch DataLoader whose only random state is torch's global generator or the
# generator they hold (both saved), so that a resumed run draws the same batches.
_KNOWN_SAMPLERS = (
    torch.utils.data.SequentialSampler,
    torch.utils.data.RandomSampler,
    torch.utils.data.SubsetRandomSampler,
    torch.utils.data.WeightedRandomSampler,
    torch.utils.data.distributed.DistributedSampler,
)


def loader_generators(loader: object) -> list[torch.Generator]:
    """The torch generators a DataLoader draws its batches from (its own and its sampler's,
    once each); none for a loader that draws from torch's global generator only, or that is
    not a torch DataLoader."""
    found: list[torch.Generator] = []
    if not isinstance(loader, torch.utils.data.DataLoader):
        return found
    sampler = getattr(loader, "sampler", None)
    for g in (getattr(loader, "generator", None), getattr(sampler, "generator", None)):
        if isinstance(g, torch.Generator) and all(g is not f for f in found):
            found.append(g)
    return found


def check_resumable_loader(loader: object) -> None:
    """Refuse to checkpoint a run whose batches a resume could not draw again: a torch DataLoader
    with a sampler or batch sampler of its own, whose random state cfbook cannot save."""
    if hasattr(loader, "state_dict") or not isinstance(loader, torch.utils.data.DataLoader):
        return
    batch_sampler = loader.batch_sampler
    custom = [
        type(s).__name__
        for s, known in (
            (loader.sampler, _KNOWN_SAMPLERS),
            (batch_sampler, (torch.utils.data.BatchSampler, type(None))),
        )
        if not isinstance(s, known)
    ]
    if custom:
        raise ValueError(
            f"checkpoint_dir with a DataLoader whose batches come from {custom[0]}: cfbook "
            "cannot save its random state, so a resumed run would not draw the batches an "
            "uninterrupted one draws. Shuffle with DataLoader(..., shuffle=True) (its generator "
            "is saved), use cfbook.data.DeviceLoader, or train without checkpoint_dir"
        )


def rng_states(rng: torch.Generator, loader: object) -> dict[str, Any]:
    """Every random state a resumed run needs to continue exactly as an uninterrupted one: the
    search's generator, torch's (and CUDA's), and the loader's (a ``DeviceLoader``'s state, a
    DataLoader's generators)."""
    states = {"search": rng.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state_all()
    if hasattr(loader, "state_dict"):
        states["loader"] = loader.state_dict()
    generators = loader_generators(loader)
    if generators:
        states["loader_generators"] = [g.get_state() for g in generators]
    return states


def restore_rng_states(states: dict[str, Any], rng: torch.Generator, loader: object) -> None:
    rng.set_state(states["search"])
    torch.set_rng_state(states["torch"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])
    if "loader" in states and hasattr(loader, "load_state_dict"):
        loader.load_state_dict(states["loader"])
    if "loader_generators" in states:  # the run's identity holds how many the loader has
        for g, state in zip(loader_generators(loader), states["loader_generators"], strict=True):
            g.set_state(state)


def prepare_checkpoint_dir(checkpoint_dir: str | Path, config: dict[str, Any]) -> Path:
    """The folder for a run with ``config``, cleared if its checkpoint came from another config.

    ``counterfactual_training`` resumes from whatever checkpoint it finds; one left by a run with
    other settings (more epochs, another model) must not be continued as if it were this run's.
    """
    folder = Path(checkpoint_dir)
    stamp = folder / CONFIG_NAME
    wanted = json.dumps(config, sort_keys=True)
    if folder.exists() and not (stamp.is_file() and stamp.read_text(encoding="utf-8") == wanted):
        shutil.rmtree(folder)
    if not folder.exists():
        atomic_write_text(stamp, wanted)
    return folder
