"""The GPU chapters' demonstrations, run here and recorded once on a CUDA GPU.

Each demonstration takes a device and prints what it finds. The chapters run it on the machine
that builds the book; ``python -m cfbook.book.gpu_record`` (a step of scripts/gpu-check.sh) runs
the same functions on a CUDA GPU and writes what they printed to ``data/gpu/record.json``,
together with the seconds per CT epoch of the ``tutorial`` profile at two ``cf_batchsize``
values (``cf_batchsize_epochs``). ``show_demo`` displays a demonstration's code, this
machine's output and the recorded GPU output, or says that there is none yet.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import json
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch
from torch import nn

from cfbook.atomic import atomic_write_text
from cfbook.book.benchmarks import benchmark_record, benchmark_table, run_label
from cfbook.book.profiles import get_profile
from cfbook.data import load_mnist
from cfbook.device import (
    describe_device,
    detect_device,
    free_cached_memory,
    memory_report,
    reset_peak_memory,
    synchronize,
)
from cfbook.errors import SetupError
from cfbook.models import IMAGE_SHAPE, build_model
from cfbook.search.generators import NativeGenerator
from cfbook.training import counterfactual_training

__all__ = [
    "DEMOS",
    "RECORD",
    "allocator_table",
    "compiled_update",
    "ct_epoch_seconds",
    "find_device",
    "load_record",
    "mixed_precision_step",
    "pinned_copy",
    "record",
    "recorded_output",
    "recorded_table",
    "run_demo",
    "search_memory",
    "show_demo",
    "timed_product",
]

FORMAT = 1
RECORD = Path(__file__).resolve().parents[2] / "data" / "gpu" / "record.json"
Demo = Callable[[torch.device], None]


def find_device(device: torch.device) -> None:
    """What this PyTorch build can see, and the device ``detect_device`` picks."""
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    print("torch build    ", torch.__version__)
    print("CUDA runtime   ", torch.version.cuda)
    print("ROCm (HIP)     ", torch.version.hip)
    print("CUDA/ROCm GPU  ", torch.cuda.is_available(), f"({gpus} visible)")
    print("Apple MPS      ", torch.backends.mps.is_available())
    detect_device()  # prints what it chose and why


def search_memory(device: torch.device) -> None:
    """Memory before, during and after one counterfactual search of an untrained ResNet-18."""
    torch.manual_seed(0)
    model = build_model("resnet18").to(device).eval()
    x = torch.rand(512, *IMAGE_SHAPE, device=device) * 2 - 1
    target = torch.randint(0, 10, (512,), device=device)
    search = NativeGenerator(maxiter=3, cf_batchsize=128)
    free_cached_memory(device)
    reset_peak_memory(device)
    print("model, 512 rows", memory_report(device))
    result = search.generate(model, x, target, domain=(-1.0, 1.0))
    synchronize(device)
    print("after search   ", memory_report(device))
    del result
    print("result deleted ", memory_report(device))
    free_cached_memory(device)  # gc.collect(), then empty_cache() on a GPU
    print("cache emptied  ", memory_report(device))


def pinned_copy(device: torch.device) -> None:
    """A host batch, pinned where CUDA can pin it, copied to the device without blocking."""
    batch = torch.randn(256, 784)
    if device.type == "cuda":
        batch = batch.pin_memory()  # page-locked: the copy can overlap the host's work
    moved = batch.to(device, non_blocking=True)
    synchronize(device)  # before the host reads anything the copy wrote
    print(f"pinned: {batch.is_pinned()}, now on {moved.device}, same tensor: {moved is batch}")


def timed_product(device: torch.device) -> None:
    """When a matrix product's call returns, and when the device has finished it."""
    a = torch.randn(2048, 2048, device=device)
    b = torch.randn(2048, 2048, device=device)
    a @ b  # warm-up: the first product pays one-off set-up costs
    synchronize(device)  # torch.cuda.synchronize() on CUDA, nothing on the CPU
    start = time.perf_counter()
    c = a @ b
    returned = time.perf_counter() - start
    synchronize(device)
    finished = time.perf_counter() - start
    print(f"call returned after {1e3 * returned:.2f} ms, finished after {1e3 * finished:.2f} ms")
    del c


def allocator_table(device: torch.device) -> None:
    """The allocator after a 32 MiB tensor is deleted, and after its cache is emptied."""
    block = torch.ones(32 * 2**20, dtype=torch.uint8, device=device)
    del block
    print("after del:        ", memory_report(device))
    if device.type == "cuda":
        print(torch.cuda.memory_summary(device, abbreviated=True))
    else:
        print("(torch.cuda.memory_summary() needs a CUDA GPU)")
    free_cached_memory(device)
    print("after empty_cache:", memory_report(device))


def mixed_precision_step(device: torch.device) -> None:
    """One training step under autocast, float16 with a GradScaler on CUDA, bfloat16 elsewhere."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 2)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    half = torch.float16 if device.type == "cuda" else torch.bfloat16
    scaler = torch.amp.GradScaler(device.type)
    xb = torch.randn(64, 8, device=device)
    yb = (xb[:, 0] > 0).long()
    with torch.autocast(device.type, dtype=half):
        logits = model(xb)
    loss = nn.functional.cross_entropy(logits.float(), yb)
    scaler.scale(loss).backward()
    scaler.unscale_(opt)  # true gradients, so that max_norm means what it says
    norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
    scaler.step(opt)  # skipped if unscale_ found inf or NaN gradients
    scaler.update()
    print(f"logits {logits.dtype}, loss {loss.item():.3f}, gradient norm {norm.item():.3f}")


def compiled_update(device: torch.device) -> None:
    """A clamped gradient step, compiled: the first call compiles, later calls reuse the code."""

    def step(x: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
        return (x - 0.1 * grad).clamp(0.0, 1.0)

    x = torch.rand(512, 784, device=device)
    grad = torch.randn(512, 784, device=device)
    compiled = torch.compile(step)
    for call in ("first call (compiles)", "second call"):
        start = time.perf_counter()
        out = compiled(x, grad)
        synchronize(device)
        print(f"{call}: {time.perf_counter() - start:.3f} s")
    print("same result as eager:", torch.allclose(out, step(x, grad)))


DEMOS: tuple[Demo, ...] = (
    find_device,
    search_memory,
    pinned_copy,
    timed_product,
    allocator_table,
    mixed_precision_step,
    compiled_update,
)


def run_demo(demo: Demo, device: torch.device) -> str:
    """What ``demo`` prints on ``device``."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        demo(torch.device(device))
    return out.getvalue()


def load_record(path: str | Path | None = None) -> dict[str, Any] | None:
    """The recorded GPU run (default ``data/gpu/record.json``), or None if there is none."""
    path = Path(path) if path is not None else RECORD
    if not path.is_file():
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    if data.get("format") != FORMAT:
        raise ValueError(f"{path}: not a GPU record of format {FORMAT}")
    return data


def recorded_output(name: str, path: str | Path | None = None) -> str:
    """The recorded GPU output of demo ``name`` under a line naming the device and date, or
    a line saying it was not yet measured on a GPU."""
    data = load_record(path)
    text = None if data is None else data["outputs"].get(name)
    if text is None:
        return "Not yet measured on a GPU (bash scripts/gpu-check.sh records it).\n"
    return f"Recorded on {data['device']}, {data['when']}:\n{text}"


def recorded_table(
    name: str,
    columns: Sequence[str],
    keep: Callable[[dict[str, Any]], bool] | None = None,
    kind: str = "cuda",
) -> str:
    """Markdown: ``columns`` of benchmark ``name``'s first table as recorded on ``kind`` (the
    rows where ``keep`` holds), under a line naming the device and date."""
    record = benchmark_record(name, kind)
    if record is None:
        return f"Benchmark {name}: not yet measured on a GPU.\n"
    rows = [r for r in benchmark_table(name, kind, text=True) if keep is None or keep(r)]
    lines = [
        f"Recorded on {run_label(record['provenance'])} (benchmark {record['title']}):",
        "",
        "| " + " | ".join(columns) + " |",
        "|" + "|".join(" --- " for _ in columns) + "|",
        *("| " + " | ".join(r[c] for c in columns) + " |" for r in rows),
    ]
    return "\n".join(lines) + "\n"


def show_demo(demo: Demo, device: torch.device, path: str | Path | None = None) -> None:
    """Display ``demo``'s code, its output on ``device`` and its recorded GPU output."""
    from IPython.display import Markdown, display

    display(Markdown(f"```python\n{inspect.getsource(demo)}```"))
    print(f"This machine, {describe_device(device)}:\n{run_demo(demo, device)}")
    print(recorded_output(demo.__name__, path), end="")


def ct_epoch_seconds(
    device: torch.device,
    profile_name: str = "tutorial",
    chunks: Sequence[int] = (128, 1024),
    epochs: int = 3,
) -> dict[str, Any]:
    """Seconds per CT epoch of a profile (its model, data, seed and search) for each
    ``cf_batchsize`` in ``chunks``; every epoch searches, the first one also warms up."""
    profile = get_profile(profile_name)
    data = load_mnist(profile.n, device=device, seed=profile.seed, verbose=False)
    data = data.for_model(profile.model)
    seconds = {}
    for chunk in chunks:
        torch.manual_seed(profile.seed)
        model = build_model(profile.model)
        _, log = counterfactual_training(
            profile.objective("full"),
            model,
            replace(profile, cf_batchsize=chunk).search(),
            data.loader(batch_size=profile.batch_size, shuffle=True, seed=profile.seed),
            torch.optim.Adam(model.parameters(), lr=profile.lr),
            device=device,
            nepochs=epochs,
            domain=data.domain,
            nce=profile.nce,
            accuracy_every=epochs + 1,
            mature=profile.mature,
            verbose=0,
        )
        seconds[str(chunk)] = log.column("time_taken")
    return {
        "profile": profile.name,
        "model": profile.model,
        "nce": profile.nce,
        "maxiter": profile.maxiter,
        "epoch_seconds": seconds,
        "seconds_per_epoch": {k: statistics.median(v[1:] or v) for k, v in seconds.items()},
    }


def record(path: str | Path | None = None, *, epochs: int = 3) -> bool:
    """Run every demo and the ``cf_batchsize`` timing on CUDA and write ``path`` after each
    part, so a run cut short keeps what finished. True if every part ran."""
    if not torch.cuda.is_available():
        raise SetupError("the GPU record needs a CUDA GPU; torch sees none here")
    device = torch.device("cuda")
    path = Path(path) if path is not None else RECORD
    path.parent.mkdir(parents=True, exist_ok=True)
    data: dict[str, Any] = {
        "format": FORMAT,
        "when": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "device": describe_device(device),
        "torch": torch.__version__,
        "outputs": {},
    }
    # The compile, the slowest demo, last: a run out of time loses it before the timing.
    parts: list[tuple[str, Callable[[], Any]]] = [
        *((d.__name__, lambda d=d: run_demo(d, device)) for d in DEMOS if d is not compiled_update),
        ("cf_batchsize_epochs", lambda: ct_epoch_seconds(device, epochs=epochs)),
        (compiled_update.__name__, lambda: run_demo(compiled_update, device)),
    ]
    ok = True
    for name, part in parts:
        try:
            value = part()
        except Exception:  # one failing part must not lose the others
            traceback.print_exc()
            ok = False
            continue
        if name == "cf_batchsize_epochs":
            data[name] = value
        else:
            data["outputs"][name] = value
        atomic_write_text(path, json.dumps(data, indent=1) + "\n")
        print(f"recorded {name}")
    return ok


if __name__ == "__main__":
    sys.exit(0 if record() else 1)
