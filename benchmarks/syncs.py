"""Sync check: host synchronisations per search, against maxiter.

A GPU search loop that reads a value back every iteration (``.item()``, ``if tensor:``,
``nonzero``, boolean-mask indexing, a copy to the host) stalls the GPU once per iteration.
On any device the operators that would force such a wait are counted while a search runs,
split into setup (argument checks) and the search loop itself; on CUDA the driver's own view
(``torch.cuda.set_sync_debug_mode``) is counted as well.
"""

from __future__ import annotations

import contextlib
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any
from unittest import mock

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from benchmarks.common import Context, Table, check
from benchmarks.config import CONVERGING_SEARCH
from benchmarks.fixtures import DOMAIN, factuals, trained_model
from cfbook.search.generators import NativeGenerator, ReferenceGenerator

TITLE = "Sync check: host synchronisations per search"
aten = torch.ops.aten
READBACK = {
    aten._local_scalar_dense: "item/bool/int/float",
    aten.nonzero: "nonzero",
    aten.masked_select: "masked_select",
    aten.is_nonzero: "is_nonzero",
    aten._unique2: "unique",
}
INDEXING = {aten.index, aten.index_put, aten.index_put_}
COPIES = {aten._to_copy, aten.copy_}
PYTHON_READBACK = ("tolist", "numpy", "cpu")  # host conversions that can bypass the dispatcher


def _sync_kind(func: Any, args: tuple, kwargs: dict) -> str | None:
    """The kind of host wait an operator call forces, or None."""
    packet = func.overloadpacket
    if packet in READBACK:
        return READBACK[packet]
    if packet in INDEXING and len(args) > 1:
        indices = args[1] if isinstance(args[1], list | tuple) else [args[1]]
        if any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in indices):
            return "boolean-mask indexing"
    if packet in COPIES and isinstance(args[0], torch.Tensor):
        src, dst = (args[1], args[0]) if packet is aten.copy_ else (args[0], None)
        target = dst.device if dst is not None else kwargs.get("device")
        to_host = target is not None and torch.device(target).type == "cpu"
        if src.device.type != "cpu" and to_host:
            return "copy to host"
    return None


class SyncCounter(TorchDispatchMode):
    """Counts operators that force a device-to-host wait, per phase ("setup" or "search")."""

    def __init__(self) -> None:
        super().__init__()
        self.phase = "setup"
        self.counts: Counter[tuple[str, str]] = Counter()
        self.cuda_warnings: Counter[str] = Counter()  # per phase, from the CUDA sync debug mode
        self.warning_log: list = []

    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None
    ) -> Any:
        kwargs = kwargs or {}
        kind = _sync_kind(func, args, kwargs)
        if kind:
            self.counts[(self.phase, kind)] += 1
        return func(*args, **kwargs)

    def total(self, phase: str) -> int:
        return sum(v for (p, _), v in self.counts.items() if p == phase)


def _sync_warnings(caught: list) -> int:
    return sum("synchroniz" in str(w.message) for w in caught)


@contextlib.contextmanager
def counting(owner: type, method: str, cuda: bool) -> Iterator[SyncCounter]:
    """Count syncs while ``owner.<method>`` runs as "search", everything else as "setup"."""
    counter = SyncCounter()
    original = getattr(owner, method)

    def in_search(*args: Any, **kwargs: Any) -> Any:
        counter.phase, before = "search", len(counter.warning_log)
        try:
            return original(*args, **kwargs)
        finally:
            counter.phase = "setup"
            counter.cuda_warnings["search"] += _sync_warnings(counter.warning_log[before:])

    def python_readback(name: str) -> Callable:
        plain = getattr(torch.Tensor, name)

        def wrapper(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            counter.counts[(counter.phase, f".{name}()")] += 1
            return plain(self, *args, **kwargs)

        return wrapper

    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.object(owner, method, in_search))
        for name in PYTHON_READBACK:
            stack.enter_context(mock.patch.object(torch.Tensor, name, python_readback(name)))
        counter.warning_log = stack.enter_context(warnings.catch_warnings(record=True))
        warnings.simplefilter("always")
        if cuda:
            previous = torch.cuda.get_sync_debug_mode()
            torch.cuda.set_sync_debug_mode("warn")
            stack.callback(torch.cuda.set_sync_debug_mode, previous)
        stack.enter_context(counter)
        yield counter
    counter.cuda_warnings["setup"] = (
        _sync_warnings(counter.warning_log) - counter.cuda_warnings["search"]
    )


def _breakdown(counter: SyncCounter, phase: str) -> str:
    items = sorted((k, v) for (p, k), v in counter.counts.items() if p == phase and v)
    return ", ".join(f"{k} {v}" for k, v in items) or "none"


def run(ctx: Context) -> list[Table]:
    sizes = ctx.sizes
    maxiter, nce = sizes.maxiter, sizes.sync_nce
    model = trained_model(ctx, "mlp")
    x, target = factuals(ctx, model, nce)
    table = Table(
        f"Host synchronisations per generate() call (mlp, nce {nce}, maxiter {maxiter}, "
        "compact_every 5)",
        [
            "generator",
            "search",
            "chunks",
            "setup syncs",
            "search syncs",
            "per chunk",
            "compaction points per chunk",
            "search syncs by kind",
            "CUDA debug mode: search syncs",
        ],
    )
    targets = Table("Targets", ["target", "measured", "status"])
    points = len(NativeGenerator(maxiter=maxiter).compaction_points())
    runs = [
        ("Native", "default", NativeGenerator(maxiter=maxiter), None),
        (
            "Native",
            "converging",
            NativeGenerator(maxiter=maxiter, **CONVERGING_SEARCH["mlp"]),
            None,
        ),
        ("Native", "default", NativeGenerator(maxiter=maxiter), nce // 4),
    ]
    cuda = ctx.device.type == "cuda"
    for label, search, gen, chunk in runs:
        chunks = -(-nce // chunk) if chunk else 1
        with counting(NativeGenerator, "_search", cuda) as counter:
            replace(gen, cf_batchsize=chunk).generate(model, x, target, domain=DOMAIN)
        in_search = max(counter.total("search"), counter.cuda_warnings["search"])
        table.add(
            label,
            search,
            chunks,
            counter.total("setup"),
            counter.total("search"),
            f"{in_search / chunks:.1f}",
            points,
            _breakdown(counter, "search"),
            counter.cuda_warnings["search"] if cuda else "n/a (CPU run)",
        )
        targets.add(
            f"no per-iteration sync ({search}, {chunks} chunk(s)): search syncs per chunk <= "
            f"compaction points ({points})",
            f"{in_search / chunks:.1f}",
            check(in_search / chunks <= points),
        )
    k = 4
    with counting(ReferenceGenerator, "_search_one", cuda) as counter:
        ReferenceGenerator(maxiter=maxiter).generate(model, x[:k], target[:k], domain=DOMAIN)
    in_search = counter.total("search")
    table.add(
        "Reference",
        "default",
        f"{k} samples",
        counter.total("setup"),
        in_search,
        f"{in_search / k:.1f} per sample",
        "-",
        _breakdown(counter, "search"),
        counter.cuda_warnings["search"] if cuda else "n/a (CPU run)",
    )
    table.notes += [
        "Counted with a TorchDispatchMode over the operators that make the host wait for the "
        "device (_local_scalar_dense behind .item()/bool()/int()/float(), nonzero, "
        "masked_select, boolean-mask indexing, device-to-host copies) plus Python-level "
        ".tolist()/.numpy()/.cpu() calls; on a CPU run they cost nothing but mark the points "
        "where a GPU run would stall.",
        "Search = inside NativeGenerator._search (ReferenceGenerator._search_one): the loop. "
        "Setup = argument checks once per call (target range, domain validation on the host).",
        "Compaction points (NativeGenerator.compaction_points(): iterations 1, 2, 4, then every "
        "compact_every): one read of the active set (a nonzero) to drop converged rows; nothing "
        "else in the loop waits, on any device: a CPU run counts what a GPU run would wait "
        "for.",
    ]
    if cuda:
        table.notes.append(
            "CUDA debug mode: warnings of torch.cuda.set_sync_debug_mode('warn') "
            "raised inside the search (the driver's own count); per chunk takes "
            "the larger of the two counts."
        )
    return [table, targets]
