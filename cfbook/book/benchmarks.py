"""Recorded benchmarks for the chapters: ``benchmarks/results.json``, as numbers and as Markdown.

``python -m benchmarks.run`` records each benchmark as a block of that file, keyed by
``<device kind>/<name>`` (``cpu/throughput``)::

    {"format": 1, "blocks": {"cpu/throughput": {
        "title": "1. Generator throughput: ...",
        "provenance": {"when": "<date> <time> UTC", "machine": "CPU: ...; torch ...",
                       "quick": false, "note": "shared machine", "seconds": 260},
        "tables": [{"title": "...", "columns": ["model", "nce", ...],
                    "rows": [[{"text": "mlp", "value": "mlp"}, {"text": "128", "value": 128},
                              {"text": "23.4 ms", "value": 0.0234, "unit": "s"}, ...]],
                    "notes": ["..."]}]}}}

A cell keeps its display text and the number it was made from (``value``; the text itself where
it is no number), in base units: ``s`` (seconds), ``B`` (bytes), ``x`` (a ratio) or ``%``.
``benchmarks/RESULTS.md`` is rendered from it with :func:`block_markdown`; this module reads
the file and renders blocks, it imports nothing of the ``benchmarks`` package.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = [
    "FORMAT",
    "RESULTS_JSON",
    "benchmark_record",
    "benchmark_summary",
    "benchmark_table",
    "block_markdown",
    "load_results",
    "provenance_line",
    "stored_benchmark",
    "table_markdown",
]

FORMAT = 1
RESULTS_JSON = Path(__file__).resolve().parents[2] / "benchmarks" / "results.json"
QUICK_RUN = "quick run (small sizes, not for quoting)"


def load_results(results: str | Path | None = None) -> dict[str, dict[str, Any]]:
    """Every recorded block of ``results`` (default: ``benchmarks/results.json``) by key
    ``<device kind>/<name>``; empty when the file does not exist."""
    path = Path(results) if results is not None else RESULTS_JSON
    if not path.is_file():
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"{path}: not a benchmark results file of format {FORMAT}")
    return data["blocks"]


def benchmark_record(
    name: str, kind: str = "cpu", *, results: str | Path | None = None
) -> dict[str, Any] | None:
    """Block ``name`` for a device kind (cpu, cuda, mps) as recorded, or None if never measured."""
    return load_results(results).get(f"{kind}/{name}")


def provenance_line(provenance: dict[str, Any]) -> str:
    """When, on what, how (full or quick run, the run's note) and how long a block was measured."""
    how = QUICK_RUN if provenance["quick"] else "full run"
    if provenance.get("note"):
        how += f"; {provenance['note']}"
    return f"_{provenance['when']}, {provenance['machine']}; {how}, {provenance['seconds']:.0f} s._"


def table_markdown(table: dict[str, Any]) -> str:
    """A recorded table: its title as a level-4 heading, the cells' texts, then its notes."""
    lines = [f"#### {table['title']}", ""]
    lines.append("| " + " | ".join(table["columns"]) + " |")
    lines.append("|" + "|".join(" --- " for _ in table["columns"]) + "|")
    lines += ["| " + " | ".join(cell["text"] for cell in row) + " |" for row in table["rows"]]
    if table["notes"]:
        lines.append("")
        lines += [f"- {note}" for note in table["notes"]]
    return "\n".join(lines) + "\n"


def block_markdown(record: dict[str, Any]) -> str:
    """A recorded block as ``RESULTS.md`` shows it: title, provenance line, tables."""
    head = f"### {record['title']}\n\n{provenance_line(record['provenance'])}\n\n"
    return head + "\n".join(table_markdown(t) for t in record["tables"])


def stored_benchmark(
    name: str, kind: str = "cpu", *, results: str | Path | None = None
) -> str | None:
    """Block ``name`` for a device kind (cpu, cuda) in Markdown, as ``RESULTS.md`` shows it;
    None if it was never measured."""
    record = benchmark_record(name, kind, results=results)
    return None if record is None else block_markdown(record).strip()


def benchmark_table(
    name: str, kind: str = "cpu", *, text: bool = False, results: str | Path | None = None
) -> list[dict[str, Any]] | None:
    """The first table of a recorded benchmark, one dict per row keyed by its columns: each
    cell's value (an int or float in the units of the module docstring, or the cell's text
    where it is no number), or with ``text=True`` its display text. None if the benchmark was
    never recorded."""
    record = benchmark_record(name, kind, results=results)
    if record is None or not record["tables"]:
        return None
    table = record["tables"][0]
    key = "text" if text else "value"
    return [
        {column: cell[key] for column, cell in zip(table["columns"], row, strict=True)}
        for row in table["rows"]
    ]


def _plain(markdown: str) -> str:
    """Headings turned into bold lines, so that they stay out of the page's table of contents."""
    return "\n".join(
        f"**{line.lstrip('#').strip()}**" if line.startswith("#") else line
        for line in markdown.splitlines()
    )


def benchmark_summary(
    name: str, kind: str = "cpu", *, results: str | Path | None = None
) -> str | None:
    """A recorded benchmark for a chapter: its targets table, then the whole block folded away
    in a ``<details>`` element, headings turned into bold lines. None if it was never recorded."""
    record = benchmark_record(name, kind, results=results)
    if record is None:
        return None
    tables = record["tables"]
    first = next((i for i, t in enumerate(tables) if t["title"] == "Targets"), len(tables))
    targets = _plain("\n".join(table_markdown(t) for t in tables[first:]).strip())
    plain = _plain(block_markdown(record).strip())
    return (
        f"{targets}\n\n<details><summary>All of benchmark {name}</summary>\n\n{plain}\n\n</details>"
    )
