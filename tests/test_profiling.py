"""cfbook.profiling on a stand-in profiler: how an epoch's events become its report (regions in
seconds, bookkeeping as the rest of the wall time, the busiest operators), on a CPU and on a
CUDA device, and the report's Markdown. The real profiler over a real epoch: test_scaling.py."""

from __future__ import annotations

import contextlib
import types
from dataclasses import dataclass

import pytest
import torch

import cfbook.profiling as profiling
from cfbook.profiling import EpochProfiler, profile_markdown


@dataclass
class _Event:  # what torch.profiler's key_averages() gives per key; times in microseconds
    key: str
    cpu_time_total: float = 0.0
    self_cpu_time_total: float = 0.0
    self_device_time_total: float = 0.0
    count: int = 1


EVENTS = [
    _Event("cfbook/search", cpu_time_total=2_000_000),
    _Event("aten::mm", self_cpu_time_total=300_000, self_device_time_total=10_000, count=4),
    _Event("cfbook/forward", cpu_time_total=500_000),
    _Event("aten::add", self_cpu_time_total=100_000, self_device_time_total=30_000, count=2),
    _Event("cfbook/backward", cpu_time_total=250_000),
    _Event("aten::relu", self_cpu_time_total=200_000, self_device_time_total=20_000, count=3),
    _Event("cfbook/optimizer", cpu_time_total=125_000),
]


@pytest.fixture
def stand_in(monkeypatch: pytest.MonkeyPatch) -> dict[str, list]:
    """torch.profiler.profile, the clock and torch.cuda.synchronize replaced: what they saw, and
    the events the profiler gives."""
    seen: dict[str, list] = {"activities": [], "synced": [], "events": EVENTS}

    @contextlib.contextmanager
    def profile(activities):
        seen["activities"].append(activities)
        yield types.SimpleNamespace(key_averages=lambda: seen["events"])

    clock = iter([10.0, 13.0])  # the profiled block takes 3 s
    monkeypatch.setattr(profiling, "profile", profile)
    monkeypatch.setattr(profiling, "time", types.SimpleNamespace(perf_counter=lambda: next(clock)))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device: seen["synced"].append(device))
    return seen


REGIONS_S = {"search": 2.0, "forward": 0.5, "backward": 0.25, "optimizer": 0.125}


def test_a_cpu_epochs_report(stand_in: dict[str, list]) -> None:
    profiler = EpochProfiler(2, 3, torch.device("cpu"))
    with profiler.over(1):
        assert isinstance(profiler.region("search"), contextlib.nullcontext)
    assert profiler.report is None and stand_in["activities"] == []
    with profiler.over(2):
        assert not isinstance(profiler.region("search"), contextlib.nullcontext)
    assert isinstance(profiler.region("search"), contextlib.nullcontext)  # after it: nothing
    assert stand_in["activities"] == [[torch.profiler.ProfilerActivity.CPU]]
    assert stand_in["synced"] == []  # nothing to wait for on a CPU
    assert profiler.report == {
        "epoch": 2,
        "wall_s": 3.0,
        "regions_s": REGIONS_S | {"bookkeeping": 0.125},  # 3 s less the regions' 2.875
        "time_basis": "host wall clock, the device synchronised at each region's end",
        "top_ops": [  # by self CPU time, the regions left out
            {"name": "aten::mm", "calls": 4, "self_cpu_s": 0.3},
            {"name": "aten::relu", "calls": 3, "self_cpu_s": 0.2},
            {"name": "aten::add", "calls": 2, "self_cpu_s": 0.1},
        ],
    }


def test_a_cuda_epoch_waits_for_the_device_and_ranks_operators_by_device_time(
    stand_in: dict[str, list],
) -> None:
    cuda = torch.device("cuda", 1)
    profiler = EpochProfiler(3, 3, cuda)
    with profiler.over(3):
        with profiler.region("search"):
            assert stand_in["synced"] == [cuda]  # before the clock starts
        assert stand_in["synced"] == [cuda, cuda]  # at the region's end
    assert stand_in["synced"] == [cuda] * 3  # and at the epoch's
    assert stand_in["activities"] == [
        [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    ]
    assert [(op["name"], op["self_device_s"]) for op in profiler.report["top_ops"]] == [
        ("aten::add", 0.03),
        ("aten::relu", 0.02),
        ("aten::mm", 0.01),
    ]
    assert profiler.report["top_ops"][0]["self_cpu_s"] == 0.1


def test_the_busiest_twelve_operators_are_kept(stand_in: dict[str, list]) -> None:
    stand_in["events"] = [_Event(f"op{i}", self_cpu_time_total=1000 * i) for i in range(14)]
    profiler = EpochProfiler(1, 1, torch.device("cpu"))
    with profiler.over(1):
        pass
    assert [op["name"] for op in profiler.report["top_ops"]] == [f"op{i}" for i in range(13, 1, -1)]


@pytest.mark.parametrize("epoch", [1, 4, None])
def test_any_epoch_of_the_run_or_none_can_be_profiled(epoch: int | None) -> None:
    profiler = EpochProfiler(epoch, 4, torch.device("cpu"))
    assert (profiler.epoch, profiler.report) == (epoch, None)
    assert isinstance(profiler.region("search"), contextlib.nullcontext)


@pytest.mark.parametrize("epoch", [0, 5, True, 2.0])
def test_an_epoch_outside_the_run_is_refused(epoch: object) -> None:
    with pytest.raises(ValueError, match=r"profile_epoch must be an epoch in 1..4, got"):
        EpochProfiler(epoch, 4, torch.device("cpu"))  # type: ignore[arg-type]


def test_the_report_as_markdown() -> None:
    ops = [{"name": f"aten::op{i}", "calls": i, "self_cpu_s": 0.5 - i / 10} for i in range(6)]
    ops[1]["self_device_s"] = 0.25  # on a GPU the device's time is shown
    report = {"epoch": 2, "wall_s": 4.0, "regions_s": {"search": 3.0, "bookkeeping": 1.0}}
    assert profile_markdown(report | {"top_ops": ops}) == "\n".join(
        [
            "Epoch 2: 4.00 s under the profiler",
            "",
            "| part | seconds | share |",
            "| --- | --- | --- |",
            "| search | 3.00 | 75% |",
            "| bookkeeping | 1.00 | 25% |",
            "",
            "| operator (self time) | calls | seconds |",
            "| --- | --- | --- |",
            "| `aten::op0` | 0 | 0.50 |",
            "| `aten::op1` | 1 | 0.25 |",
            "| `aten::op2` | 2 | 0.30 |",
            "| `aten::op3` | 3 | 0.20 |",
            "| `aten::op4` | 4 | 0.10 |",
        ]
    )
    assert profile_markdown(report | {"top_ops": ops}, top=2).endswith("| `aten::op1` | 1 | 0.25 |")
