"""Per-epoch checkpoints, so an interrupted training run resumes where it stopped."""

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
