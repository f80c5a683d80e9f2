"""The one call every chapter makes after its ``parameters`` cell.

Papermill overwrites the parameters cell's values when it runs a chapter; left at ``None`` they
come from the environment. :func:`setup` turns them into the mode, profile, device and data
folder that the rest of the chapter uses, and prints them on one line, so each executed page says
how it was built.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import torch

from cfbook.book.profiles import Profile, resolve_parameters
from cfbook.data import find_data_dir
from cfbook.device import describe_device, detect_device

__all__ = ["Chapter", "setup"]


@dataclass(frozen=True)
class Chapter:
    """What a chapter runs with: checked parameters plus the device and data folder."""

    mode: str
    profile: Profile
    device: torch.device
    data_dir: Path


def setup(
    CT_MODE: str | None = None,  # the parameter keeps the name chapters and papermill use
    profile: str | None = None,
    *,
    data_dir: str | Path | None = None,
) -> Chapter:
    """Resolve a chapter's parameters as :func:`cfbook.book.profiles.resolve_parameters` does.

    ``CT_MODE=None`` reads $CT_MODE (else ``plot``), ``profile=None`` reads $CFBOOK_PROFILE (else
    the default for the device), the device comes from $CFBOOK_DEVICE or detection, and
    ``data_dir=None`` is :func:`cfbook.data.find_data_dir`.
    """
    device = detect_device(verbose=False)
    if device.type != "cuda":
        # A CUDA build of torch on a machine without CUDA logs "No CUDA runtime is found" to
        # stderr when inductor first compiles: true of the machine, nothing a reader should act on.
        logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)
    mode, config = resolve_parameters(CT_MODE, profile, device)
    folder = Path(data_dir) if data_dir is not None else find_data_dir()
    print(f"CT_MODE={mode}, profile={config.name}, device {device} ({describe_device(device)})")
    return Chapter(mode, config, device, folder.resolve())
