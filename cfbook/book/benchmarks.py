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
import re
from collections.abc import Collection, Iterable
from pathlib import Path
from typing import Any

__all__ = [
    "FORMAT",
    "RESULTS_JSON",
    "benchmark_record",
    "benchmark_reports",
    "benchmark_rows",
    "benchmark_summary",
    "benchmark_table",
    "block_markdown",
    "chunk_speed_text",
    "load_results",
    "provenance_line",
    "run_label",
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


SHOWN_NOTE = "The notes of this benchmark's report above apply here too."


def table_markdown(table: dict[str, Any], shown: Collection[str] = ()) -> str:
    """A recorded table: its title as a level-4 heading, the cells' texts, then its notes, but
    for those in ``shown`` (a reader has them already), which one line replaces."""
    lines = [f"#### {table['title']}", ""]
    lines.append("| " + " | ".join(table["columns"]) + " |")
    lines.append("|" + "|".join(" --- " for _ in table["columns"]) + "|")
    lines += ["| " + " | ".join(cell["text"] for cell in row) + " |" for row in table["rows"]]
    notes = [note for note in table["notes"] if note not in shown]
    if len(notes) < len(table["notes"]):
        notes.append(SHOWN_NOTE)
    if notes:
        lines.append("")
        lines += [f"- {note}" for note in notes]
    return "\n".join(lines) + "\n"


def block_markdown(record: dict[str, Any], shown: Collection[str] = ()) -> str:
    """A recorded block as ``RESULTS.md`` shows it: title, provenance line, tables (notes in
    ``shown`` left out, as :func:`table_markdown` does)."""
    head = f"### {record['title']}\n\n{provenance_line(record['provenance'])}\n\n"
    return head + "\n".join(table_markdown(t, shown) for t in record["tables"])


def _number(title: str) -> float:
    """A block's place in ``RESULTS.md``: the number its title starts with; unnumbered last."""
    match = re.match(r"(\d+)\.", title)
    return float(match.group(1)) if match else float("inf")


def benchmark_reports(
    names: Iterable[str],
    kind: str,
    *,
    shown: Collection[str] = (),
    results: str | Path | None = None,
) -> tuple[str, list[str]]:
    """The recorded blocks ``names`` of one device kind in ``RESULTS.md``'s order, as Markdown
    (empty when none was recorded), and the notes their tables gave. Notes in ``shown`` are
    left out, so that a second device's reports do not repeat the first's."""
    blocks = load_results(results)
    records = [blocks[f"{kind}/{name}"] for name in names if f"{kind}/{name}" in blocks]
    records.sort(key=lambda record: _number(record["title"]))
    notes = [note for record in records for table in record["tables"] for note in table["notes"]]
    text = "\n".join(block_markdown(record, shown) for record in records)
    return text, notes


def run_label(provenance: dict[str, Any]) -> str:
    """The device and the date of a recorded run, short enough for a table's first column:
    ``NVIDIA H200, YYYY-MM-DD`` for a GPU run, ``2-core CPU, YYYY-MM-DD`` for a CPU one."""
    machine = provenance["machine"]
    gpu = re.search(r"GPU: ([^;(]+)", machine)
    cores = re.search(r"(\d+) cores", machine)
    if gpu:
        device = gpu.group(1).strip()
    elif cores:
        device = f"{cores.group(1)}-core CPU"
    else:
        device = machine.split(";")[0]
    return f"{device}, {provenance['when'][:10]}"


def benchmark_rows(
    name: str,
    columns: list[str],
    *,
    kinds: tuple[str, ...] = ("cpu", "cuda"),
    table: int = 0,
    where: dict[str, str] | None = None,
    results: str | Path | None = None,
) -> str | None:
    """A small table from recorded runs of one benchmark: the ``columns`` of its ``table``-th
    table, a row per recorded row of each device kind, a first column naming the run (device
    and date; :func:`run_label`). ``where`` keeps the rows whose columns have those texts. With
    a single run, the recorded table's title and the run head the table instead of a column.
    None when no kind has a matching row."""
    rows, titles = [], []
    for kind in kinds:
        record = benchmark_record(name, kind, results=results)
        if record is None or len(record["tables"]) <= table:
            continue
        recorded = record["tables"][table]
        label = run_label(record["provenance"])
        titles.append(f"_{recorded['title']}; {label}._")
        for row in recorded["rows"]:
            texts = {c: cell["text"] for c, cell in zip(recorded["columns"], row, strict=True)}
            if all(texts.get(c) == v for c, v in (where or {}).items()):
                rows.append([label, *(texts[c] for c in columns)])
    if not rows:
        return None
    if len(titles) == 1:
        head = [titles[0], "", "| " + " | ".join(columns) + " |"]
        return "\n".join(
            [*head, "|" + "|".join(["---"] * len(columns)) + "|"]
            + ["| " + " | ".join(row[1:]) + " |" for row in rows]
        )
    lines = [
        "| " + " | ".join(["run", *columns]) + " |",
        "|" + "|".join(["---"] * (len(columns) + 1)) + "|",
    ]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


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


def chunk_speed_text(
    model: str = "resnet18", kind: str = "cuda", *, results: str | Path | None = None
) -> str:
    """What searching more rows at once buys, from the throughput benchmark's rows for ``model``
    on ``kind``: counterfactuals per second at the smallest and the largest batch recorded, and
    the time of the largest batch's counterfactuals in chunks of the smallest against one."""
    record = benchmark_record("throughput", kind, results=results)
    rows = sorted(
        (int(r["nce"]), float(r["Native cf/s"]))
        for r in benchmark_table("throughput", kind, results=results) or []
        if r["model"] == model
    )
    if record is None or len(rows) < 2:
        return f"The search's speed against its batch size is not yet measured on {kind}."
    (small, small_rate), (large, large_rate) = rows[0], rows[-1]
    chunks = large // small
    steps = re.search(r"maxiter (\d+)", record["tables"][0]["title"])
    return (
        f"On {run_label(record['provenance'])}, a {model} search of up to "
        f"{steps.group(1) if steps else 'the default'} steps ran at "
        f"{small_rate:,.0f} counterfactuals per second with {small:,} rows at once and "
        f"{large_rate:,.0f} with {large:,}: {large:,} counterfactuals take about "
        f"{chunks * small / small_rate:.2f} s in {chunks} chunks of {small} and "
        f"{large / large_rate:.2f} s in one."
    )
