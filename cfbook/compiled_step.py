"""The compiled search iteration: when it pays, how it is compiled, and the fall-back to eager.

``torch.compile`` turns ``search_step.fused_step`` into one graph per iteration: the model's
matrix products plus two generated kernels for everything else, instead of some twenty eager
kernels and their temporaries. It pays where that bookkeeping outweighs the model (small models,
large batches) and when the compile, a few seconds per model architecture and process (longer the
first time on a machine, before the inductor cache is warm), is spread over many searches, as in
a training run that searches every epoch.

Shapes stay stable: the row dimension is compiled as dynamic, so compaction and chunks of any size
reuse one graph, and a working set never shrinks below two rows (a size of one would be
specialised and compiled again).
"""

from __future__ import annotations

import functools
import warnings
import weakref
from collections.abc import Callable
from typing import Literal

import torch
from torch import Tensor, nn
from torch.utils.flop_counter import FlopCounterMode

from cfbook.search_step import WorkingSet, fused_step

Compile = bool | Literal["auto"]

# "auto" compiles when a search holds at least this many numbers (rows x features; MNIST: 335 rows
# and up): below it a search lasts milliseconds and a compile would not be repaid.
AUTO_MIN_ELEMENTS = 2**18
# ... and when the model's forward pass costs at most this many FLOPs per input feature and row
# (an MLP 784-32-10: 65; ResNet-18 on MNIST: about 700,000, whose passes dwarf the bookkeeping).
AUTO_MAX_FLOPS_PER_FEATURE = 512
# Architectures (and constraint layouts) one process may compile before the step stays eager.
RECOMPILE_LIMIT = 16

_flops_per_row: weakref.WeakKeyDictionary[nn.Module, int] = weakref.WeakKeyDictionary()
_failed: weakref.WeakSet[nn.Module] = weakref.WeakSet()


def check_compile(compile: object) -> Compile:
    """Validate NativeGenerator's ``compile`` setting."""
    if isinstance(compile, bool) or compile == "auto":
        return compile  # type: ignore[return-value]
    raise ValueError(f"compile must be True, False or 'auto', got {compile!r}")


def forward_flops(model: nn.Module, x: Tensor) -> int:
    """FLOPs of the model's forward pass on one row (counted once per model)."""
    if model not in _flops_per_row:
        counter = FlopCounterMode(display=False)
        with torch.no_grad(), counter:
            model(x[:1])
        _flops_per_row[model] = counter.get_total_flops()
    return _flops_per_row[model]


def use_fused(compile: Compile, model: nn.Module, x0: Tensor, amp: str | None) -> bool:
    """Whether a chunk's search runs the compiled step, for NativeGenerator's ``compile``."""
    if compile is False or model in _failed:
        return False
    supported = (
        amp is None
        and x0.device.type in ("cpu", "cuda")
        and x0.dtype == torch.float32
        and x0.shape[0] >= 2
        and all(p.dtype == torch.float32 for p in model.parameters())
    )
    if not supported or compile is True:
        return supported
    return (
        x0.numel() >= AUTO_MIN_ELEMENTS
        and forward_flops(model, x0) <= AUTO_MAX_FLOPS_PER_FEATURE * x0.shape[1]
    )


@functools.cache
def _compiled() -> Callable[..., None]:
    return torch.compile(fused_step, fullgraph=True, recompile_limit=RECOMPILE_LIMIT)


def mark_rows_dynamic(ws: WorkingSet) -> None:
    """Compile the row dimension as a size, not a constant, so compaction does not recompile."""
    for t in (ws.x, ws.x0, ws.nascent, ws.active, ws.iterations, ws.target):
        torch._dynamo.maybe_mark_dynamic(t, 0)


def compiled_step(
    model: nn.Module,
    ws: WorkingSet,
    phi: Tensor,
    scalars: Tensor,
    bounds: tuple[Tensor, Tensor] | None,
    step_bounds: tuple[Tensor, Tensor] | None,
    with_cost: bool,
) -> bool:
    """Run one compiled iteration on ``ws`` in place; False if the model cannot be compiled (the
    caller then runs the eager step, for this and every later search with this model).

    Compilation happens before anything runs, so a failure leaves ``ws`` untouched.
    """
    try:
        with torch.no_grad():
            _compiled()(model, ws.x, ws.x0, ws.nascent, ws.active, ws.iterations, ws.target, phi,
                        scalars, bounds, step_bounds, with_cost)
        return True
    except Exception as err:  # noqa: BLE001 - any compiler failure means: search eagerly
        _failed.add(model)
        reason = str(err).strip().splitlines()[0] if str(err).strip() else ""
        warnings.warn(
            f"cfbook: the compiled search step failed for {type(model).__name__} "
            f"({type(err).__name__}: {reason}); searching with the eager step instead "
            "(NativeGenerator(compile=False) skips the attempt)",
            RuntimeWarning,
            stacklevel=3,
        )
        return False
