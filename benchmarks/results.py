"""RESULTS.md: one section per device kind, one marked block per benchmark.

A run rewrites only the blocks it measured, so a GPU run adds or replaces the GPU section and
leaves the CPU section (and benchmarks skipped with ``--only``) as they were.
"""

from __future__ import annotations

import datetime
import re
from pathlib import Path

import torch

from benchmarks.common import Context, Table
from cfbook.atomic import atomic_write_text
from cfbook.device import describe_device

SECTIONS = {"cpu": "CPU", "cuda": "GPU (CUDA / ROCm)", "mps": "Apple MPS"}
# What a section without blocks says; a kind without placeholder is left out until it has a run.
PLACEHOLDERS = {
    "cpu": "No run on this kind of device yet.",
    "cuda": "No GPU run yet: run `python -m benchmarks.run` on a machine with a CUDA GPU to add "
    "this section (CPU vs GPU speed-ups included).",
}
BLOCK = re.compile(r"<!-- begin (\S+) -->\n(.*?)<!-- end \1 -->\n", re.DOTALL)
HEADER = """# cfbook benchmarks

Written by `python -m benchmarks.run` (see `benchmarks/README.md`); do not edit by hand. Each run
replaces the blocks it measured and keeps the others, so a GPU run adds its section beside the CPU
one. Times are medians of interleaved repeats after a warm-up; ratios compare cases measured side
by side in the same run.
"""


def machine(ctx: Context) -> str:
    """CPU model and cores, the GPU if the run used one, torch version and thread count."""
    parts = [describe_device("cpu")]
    if ctx.device.type != "cpu":
        parts.append(f"GPU: {describe_device(ctx.device)}")
    parts.append(f"torch {torch.__version__} ({torch.get_num_threads()} CPU threads)")
    return "; ".join(parts)


def render_block(ctx: Context, title: str, tables: list[Table], seconds: float) -> str:
    """A benchmark's block: title, provenance line, tables."""
    when = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    kind = "quick run (small sizes, not for quoting)" if ctx.quick else "full run"
    if ctx.note:
        kind += f"; {ctx.note}"
    head = f"### {title}\n\n_{when}, {machine(ctx)}; {kind}, {seconds:.0f} s._\n\n"
    return head + "\n".join(t.markdown() for t in tables)


def _parse(text: str) -> dict[str, str]:
    return {key: body for key, body in BLOCK.findall(text)}


def _render(blocks: dict[str, str], order: list[str]) -> str:
    out = [HEADER]
    rank = {name: i for i, name in enumerate(order)}
    for section, heading in SECTIONS.items():
        keys = [k for k in blocks if k.startswith(f"{section}/")]
        if not keys and section not in PLACEHOLDERS:
            continue
        out.append(f"\n## {heading}\n")
        if not keys:
            out.append(f"\n{PLACEHOLDERS[section]}\n")
        for key in sorted(keys, key=lambda k: rank.get(k.split("/", 1)[1], len(rank))):
            out.append(f"\n<!-- begin {key} -->\n{blocks[key]}<!-- end {key} -->\n")
    return "".join(out)


def write_block(path: Path, ctx: Context, name: str, body: str, order: list[str]) -> None:
    """Insert or replace block ``<device>/<name>`` in the results file, atomically."""
    blocks = _parse(path.read_text(encoding="utf-8")) if path.is_file() else {}
    blocks[f"{ctx.device.type}/{name}"] = body if body.endswith("\n") else body + "\n"
    atomic_write_text(path, _render(blocks, order))
