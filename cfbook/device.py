"""Pick the accelerator, describe it and report memory, so chapters run on any hardware."""

from __future__ import annotations

import gc
import os
import platform
from dataclasses import dataclass
from pathlib import Path

import psutil
import torch

from cfbook.errors import SetupError

__all__ = [
    "DEVICE_TYPES",
    "MemoryReport",
    "cpu_cores",
    "describe_device",
    "detect_device",
    "format_bytes",
    "free_cached_memory",
    "memory_report",
    "reset_peak_memory",
    "synchronize",
]

# ROCm builds of PyTorch expose AMD GPUs through the "cuda" device type as well.
DEVICE_TYPES = ("cpu", "cuda", "mps")


def _parse_choice(value: str, origin: str) -> torch.device:
    try:
        device = torch.device(value.strip().lower())
    except RuntimeError:
        device = None
    if device is None or device.type not in DEVICE_TYPES:
        valid = ", ".join(DEVICE_TYPES)
        raise ValueError(f"{origin}={value!r} is not a device; valid values: {valid}")
    return device


def _check_available(device: torch.device, origin: str) -> None:
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise SetupError(
                f"{origin} asks for CUDA, but no CUDA/ROCm GPU is usable (torch "
                f"{torch.__version__}, built for CUDA {torch.version.cuda}, ROCm "
                f"{torch.version.hip}). Check the driver and that the GPU build of torch is "
                "installed, or use 'cpu'."
            )
        count = torch.cuda.device_count()
        if device.index is not None and device.index >= count:
            raise SetupError(f"{origin} asks for {device}, but only {count} GPU(s) are visible")
    elif device.type == "mps" and not torch.backends.mps.is_available():
        raise SetupError(
            f"{origin} asks for MPS, but Apple's Metal backend is not available here; use 'cpu'"
        )


def detect_device(prefer: str | None = None, verbose: bool = True) -> torch.device:
    """The device to train on: ``prefer``, else $CFBOOK_DEVICE, else CUDA/ROCm, then MPS, then CPU.

    An explicit choice that is not available raises instead of silently falling back, so a run that
    was meant for the GPU never crawls along on the CPU unnoticed.
    """
    env = os.environ.get("CFBOOK_DEVICE", "").strip()
    if prefer is not None:
        device = _parse_choice(prefer, "prefer")
        _check_available(device, f"prefer={prefer!r}")
        how = "requested"
    elif env:
        device = _parse_choice(env, "CFBOOK_DEVICE")
        _check_available(device, f"CFBOOK_DEVICE={env!r}")
        how = "from CFBOOK_DEVICE"
    elif torch.cuda.is_available():
        device, how = torch.device("cuda"), "detected"
    elif torch.backends.mps.is_available():
        device, how = torch.device("mps"), "detected"
    else:
        device, how = torch.device("cpu"), "no GPU found"
    if verbose:
        print(f"Using device {device} ({how}): {describe_device(device)}")
    return device


def _cpu_model() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine() or "unknown CPU"


def cpu_cores() -> int:
    if hasattr(os, "sched_getaffinity"):  # cores this process may use (container limits included)
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def describe_device(device: str | torch.device) -> str:
    """One human-readable line, e.g. '<GPU name> (CUDA <version>)' or 'CPU: <model>, 2 cores'."""
    device = torch.device(device)
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        if torch.version.hip is not None:
            return f"{name} (ROCm {torch.version.hip})"
        return f"{name} (CUDA {torch.version.cuda})"
    if device.type == "mps":
        return "Apple MPS"
    if device.type == "cpu":
        return f"CPU: {_cpu_model()}, {cpu_cores()} cores"
    return str(device)


def format_bytes(n: int) -> str:
    """Bytes as B/KiB/MiB/GiB with one decimal (two for GiB), for memory tables in the book."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= scale:
            return f"{n / scale:.{2 if unit == 'GiB' else 1}f} {unit}"
    return f"{n} B"


@dataclass
class MemoryReport:
    """Memory in bytes: GPU allocator figures (None on CPU) and the process's resident set size."""

    device: str
    allocated: int | None = None
    reserved: int | None = None
    peak: int | None = None
    rss: int | None = None

    def __str__(self) -> str:
        parts = [
            f"{label} {format_bytes(value)}"
            for label, value in (
                ("allocated", self.allocated),
                ("reserved", self.reserved),
                ("peak", self.peak),
                ("process RSS", self.rss),
            )
            if value is not None
        ]
        return f"{self.device}: {', '.join(parts)}"


def memory_report(device: str | torch.device | None = None) -> MemoryReport:
    """Snapshot of memory use on ``device`` (default: detect_device()) plus host RSS."""
    device = detect_device(verbose=False) if device is None else torch.device(device)
    report = MemoryReport(device=str(device), rss=psutil.Process().memory_info().rss)
    if device.type == "cuda":
        report.allocated = torch.cuda.memory_allocated(device)
        report.reserved = torch.cuda.memory_reserved(device)
        report.peak = torch.cuda.max_memory_allocated(device)
    elif device.type == "mps":
        report.allocated = torch.mps.current_allocated_memory()
        report.reserved = torch.mps.driver_allocated_memory()
    return report


def reset_peak_memory(device: str | torch.device) -> None:
    """Start a fresh peak measurement (CUDA/ROCm only; other backends keep no peak)."""
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def free_cached_memory(device: str | torch.device) -> None:
    """Drop unreachable objects and return the allocator's cached blocks to the driver."""
    device = torch.device(device)
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    elif device.type == "mps":
        torch.mps.empty_cache()


def synchronize(device: str | torch.device) -> None:
    """Wait for the device's queued work, so a clock read afterwards covers it (no-op on CPU)."""
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()
