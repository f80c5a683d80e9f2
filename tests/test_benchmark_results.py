"""Benchmark results as data: a table's cells keep their numbers in ``results.json``, the book
reads them back as numbers, and ``RESULTS.md`` is rendered from the JSON."""

from __future__ import annotations

import json

import pytest
import torch

from benchmarks.cli import BENCHMARKS
from benchmarks.common import Context, Table, fmt, fmt_bytes, fmt_ratio, fmt_seconds, parse_value
from benchmarks.config import QUICK
from benchmarks.results import record_block, render_markdown, write_block
from cfbook.book.benchmarks import (
    RESULTS_JSON,
    benchmark_record,
    benchmark_summary,
    benchmark_table,
    block_markdown,
    load_results,
    stored_benchmark,
)

ORDER = list(BENCHMARKS)


@pytest.mark.parametrize(
    ("text", "value", "unit"),
    [
        ("3,252.4", 3252.4, None),
        ("1024", 1024, None),
        ("-0.24", -0.24, None),
        ("236x", 236.0, "x"),
        ("0.86x", 0.86, "x"),
        ("12.3 MiB", 12.3 * 2**20, "B"),
        ("784.0 KiB", 784.0 * 2**10, "B"),
        ("23.4 ms", 0.0234, "s"),
        ("213 µs", 213e-6, "s"),
        ("9.5 min", 570.0, "s"),
        ("54%", 54.0, "%"),
        ("99.9", 99.9, None),
        ("0.0 / 0.0", "0.0 / 0.0", None),
        ("2.05x faster", "2.05x faster", None),
        ("n/a", "n/a", None),
        ("-", "-", None),
    ],
)
def test_a_cell_text_is_read_as_its_number_in_base_units(text, value, unit):
    parsed, parsed_unit = parse_value(text)
    assert parsed_unit == unit
    assert parsed == (pytest.approx(value) if isinstance(value, float) else value)
    assert type(parsed) is type(value)


def _context(note: str = "") -> Context:
    return Context(torch.device("cpu"), quick=True, sizes=QUICK, note=note)


def _demo_table() -> Table:
    columns = ["model", "nce", "cf/s", "time", "ratio", "peak", "share", "wall", "valid"]
    table = Table("Demo", columns)
    seconds, ratio = fmt_seconds(0.02341), fmt_ratio(236.4)
    table.add("mlp", 128, fmt(3252.44, 1), seconds, ratio, "", "54%", "23.4 ms", "0.0 / 0.0")
    seconds, ratio, peak = fmt_seconds(1.5), fmt_ratio(8.98), fmt_bytes(12 * 2**20)
    table.add("resnet18", 1024, fmt(15.1, 1), seconds, ratio, peak, "100.0%", "9.5 min", "-")
    table.notes.append("A note on how to read it.")
    return table


def test_a_block_is_written_as_numbers_and_read_back_by_the_book(tmp_path):
    path = tmp_path / "results.json"
    targets = Table("Targets", ["target", "measured", "status"], [["ratio >= 50x", "236x", "met"]])
    record = record_block(_context("test"), "1. Demo", [_demo_table(), targets], 12.3)
    write_block(path, "cpu", "throughput", record, ORDER)

    rows = benchmark_table("throughput", "cpu", results=path)
    assert [r["model"] for r in rows] == ["mlp", "resnet18"]
    assert [r["nce"] for r in rows] == [128, 1024]
    first, second = rows
    # The numbers the cells were made from, not their rounded display texts.
    assert first["cf/s"] == 3252.44 and first["time"] == 0.02341 and first["ratio"] == 236.4
    assert second["time"] == 1.5 and second["peak"] == 12 * 2**20 and second["ratio"] == 8.98
    # Plain-text cells that read as a number with a unit are parsed; the rest stay text.
    assert first["share"] == 54.0 and second["share"] == 100.0 and first["peak"] == ""
    assert first["wall"] == pytest.approx(0.0234) and second["wall"] == 570.0
    assert first["valid"] == "0.0 / 0.0" and second["valid"] == "-"
    shown = benchmark_table("throughput", "cpu", text=True, results=path)
    assert shown[0]["time"] == "23.4 ms" and shown[0]["cf/s"] == "3,252.4"
    assert shown[1]["peak"] == "12.0 MiB" and shown[0]["ratio"] == "236x"

    cells = json.loads(path.read_text())["blocks"]["cpu/throughput"]["tables"][0]["rows"][1]
    assert [cell.get("unit") for cell in cells] == [None, None, None, "s", "x", "B", "%", "s", None]

    stored = benchmark_record("throughput", results=path)
    assert stored["provenance"]["quick"] is True and stored["provenance"]["note"] == "test"
    assert stored["provenance"]["seconds"] == 12.3
    markdown = (tmp_path / "RESULTS.md").read_text(encoding="utf-8")
    assert markdown == render_markdown(load_results(path), ORDER)  # rendered from the JSON
    block = stored_benchmark("throughput", results=path)
    assert block.startswith("### 1. Demo\n\n_") and block in markdown
    assert "quick run (small sizes, not for quoting); test, 12 s._" in block
    assert "| resnet18 | 1024 | 15.1 | 1.50 s | 8.98x | 12.0 MiB | 100.0% | 9.5 min | - |" in block
    summary = benchmark_summary("throughput", results=path)
    assert summary.startswith("**Targets**\n\n| target | measured | status |")
    assert benchmark_table("throughput", "cuda", results=path) is None


def test_a_second_block_keeps_the_first_and_a_rerun_replaces_only_its_own(tmp_path):
    path = tmp_path / "results.json"
    first = record_block(_context(), "1. Demo", [_demo_table()], 1.0)
    write_block(path, "cpu", "throughput", first, ORDER)
    memory = Table("Peaks", ["sweep", "search peak"])
    memory.add("chunk grows", fmt_bytes(3 * 2**20))
    write_block(path, "cpu", "memory", record_block(_context(), "4. Memory", [memory], 2.0), ORDER)
    gpu = Table("Speed-ups", ["case", "speed-up"])
    gpu.add("search", fmt_ratio(12.5))
    write_block(path, "cuda", "speedup", record_block(_context(), "5. GPU", [gpu], 3.0), ORDER)

    blocks = load_results(path)
    assert list(blocks) == ["cpu/throughput", "cpu/memory", "cuda/speedup"]
    assert benchmark_table("throughput", results=path)[0]["cf/s"] == 3252.44
    assert benchmark_table("memory", results=path) == [
        {"sweep": "chunk grows", "search peak": 3 * 2**20}
    ]
    assert benchmark_table("speedup", "cuda", results=path) == [
        {"case": "search", "speed-up": 12.5}
    ]

    again = Table("Demo", ["model", "cf/s"])
    again.add("mlp", fmt(10.0, 1))
    write_block(path, "cpu", "throughput", record_block(_context(), "1. Demo", [again], 1.0), ORDER)
    assert benchmark_table("throughput", results=path) == [{"model": "mlp", "cf/s": 10.0}]
    assert benchmark_table("memory", results=path)[0]["search peak"] == 3 * 2**20

    markdown = (tmp_path / "RESULTS.md").read_text(encoding="utf-8")
    assert markdown == render_markdown(load_results(path), ORDER)
    assert markdown.index("## CPU") < markdown.index("### 1. Demo") < markdown.index("### 4. Mem")
    assert markdown.index("## GPU (CUDA / ROCm)") < markdown.index("### 5. GPU")
    for key in blocks:
        assert f"<!-- begin {key} -->" in markdown and f"<!-- end {key} -->" in markdown
    assert "No GPU run yet" not in markdown


def test_the_shipped_results_md_is_rendered_from_results_json():
    blocks = load_results()
    assert "cpu/throughput" in blocks and "cpu/calibration" in blocks
    markdown = RESULTS_JSON.with_name("RESULTS.md").read_text(encoding="utf-8")
    assert markdown == render_markdown(blocks, ORDER)
    assert all(block_markdown(record) in markdown for record in blocks.values())


def test_the_command_line_records_a_block_in_the_json_and_the_markdown(
    tmp_path, monkeypatch, capsys
):
    from benchmarks import cli

    def fake(ctx: Context) -> list[Table]:
        table = Table("Fake", ["case", "time"])
        table.add("one", fmt_seconds(0.5))
        return [table]

    monkeypatch.setitem(cli.BENCHMARKS, "fake", ("0. Fake", fake))
    path = tmp_path / "results.json"
    assert cli.main(["--only", "fake", "--device", "cpu", "--quick", "--output", str(path)]) == 0
    assert benchmark_table("fake", "cpu", results=path) == [{"case": "one", "time": 0.5}]
    assert "| one | 500.0 ms |" in capsys.readouterr().out
    assert stored_benchmark("fake", results=path) in (tmp_path / "RESULTS.md").read_text()
    with pytest.raises(SystemExit, match="a .json file"):
        cli.main(["--only", "fake", "--output", str(tmp_path / "RESULTS.md")])


def _times_and_targets() -> list[Table]:
    """A block's tables: one of measurements, then two of targets (one per device)."""
    return [
        Table("Times", ["case", "n"], [["a", 1]]),
        Table("Targets", ["case", "n"], [["t1", 1]]),
        Table("Targets, GPU", ["case", "n"], [["t2", 2]]),
    ]


def test_a_summary_shows_every_targets_table_and_folds_the_whole_block(tmp_path):
    path = tmp_path / "results.json"
    record = record_block(_context(), "3. Demo", _times_and_targets(), 2.0)
    write_block(path, "cuda", "throughput", record, ORDER)
    summary = benchmark_summary("throughput", "cuda", results=path)
    targets, details = summary.split("\n\n<details>")
    assert targets == (
        "**Targets**\n\n| case | n |\n| --- | --- |\n| t1 | 1 |\n\n"
        "**Targets, GPU**\n\n| case | n |\n| --- | --- |\n| t2 | 2 |"
    )
    assert details.startswith(
        "<summary>All of benchmark throughput</summary>\n\n**3. Demo**\n\n_20"
    )
    assert "**Times**\n\n| case | n |\n| --- | --- |\n| a | 1 |" in details
    assert details.endswith("| t2 | 2 |\n\n</details>")
    assert stored_benchmark("throughput", "cuda", results=path).startswith("### 3. Demo\n\n_20")
    assert stored_benchmark("throughput", results=path) is None  # recorded for cuda only
    assert benchmark_summary("throughput", results=path) is None
    # A block without targets is folded away whole, with nothing above it.
    times = _times_and_targets()[:1]
    write_block(path, "cpu", "throughput", record_block(_context(), "3. Demo", times, 2.0), ORDER)
    assert benchmark_summary("throughput", results=path).startswith(
        "\n\n<details><summary>All of benchmark throughput</summary>\n\n**3. Demo**"
    )


def test_a_table_whose_rows_do_not_match_its_columns_is_refused(tmp_path):
    path = tmp_path / "results.json"
    record = record_block(_context(), "Demo", _times_and_targets()[:1], 1.0)
    record["tables"][0]["rows"][0].append({"text": "extra", "value": "extra"})  # hand-edited
    write_block(path, "cpu", "throughput", record, ORDER)
    with pytest.raises(ValueError, match="zip"):
        benchmark_table("throughput", results=path)


@pytest.mark.parametrize(
    "content", [[1, 2], {"format": 2, "blocks": {}}, {"blocks": {}}], ids=["list", "v2", "none"]
)
def test_a_file_of_another_kind_is_refused_by_name(tmp_path, content):
    path = tmp_path / "results.json"
    path.write_text(json.dumps(content), encoding="utf-8")
    with pytest.raises(ValueError, match=f"{path}: not a benchmark results file of format 1"):
        load_results(path)
    assert load_results(tmp_path / "missing.json") == {}


def test_the_test_command_benchmark_reads_pytest_s_summary_and_slowest_tests():
    from benchmarks.test_command import DURATION, _summary

    out = "x\n=== 946 passed, 7 skipped, 161 warnings in 687.19s (0:11:27) ===\n"
    assert _summary(out) == ("946 passed, 7 skipped, 161 warnings", 687.19)
    assert _summary("no summary here") == ("no pytest summary", None)
    found = DURATION.match("98.05s setup    tests/test_x.py::test_y[a-b]")
    assert (found["seconds"], found["phase"], found["test"]) == (
        "98.05",
        "setup",
        "tests/test_x.py::test_y[a-b]",
    )
