"""The compiled search iteration: when it pays, how it is compiled, and the fall-back to eager.

``torch.compile`` turns ``search_step.fused_step`` into one graph per iteration: the model's
matrix products plus a few generated kernels (one loop over the iterate for the whole update),
instead of some twenty eager kernels and their temporaries. It pays where that bookkeeping
outweighs the model (small models, large batches) and when the compile, a few seconds per model
architecture and process (about 20 s the first time on a machine, before the inductor cache is
warm), is spread over many searches, as in a long training run that searches every epoch. So
``compile="auto"`` searches a qualifying model eagerly until the searches of its architecture
have taken ``AUTO_COMPILE_AFTER_S`` in the process, then compiles: a long run pays the compile
once and at most about doubles what it spent before, and a short one, which would never earn it
back, never pays it.

Shapes stay stable: the row dimension is compiled as dynamic, so compaction and chunks of any size
reuse one graph, and a working set never shrinks below two rows (a size of one would be
specialised and compiled again). Since nothing else changes within a search, only its first
iteration pays for the graph's guards.
"""

from __future__ import annotations

import contextlib
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
# ... once the eager searches of the model's architecture that qualify have taken this long in the
# process (seconds).
AUTO_COMPILE_AFTER_S = 10.0
# Architectures (and constraint layouts) one process may compile before the step stays eager.
RECOMPILE_LIMIT = 16

_flops_per_row: weakref.WeakKeyDictionary[nn.Module, int] = weakref.WeakKeyDictionary()
_failed: weakref.WeakSet[nn.Module] = weakref.WeakSet()
_eager_seconds: dict[tuple, float] = {}  # per architecture (see _architecture)


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


def _supported(model: nn.Module, x0: Tensor, amp: str | None) -> bool:
    return (
        model not in _failed
        and amp is None
        and x0.device.type in ("cpu", "cuda")
        and x0.dtype == torch.float32
        and x0.shape[0] >= 2
        and all(p.dtype == torch.float32 for p in model.parameters())
    )


def _qualifies(model: nn.Module, x0: Tensor) -> bool:
    """A search big enough, with a model cheap enough, for the compiled step to be faster."""
    return (
        x0.numel() >= AUTO_MIN_ELEMENTS
        and forward_flops(model, x0) <= AUTO_MAX_FLOPS_PER_FEATURE * x0.shape[1]
    )


def use_fused(compile: Compile, model: nn.Module, x0: Tensor, amp: str | None) -> bool:
    """Whether a chunk's search runs the compiled step, for NativeGenerator's ``compile``."""
    if compile is False or not _supported(model, x0, amp):
        return False
    if compile is True:
        return True
    return (_qualifies(model, x0)
            and _eager_seconds.get(_architecture(model), 0.0) >= AUTO_COMPILE_AFTER_S)


def counts_toward_compile(compile: Compile, model: nn.Module, x0: Tensor,
                          amp: str | None) -> bool:
    """Whether an eager search's time counts toward ``compile="auto"`` compiling this model."""
    return compile == "auto" and _supported(model, x0, amp) and _qualifies(model, x0)


def record_eager_search(model: nn.Module, seconds: float) -> None:
    """Add an eager search's wall time to its architecture's account (see
    ``counts_toward_compile``)."""
    key = _architecture(model)
    _eager_seconds[key] = _eager_seconds.get(key, 0.0) + seconds


def _architecture(model: nn.Module) -> tuple:
    """What the account is kept for: the module types and parameter shapes. A compile serves
    every model of an architecture, so a new model of one already searched long enough (the
    next seed of an experiment, say) compiles at once, and reuses the graph if it exists."""
    return (tuple(type(m).__qualname__ for m in model.modules()),
            tuple(p.shape for p in model.parameters()))


@functools.cache
def _compiled() -> Callable[..., None]:
    return torch.compile(fused_step, fullgraph=True, recompile_limit=RECOMPILE_LIMIT)


def mark_rows_dynamic(ws: WorkingSet) -> None:
    """Compile the row dimension as a size, not a constant, so compaction does not recompile."""
    for t in (ws.x, ws.x0, ws.nascent, ws.within, ws.active, ws.iterations, ws.target):
        torch._dynamo.maybe_mark_dynamic(t, 0)


def compiled_step(
    model: nn.Module,
    ws: WorkingSet,
    phi: Tensor,
    scalars: Tensor,
    bounds: tuple[Tensor, Tensor] | None,
    step_bounds: tuple[Tensor, Tensor] | None,
    with_cost: bool,
    *,
    checked: bool = False,
) -> bool:
    """Run one compiled iteration on ``ws`` in place; False if the model cannot be compiled (the
    caller then runs the eager step, for this and every later search with this model).

    Compilation happens before anything runs, so a failure leaves ``ws`` untouched.

    ``checked``: an earlier iteration of the same search has passed the graph's guards. Its
    inputs differ from this one's only in values and row count, which the graph takes as inputs,
    so the guards (a few hundred checks on the model, the tensors and torch's global state, up to
    0.2 ms a call on a 2-core CPU, a tenth of a small model's pass) are skipped. Should the call
    still fail, it is retried with them.
    """
    stance = (torch.compiler.set_stance(skip_guard_eval_unsafe=True) if checked
              else contextlib.nullcontext())
    try:
        with torch.no_grad(), stance:
            _compiled()(model, ws.x, ws.x0, ws.nascent, ws.within, ws.active, ws.iterations,
                        ws.target, phi, scalars, bounds, step_bounds, with_cost)
        return True
    except Exception as err:  # noqa: BLE001 - any compiler failure means: search eagerly
        if checked:  # e.g. a graph to compile, which a call without guards cannot do
            return compiled_step(model, ws, phi, scalars, bounds, step_bounds, with_cost)
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
