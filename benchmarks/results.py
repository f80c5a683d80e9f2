"""results.json: every recorded block, by ``<device kind>/<name>``; RESULTS.md is rendered from it.

A run rewrites only the blocks it measured, so a GPU run adds or replaces the GPU section and
leaves the CPU section (and benchmarks skipped with ``--only``) as they were. The file's format
and the rendering of a block are ``cfbook.book.benchmarks``'s, which the book reads.
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

import torch

from benchmarks.common import Context, Table
from cfbook.atomic import atomic_write_text
from cfbook.book.benchmarks import FORMAT, block_markdown, load_results
from cfbook.device import describe_device

SECTIONS = {"cpu": "CPU", "cuda": "GPU (CUDA / ROCm)", "mps": "Apple MPS"}
# What a section without blocks says; a kind without placeholder is left out until it has a run.
PLACEHOLDERS = {
    "cpu": "No run on this kind of device yet.",
    "cuda": "No GPU run yet: run `python -m benchmarks.run` on a machine with a CUDA GPU to add "
    "this section (CPU vs GPU speed-ups included).",
}
HEADER = """# cfbook benchmarks

Rendered from `results.json`, which `python -m benchmarks.run` writes (see `benchmarks/README.md`);
do not edit either by hand. Each run replaces the blocks it measured and keeps the others, so a GPU
run adds its section beside the CPU one. Times are medians of interleaved repeats after a warm-up;
ratios compare cases measured side by side in the same run.
"""
MARKDOWN = "RESULTS.md"


def machine(ctx: Context) -> str:
    """CPU model and cores, the GPU if the run used one, torch version and thread count."""
    parts = [describe_device("cpu")]
    if ctx.device.type != "cpu":
        parts.append(f"GPU: {describe_device(ctx.device)}")
    parts.append(f"torch {torch.__version__} ({torch.get_num_threads()} CPU threads)")
    return "; ".join(parts)


def record_block(ctx: Context, title: str, tables: list[Table], seconds: float) -> dict[str, Any]:
    """A benchmark's block as results.json keeps it: title, provenance, tables."""
    when = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    provenance = {
        "when": when,
        "machine": machine(ctx),
        "quick": ctx.quick,
        "note": ctx.note,
        "seconds": round(seconds, 1),
    }
    return {"title": title, "provenance": provenance, "tables": [t.record() for t in tables]}


def _ordered(blocks: dict[str, dict], order: list[str]) -> list[str]:
    """The keys by section, then in the order of the benchmarks (unknown names last)."""
    rank = {name: i for i, name in enumerate(order)}
    sections = {kind: i for i, kind in enumerate(SECTIONS)}
    return sorted(
        blocks,
        key=lambda k: (
            sections.get(k.split("/", 1)[0], len(sections)),
            rank.get(k.split("/", 1)[1], len(rank)),
        ),
    )


def render_markdown(blocks: dict[str, dict], order: list[str]) -> str:
    """RESULTS.md: the header, then one section per device kind with its blocks."""
    out = [HEADER]
    keys = _ordered(blocks, order)
    for section, heading in SECTIONS.items():
        mine = [k for k in keys if k.startswith(f"{section}/")]
        if not mine and section not in PLACEHOLDERS:
            continue
        out.append(f"\n## {heading}\n")
        if not mine:
            out.append(f"\n{PLACEHOLDERS[section]}\n")
        for key in mine:
            out.append(f"\n<!-- begin {key} -->\n{block_markdown(blocks[key])}<!-- end {key} -->\n")
    return "".join(out)


def _flat(obj: object) -> bool:
    """A scalar, or a list or dict of scalars (a table cell, a row of cells counts too)."""
    if isinstance(obj, dict):
        return all(not isinstance(v, (dict, list)) for v in obj.values())
    if isinstance(obj, list):
        return all(_flat(v) and not isinstance(v, list) for v in obj)
    return True


def _dumps(obj: object, depth: int = 0) -> str:
    """JSON with one line per table row, column list and note: readable, and diffs stay short."""
    inner = " " * (depth + 1)
    if isinstance(obj, dict) and obj and not (_flat(obj) and depth > 2):
        items = [f"{inner}{json.dumps(k)}: {_dumps(v, depth + 1)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + " " * depth + "}"
    short = len(json.dumps(obj, ensure_ascii=False)) <= 100
    if isinstance(obj, list) and obj and not (_flat(obj) and (short or isinstance(obj[0], dict))):
        items = [f"{inner}{_dumps(v, depth + 1)}" for v in obj]
        return "[\n" + ",\n".join(items) + "\n" + " " * depth + "]"
    return json.dumps(obj, ensure_ascii=False)


def write_results(path: Path, blocks: dict[str, dict], order: list[str]) -> None:
    """Write results.json at ``path`` and RESULTS.md beside it from ``blocks``, each atomically."""
    ordered = {key: blocks[key] for key in _ordered(blocks, order)}
    text = _dumps({"format": FORMAT, "blocks": ordered})
    atomic_write_text(path, text + "\n")
    atomic_write_text(path.with_name(MARKDOWN), render_markdown(ordered, order))


def write_block(path: Path, kind: str, name: str, record: dict[str, Any], order: list[str]) -> None:
    """Insert or replace block ``<kind>/<name>`` in results.json at ``path`` and render
    RESULTS.md beside it again; the other blocks stay as they were."""
    blocks = load_results(path)
    blocks[f"{kind}/{name}"] = record
    write_results(path, blocks, order)
