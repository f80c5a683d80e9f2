"""Per-epoch checkpoints, so an interrupted training run resumes where it stopped."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import torch

from cfbook.atomic import atomic_torch_save

CHECKPOINT_NAME = "checkpoint.pt"


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
