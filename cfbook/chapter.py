"""A chapter's set-up in one call: its mode, profile, device and data folder."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from cfbook.data import find_data_dir
from cfbook.device import detect_device
from cfbook.profiles import Profile, resolve_parameters

__all__ = ["Chapter", "setup"]


@dataclass(frozen=True)
class Chapter:
    """What the ``parameters`` cell resolved to."""

    mode: str
    profile: Profile
    device: torch.device
    data_dir: Path


def setup(
    ct_mode: str | None, profile: str | None, data_dir: str | Path | None = None
) -> Chapter:
    """Resolve a chapter's ``parameters`` cell (``None``: from the environment) and say, in one
    line, what the chapter runs with."""
    device = detect_device(verbose=False)
    mode, resolved = resolve_parameters(ct_mode, profile, device)
    folder = Path(data_dir) if data_dir is not None else find_data_dir()
    print(f"CT_MODE={mode}, profile={resolved.name}, device={device}")
    return Chapter(mode, resolved, device, folder)
