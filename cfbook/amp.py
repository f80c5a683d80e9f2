"""Mixed precision settings shared by the counterfactual search and the training step."""

from __future__ import annotations

import contextlib

import torch

AMP_MODES = (None, "bf16", "fp16")

# fp16 input gradients underflow for small logit gradients; a fixed power of two keeps them
# representable and divides back exactly.
FP16_GRAD_SCALE = 2.0**12


def check_amp(amp: str | None, device: torch.device | str) -> str | None:
    """Validate ``amp`` for ``device``: bf16 runs everywhere, fp16 needs CUDA (or ROCm)."""
    if amp not in AMP_MODES:
        raise ValueError(f"amp must be one of {AMP_MODES}, got {amp!r}")
    if amp == "fp16" and torch.device(device).type != "cuda":
        raise ValueError("amp='fp16' needs a CUDA/ROCm device; use amp='bf16' on CPU and MPS")
    return amp


def autocast(amp: str | None, device: torch.device | str) -> contextlib.AbstractContextManager:
    """An autocast context for ``amp`` (a no-op context when ``amp`` is None)."""
    if amp is None:
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if amp == "bf16" else torch.float16
    return torch.autocast(device_type=torch.device(device).type, dtype=dtype)
