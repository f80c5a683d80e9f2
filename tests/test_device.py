"""Tests for cfbook.device; GPU branches run on patched torch queries, so a CPU suffices."""

from __future__ import annotations

import pytest
import torch

import cfbook.device as device_module
from cfbook.device import (
    MemoryReport,
    describe_device,
    detect_device,
    format_bytes,
    free_cached_memory,
    memory_report,
    reset_peak_memory,
)


@pytest.fixture(autouse=True)
def no_device_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CFBOOK_DEVICE", raising=False)


def _fake_gpus(
    monkeypatch: pytest.MonkeyPatch, *, cuda: bool, mps: bool = False, hip: str | None = None
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: int(cuda))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Fake GPU")
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: mps)
    monkeypatch.setattr(torch.version, "cuda", None if hip else "13.0")
    monkeypatch.setattr(torch.version, "hip", hip)


@pytest.mark.parametrize(
    ("cuda", "mps", "expected"), [(True, True, "cuda"), (False, True, "mps"), (False, False, "cpu")]
)
def test_auto_detection_order(
    monkeypatch: pytest.MonkeyPatch, cuda: bool, mps: bool, expected: str
) -> None:
    _fake_gpus(monkeypatch, cuda=cuda, mps=mps)
    assert detect_device(verbose=False) == torch.device(expected)


def test_rocm_is_a_cuda_device(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_gpus(monkeypatch, cuda=True, hip="6.2")
    assert detect_device(verbose=False) == torch.device("cuda")
    assert describe_device("cuda") == "Fake GPU (ROCm 6.2)"


def test_verbose_prints_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _fake_gpus(monkeypatch, cuda=True)
    detect_device()
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1 and "cuda" in lines[0] and "Fake GPU (CUDA 13.0)" in lines[0]


def test_prefer_and_env_force_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_gpus(monkeypatch, cuda=True)
    assert detect_device("cpu", verbose=False) == torch.device("cpu")
    monkeypatch.setenv("CFBOOK_DEVICE", "CPU")
    assert detect_device(verbose=False) == torch.device("cpu")
    assert detect_device(prefer="cuda", verbose=False) == torch.device("cuda")


@pytest.mark.parametrize("value", ["tpu", "gpu", "xla"])
def test_unknown_choice_lists_valid_values(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    with pytest.raises(ValueError, match="prefer=.*cpu, cuda, mps"):
        detect_device(value, verbose=False)
    monkeypatch.setenv("CFBOOK_DEVICE", value)
    with pytest.raises(ValueError, match="CFBOOK_DEVICE=.*cpu, cuda, mps"):
        detect_device(verbose=False)


def test_unavailable_choice_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_gpus(monkeypatch, cuda=False)
    with pytest.raises(RuntimeError, match="asks for CUDA"):
        detect_device("cuda", verbose=False)
    with pytest.raises(RuntimeError, match="asks for MPS"):
        detect_device("mps", verbose=False)
    _fake_gpus(monkeypatch, cuda=True)
    with pytest.raises(RuntimeError, match="only 1 GPU"):
        detect_device("cuda:3", verbose=False)
    assert detect_device("cuda:0", verbose=False) == torch.device("cuda", 0)


def test_describe_cpu_and_mps() -> None:
    text = describe_device(torch.device("cpu"))
    assert text.startswith("CPU: ") and text.endswith(" cores")
    assert describe_device("mps") == "Apple MPS"


def test_format_bytes() -> None:
    assert format_bytes(512) == "512 B"
    assert format_bytes(1536) == "1.5 KiB"
    assert format_bytes(3 * 2**20) == "3.0 MiB"
    assert format_bytes(3 * 2**30) == "3.00 GiB"


def test_memory_report_on_cpu() -> None:
    report = memory_report("cpu")
    assert isinstance(report, MemoryReport)
    assert report.device == "cpu" and report.rss is not None and report.rss > 0
    assert report.allocated is None and report.peak is None
    assert str(report).startswith("cpu: process RSS ") and "iB" in str(report)


def test_memory_report_default_device_follows_detection(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CFBOOK_DEVICE", "cpu")
    assert memory_report().device == "cpu"


def test_memory_report_on_cuda_uses_allocator_stats(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: 2**30)
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: 2 * 2**30)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: 3 * 2**29)
    report = memory_report("cuda")
    assert (report.allocated, report.reserved, report.peak) == (2**30, 2 * 2**30, 3 * 2**29)
    assert str(report).startswith("cuda: allocated 1.00 GiB, reserved 2.00 GiB, peak 1.50 GiB")


def test_reset_and_free_only_touch_the_matching_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda d=None: calls.append("peak"))
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append("cuda"))
    monkeypatch.setattr(torch.mps, "empty_cache", lambda: calls.append("mps"))
    monkeypatch.setattr(device_module.gc, "collect", lambda: calls.append("gc") or 0)
    reset_peak_memory("cpu")
    free_cached_memory("cpu")
    assert calls == ["gc"]
    reset_peak_memory("cuda")
    free_cached_memory("cuda")
    free_cached_memory("mps")
    assert calls == ["gc", "peak", "gc", "cuda", "gc", "mps"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA/ROCm GPU")
def test_real_gpu_report() -> None:
    device = detect_device(verbose=False)
    assert device.type == "cuda"
    reset_peak_memory(device)
    block = torch.empty(2**26, device=device)  # 256 MiB
    report = memory_report(device)
    assert report.allocated >= block.numel() * 4 and report.peak >= report.allocated
    del block
    free_cached_memory(device)
    assert memory_report(device).reserved < report.reserved
    assert "(CUDA" in describe_device(device) or "(ROCm" in describe_device(device)


def test_a_gpu_index_one_past_the_last_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_gpus(monkeypatch, cuda=True)  # one GPU: cuda:0
    with pytest.raises(RuntimeError, match=r"prefer='cuda:1' asks for cuda:1, but only 1 GPU"):
        detect_device("cuda:1", verbose=False)


def test_the_line_says_how_the_device_was_chosen(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _fake_gpus(monkeypatch, cuda=True, mps=True)
    detect_device("cpu")
    detect_device()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    detect_device()
    monkeypatch.setenv("CFBOOK_DEVICE", "cpu")
    detect_device()
    lines = capsys.readouterr().out.splitlines()
    hows = [line.split(")")[0].split("(")[1] for line in lines]
    assert hows == ["requested", "detected", "detected", "from CFBOOK_DEVICE"]


def test_an_unavailable_device_from_the_environment_names_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _fake_gpus(monkeypatch, cuda=False)
    monkeypatch.setenv("CFBOOK_DEVICE", "cuda")
    with pytest.raises(RuntimeError, match=r"^CFBOOK_DEVICE='cuda' asks for CUDA"):
        detect_device(verbose=False)


def test_the_cpu_model_is_read_from_cpuinfo(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    info = tmp_path / "cpuinfo"
    info.write_bytes(b"processor\t: 0\nmodel name\t: Fake CPU @ 2.0GHz: rev 3 \xff\nflags\t: x\n")
    real = device_module.Path
    monkeypatch.setattr(device_module, "Path", lambda p: info if p == "/proc/cpuinfo" else real(p))
    assert device_module._cpu_model() == "Fake CPU @ 2.0GHz: rev 3 \ufffd"


def test_cores_are_those_this_process_may_use(monkeypatch: pytest.MonkeyPatch) -> None:
    if not hasattr(device_module.os, "sched_getaffinity"):
        pytest.skip("no CPU affinity on this platform")
    monkeypatch.setattr(device_module.os, "sched_getaffinity", lambda pid: {0})
    monkeypatch.setattr(device_module.os, "cpu_count", lambda: 64)
    assert device_module.cpu_cores() == 1


def test_memory_report_detects_its_device_quietly(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CFBOOK_DEVICE", "cpu")
    memory_report()
    assert capsys.readouterr().out == ""


def test_gpu_queries_name_the_gpu_asked_about(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[object] = []
    for name in ("memory_allocated", "memory_reserved", "max_memory_allocated"):
        monkeypatch.setattr(torch.cuda, name, lambda device=None: asked.append(device) or 0)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda d=None: asked.append(d))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda d=None: asked.append(d))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: asked.append(d) or "GPU")
    second = torch.device("cuda", 1)
    memory_report(second)
    reset_peak_memory(second)
    device_module.synchronize(second)
    describe_device(second)
    assert asked == [second] * 6


def test_mps_memory_and_sync_go_to_the_metal_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    monkeypatch.setattr(torch.mps, "current_allocated_memory", lambda: calls.append("a") or 1)
    monkeypatch.setattr(torch.mps, "driver_allocated_memory", lambda: calls.append("r") or 2)
    monkeypatch.setattr(torch.mps, "synchronize", lambda: calls.append("sync"))
    report = memory_report("mps")
    device_module.synchronize("mps")
    device_module.synchronize("cpu")  # nothing to wait for
    assert (report.allocated, report.reserved) == (1, 2) and calls == ["a", "r", "sync"]
