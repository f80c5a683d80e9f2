"""Mixed precision settings (cfbook.amp): which modes each device takes, and the autocast
context each mode opens."""

from __future__ import annotations

import contextlib

import pytest
import torch

from cfbook.amp import AMP_MODES, autocast, check_amp


@pytest.mark.parametrize("device", ["cpu", "cuda", "cuda:1", "mps"])
def test_none_and_bf16_run_on_every_device(device: str) -> None:
    assert check_amp(None, device) is None
    assert check_amp("bf16", torch.device(device)) == "bf16"


def test_fp16_needs_cuda() -> None:
    assert check_amp("fp16", "cuda") == "fp16"
    assert check_amp("fp16", torch.device("cuda", 1)) == "fp16"
    for device in ("cpu", "mps"):
        with pytest.raises(ValueError) as raised:
            check_amp("fp16", device)
        assert str(raised.value) == (
            "amp='fp16' needs a CUDA/ROCm device; use amp='bf16' on CPU and MPS"
        )


@pytest.mark.parametrize("amp", ["fp32", "BF16", "", True])
def test_an_unknown_mode_names_the_valid_ones(amp: object) -> None:
    with pytest.raises(ValueError, match=r"amp must be one of \(None, 'bf16', 'fp16'\)"):
        check_amp(amp, "cpu")  # type: ignore[arg-type]
    assert AMP_MODES == (None, "bf16", "fp16")


def test_autocast_computes_products_in_the_modes_dtype() -> None:
    a, b = torch.randn(4, 3), torch.randn(3, 2)
    with autocast(None, "cpu"):
        assert (a @ b).dtype == torch.float32
    assert isinstance(autocast(None, "cpu"), contextlib.nullcontext)
    with autocast("bf16", torch.device("cpu")):
        assert (a @ b).dtype == torch.bfloat16
    with autocast("fp16", "cpu"):  # check_amp refuses it on a CPU; the context itself follows
        assert (a @ b).dtype == torch.float16
