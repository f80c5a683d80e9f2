"""What every chapter resolves first: the mode, the profile, the device and the data folder."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from cfbook.data import find_data_dir
from cfbook.device import describe_device, detect_device
from cfbook.profiles import Profile, resolve_parameters


@dataclass(frozen=True)
class Chapter:
    mode: str
    profile: Profile
    device: torch.device
    data_dir: Path


def setup(
    CT_MODE: str | None = None, profile: str | None = None, *, data_dir: str | Path | None = None
) -> Chapter:
    """Resolve a chapter's parameters (papermill's, else the environment's) and say so in a line."""
    device = detect_device(verbose=False)
    mode, config = resolve_parameters(CT_MODE, profile, device)
    folder = Path(data_dir) if data_dir is not None else find_data_dir()
    print(f"CT_MODE={mode}, profile={config.name}, device {device} ({describe_device(device)})")
    return Chapter(mode, config, device, folder)
