"""The compiled executor: ``search_step`` compiled by ``torch.compile``.

The one step function is compiled whole (the model's forward pass, its input gradient by
``torch.func.vjp`` and the update) with a symbolic row count, so chunks of any size and the
shrinking batch of a search reuse one graph; a model architecture and constraint layout compile
once per process. It pays where the bookkeeping outweighs the model (small models, many rows,
long runs of searches) and the compile, seconds per process, is spread over many searches.
``NativeGenerator(compile=True)`` asks for it; the results agree with the eager executor's to
float rounding. The private torch settings the search needs live here and nowhere else.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable

import torch
from torch import Tensor, nn

from cfbook.errors import warn
from cfbook.search.step import RESULTS, SearchState, StepLayout, search_step

# Each model architecture and constraint layout is one entry of torch.compile's cache for
# search_step; past its limit torch would run the step eagerly without a word, so a search
# that would pass it fails instead (and warns, then runs eagerly: see ``step``). Hooks added to
# a model after its compile must compile again, not run the graph compiled without them.
SETTINGS = {
    "recompile_limit": 64,
    "fail_on_recompile_limit_hit": True,
    "skip_nnmodule_hook_guards": False,
}


def _step_in_place(
    model: nn.Module, state: SearchState, phi: Tensor, scalars: Tensor, layout: StepLayout
) -> None:
    """``search_step`` with its results written into ``state``'s buffers: compiled, the update
    writes them where it reads them, rather than into fresh pages each iteration."""
    stepped = search_step(model, state, phi, scalars, layout)
    for name in RESULTS:
        getattr(state, name).copy_(getattr(stepped, name))


@functools.cache
def _compiled() -> Callable[..., None]:
    """``_step_in_place`` under ``torch.compile``, made on first use: ``torch.compile`` imports
    the compiler stack, which would otherwise slow every ``import cfbook``. One graph
    or none: a model that breaks the graph is searched eagerly, with a warning, rather than
    partly compiled."""
    return torch.compile(_step_in_place, dynamic=True, fullgraph=True)


_failed: weakref.WeakSet[nn.Module] = weakref.WeakSet()


def supported(model: nn.Module, x0: Tensor, amp: str | None) -> bool:
    """Whether the compiled executor runs this search: at least two float32 rows (one row would
    be specialised and compiled again) and float32 parameters without autocast, on a CPU or a
    CUDA GPU, for a model that has not failed to compile."""
    return (
        model not in _failed
        and x0.shape[0] >= 2
        and amp is None
        and x0.device.type in ("cpu", "cuda")
        and x0.dtype == torch.float32
        and all(p.dtype == torch.float32 for p in model.parameters())
    )


def step(
    model: nn.Module, state: SearchState, phi: Tensor, scalars: Tensor, layout: StepLayout
) -> SearchState | None:
    """``state`` one step later, by ``search_step`` compiled (in place: ``state``'s own
    buffers, which must not be shared, hold the result); None, with a warning, if ``model``
    cannot be compiled (the caller then steps eagerly, now and for every later search of this
    model). ``state`` must hold at least two rows: one row would be specialised and compiled
    again."""
    try:
        with torch._dynamo.config.patch(**SETTINGS):
            _compiled()(model, state, phi, scalars, layout)
        return state
    except Exception as err:  # noqa: BLE001 - any compiler failure means: step eagerly
        _failed.add(model)
        reason = str(err).strip().splitlines()[0] if str(err).strip() else ""
        warn(
            f"cfbook: the compiled search step failed for {type(model).__name__} "
            f"({type(err).__name__}: {reason}); searching with the eager step instead "
            "(NativeGenerator(compile=False) skips the attempt)",
            RuntimeWarning,
        )
        return None
