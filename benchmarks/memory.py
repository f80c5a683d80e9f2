"""Benchmark 4: peak memory of the search as cf_batchsize and nce grow.

Chunking (``cf_batchsize``) bounds the rows whose activations are alive at once, so the peak
should grow with cf_batchsize and only by the stored results (two nce x 784 tensors) with nce.
On a GPU the allocator's peak is read directly; on a CPU each point runs in a fresh subprocess
whose resident set is sampled during the search (plus its ru_maxrss), so earlier allocations and
the allocator's caches of other points cannot hide or inflate a peak.
"""

from __future__ import annotations

import gc
import json
import os
import resource
import subprocess
import sys
import threading
from pathlib import Path

import psutil
import torch

from benchmarks.common import Context, Table, check, fmt_bytes
from benchmarks.fixtures import DOMAIN, fresh_model
from cfbook.device import format_bytes, free_cached_memory, reset_peak_memory, synchronize
from cfbook.models import N_FEATURES
from cfbook.search.generators import NativeGenerator

TITLE = "4. Memory: peak of the search vs cf_batchsize and nce"
MAXITER = 2  # the peak is reached in the first iteration; more would only cost time
ROOT = Path(__file__).resolve().parents[1]


def _inputs(nce: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    x = torch.rand(nce, N_FEATURES, generator=generator) * 2 - 1
    return x.to(device), torch.randint(0, 10, (nce,), generator=generator).to(device)


def _maxrss() -> int:
    scale = 1 if sys.platform == "darwin" else 1024  # bytes on macOS, KiB on Linux
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


def child(spec: dict) -> dict:
    """In a fresh process: peak resident memory of one search above the state before it."""
    device = torch.device("cpu")
    model = fresh_model(spec["model"], device).eval()
    x, target = _inputs(spec["nce"], device)
    generator = NativeGenerator(maxiter=MAXITER, cf_batchsize=spec["chunk"])
    generator.generate(model, x[:2], target[:2], domain=DOMAIN)  # lazy initialisation
    gc.collect()
    process = psutil.Process()
    base = process.memory_info().rss
    before = _maxrss()
    peak, stop = [base], threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], process.memory_info().rss)
            stop.wait(0.0005)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    generator.generate(model, x, target, domain=DOMAIN)
    stop.set()
    sampler.join()
    after = _maxrss()
    top = max(peak[0], after if after > before else 0)
    return {"peak": top - base}


def _cpu_peak(model_name: str, nce: int, chunk: int) -> int:
    spec = json.dumps({"model": model_name, "nce": nce, "chunk": chunk})
    paths = [str(ROOT), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.memory", spec],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode:
        raise RuntimeError(f"memory child {spec} failed:\n{out.stderr[-2000:]}")
    return int(json.loads(out.stdout.strip().splitlines()[-1])["peak"])


def _gpu_peak(model_name: str, nce: int, chunk: int, device: torch.device) -> int:
    model = fresh_model(model_name, device).eval()
    x, target = _inputs(nce, device)
    generator = NativeGenerator(maxiter=MAXITER, cf_batchsize=chunk)
    generator.generate(model, x[:2], target[:2], domain=DOMAIN)
    synchronize(device)
    free_cached_memory(device)
    reset_peak_memory(device)
    base = torch.cuda.memory_allocated(device)
    result = generator.generate(model, x, target, domain=DOMAIN)
    synchronize(device)
    peak = torch.cuda.max_memory_allocated(device) - base
    del result
    return peak


def peak_bytes(ctx: Context, model_name: str, nce: int, chunk: int) -> int:
    """Peak bytes the search adds on the run's device (results included)."""
    if ctx.device.type == "cuda":
        return _gpu_peak(model_name, nce, chunk, ctx.device)
    return _cpu_peak(model_name, nce, chunk)


def _slope(points: list[tuple[int, int]]) -> float:
    """Bytes per extra row between the smallest and the largest point."""
    (r0, b0), (r1, b1) = points[0], points[-1]
    return (b1 - b0) / (r1 - r0)


def run(ctx: Context) -> list[Table]:
    if ctx.device.type not in ("cpu", "cuda"):
        return [
            Table(
                f"No peak-memory reading on {ctx.device.type}",
                ["note"],
                [["torch exposes an allocator peak on CUDA only; run with --device cpu"]],
            )
        ]
    sizes = ctx.sizes
    name = sizes.memory_model
    how = (
        "torch.cuda.max_memory_allocated above the allocated memory before the search"
        if ctx.device.type == "cuda"
        else "peak RSS of a fresh subprocess above its RSS before the search (sampled + ru_maxrss)"
    )
    table = Table(
        f"Peak memory of NativeGenerator.generate ({name}, untrained, maxiter {MAXITER}; {how})",
        ["sweep", "nce", "cf_batchsize", "search peak", f"results (2 x nce x {N_FEATURES} x 4 B)"],
    )
    points = {("nce", n): (n, sizes.memory_chunk) for n in sizes.memory_nce}
    points |= {("chunk", c): (sizes.memory_nce_fixed, c) for c in sizes.memory_chunks}
    measured: dict[tuple[int, int], int] = {}
    for nce, chunk in dict.fromkeys(points.values()):
        measured[(nce, chunk)] = peak_bytes(ctx, name, nce, chunk)
        ctx.log(
            f"memory {name} nce={nce} cf_batchsize={chunk}: {format_bytes(measured[(nce, chunk)])}"
        )
    by_nce, by_chunk = [], []
    for (sweep, _), (nce, chunk) in points.items():
        peak = measured[(nce, chunk)]
        (by_nce if sweep == "nce" else by_chunk).append((nce if sweep == "nce" else chunk, peak))
        table.add(
            f"{sweep} grows", nce, chunk, fmt_bytes(peak), fmt_bytes(2 * nce * N_FEATURES * 4)
        )
    per_nce, per_chunk = _slope(by_nce), _slope(by_chunk)
    table.notes.append(
        f"Growth per extra row: {format_bytes(int(per_nce))} per factual (nce) vs "
        f"{format_bytes(int(per_chunk))} per row of cf_batchsize; the stored results alone "
        f"take {format_bytes(2 * N_FEATURES * 4)} per factual."
    )
    targets = Table("Targets", ["target", "measured", "status"])
    targets.add(
        "peak grows with cf_batchsize, not with nce (per-row growth from nce < 1/4 of that "
        "from cf_batchsize)",
        f"{per_nce / per_chunk:.2f}" if per_chunk > 0 else "n/a",
        check(per_chunk > 0 and per_nce < per_chunk / 4),
    )
    return [table, targets]


if __name__ == "__main__":
    print(json.dumps(child(json.loads(sys.argv[1]))))
