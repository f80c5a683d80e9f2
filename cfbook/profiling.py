"""Where one epoch's time goes: ``torch.profiler`` over a chosen epoch of counterfactual training.

The loop marks its parts with :meth:`EpochProfiler.region` (the search, the forward passes, the
backward passes and the optimiser steps); everything else in the epoch (checks of the loss,
slicing batches, all-reduces, accuracy, the checkpoint) is bookkeeping. Outside the profiled epoch
the regions are empty contexts, so an unprofiled run pays nothing.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile, record_function

__all__ = ["REGIONS", "EpochProfiler", "profile_markdown"]

# The parts of an epoch the loop marks, in the order they happen.
REGIONS = ("search", "forward", "backward", "optimizer")
_PREFIX = "cfbook/"
TOP_OPS = 12


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class EpochProfiler:
    """Profiles epoch ``epoch`` (None: none) and keeps the report of it."""

    def __init__(self, epoch: int | None, nepochs: int, device: torch.device):
        if epoch is not None and (
            isinstance(epoch, bool) or not isinstance(epoch, int) or not 1 <= epoch <= nepochs
        ):
            raise ValueError(f"profile_epoch must be an epoch in 1..{nepochs}, got {epoch!r}")
        self.epoch = epoch
        self.device = device
        self.report: dict[str, Any] | None = None
        self._profiler: profile | None = None

    @contextlib.contextmanager
    def over(self, epoch: int) -> Iterator[None]:
        """Profile the block if it is the chosen epoch; then build the report."""
        if epoch != self.epoch:
            yield
            return
        activities = [ProfilerActivity.CPU]
        if self.device.type == "cuda":
            activities.append(ProfilerActivity.CUDA)
        _synchronize(self.device)
        start = time.perf_counter()
        with profile(activities=activities) as self._profiler:
            yield
            _synchronize(self.device)
        wall = time.perf_counter() - start
        self.report = self._summarise(self._profiler, epoch, wall)
        self._profiler = None

    def region(self, name: str) -> contextlib.AbstractContextManager:
        """A named range in the profiled epoch (a no-op in every other epoch)."""
        if self._profiler is None:
            return contextlib.nullcontext()
        return _SyncedRange(_PREFIX + name, self.device)

    def _summarise(self, prof: profile, epoch: int, wall: float) -> dict[str, Any]:
        events = prof.key_averages()
        seconds = dict.fromkeys(REGIONS, 0.0)
        for event in events:
            if event.key.startswith(_PREFIX):
                seconds[event.key[len(_PREFIX) :]] += event.cpu_time_total / 1e6
        seconds["bookkeeping"] = max(0.0, wall - sum(seconds.values()))
        device_time = self.device.type == "cuda"
        ops = sorted(
            (e for e in events if not e.key.startswith(_PREFIX)),
            key=lambda e: e.self_device_time_total if device_time else e.self_cpu_time_total,
            reverse=True,
        )[:TOP_OPS]
        return {
            "epoch": epoch,
            "wall_s": wall,
            "regions_s": seconds,
            "time_basis": "host wall clock, the device synchronised at each region's end",
            "top_ops": [
                {
                    "name": e.key,
                    "calls": e.count,
                    "self_cpu_s": e.self_cpu_time_total / 1e6,
                    **({"self_device_s": e.self_device_time_total / 1e6} if device_time else {}),
                }
                for e in ops
            ],
        }


class _SyncedRange:
    """``record_function`` that waits for the device at its end, so each region's host time
    covers its own kernels (only in the profiled epoch)."""

    def __init__(self, name: str, device: torch.device):
        self._range = record_function(name)
        self._device = device

    def __enter__(self) -> None:
        self._range.__enter__()

    def __exit__(self, *exc: object) -> None:
        _synchronize(self._device)
        self._range.__exit__(*exc)


def profile_markdown(report: dict[str, Any], top: int = 5) -> str:
    """The breakdown of a profiled epoch as markdown: its parts, then the busiest operators."""
    wall = report["wall_s"]
    lines = [
        f"Epoch {report['epoch']}: {wall:.2f} s under the profiler",
        "",
        "| part | seconds | share |",
        "| --- | --- | --- |",
    ]
    for name, seconds in report["regions_s"].items():
        lines.append(f"| {name} | {seconds:.2f} | {seconds / wall:.0%} |")
    lines += ["", "| operator (self time) | calls | seconds |", "| --- | --- | --- |"]
    for op in report["top_ops"][:top]:
        seconds = op.get("self_device_s", op["self_cpu_s"])
        lines.append(f"| `{op['name']}` | {op['calls']} | {seconds:.2f} |")
    return "\n".join(lines)
