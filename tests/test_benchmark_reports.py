"""The recorded benchmarks as the scaling chapter and the benchmark appendix show them: small
tables across devices (:func:`benchmark_rows`) and whole reports per device
(:func:`benchmark_reports`), from a hand-made results file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cfbook.book.benchmarks import (
    SHOWN_NOTE,
    benchmark_reports,
    benchmark_rows,
    block_markdown,
    chunk_speed_text,
    run_label,
)

CPU = "CPU: AMD EPYC, 2 cores; torch 2.0 (2 CPU threads)"
GPU = "CPU: Xeon, 16 cores; GPU: NVIDIA H200 (CUDA 13.0); torch 2.0 (16 CPU threads)"


def _cell(text: str) -> dict[str, Any]:
    return {"text": text, "value": text}


def _block(title: str, when: str, machine: str, rows: list[list[str]], notes: list[str]) -> dict:
    table = {
        "title": "Seconds per epoch",
        "columns": ["setting", "s/epoch", "speed-up"],
        "rows": [[_cell(t) for t in row] for row in rows],
        "notes": notes,
    }
    provenance = {"when": when, "machine": machine, "quick": False, "note": "", "seconds": 9}
    return {"title": title, "provenance": provenance, "tables": [table]}


@pytest.fixture
def results(tmp_path: Path) -> Path:
    blocks = {
        "cpu/scaling": _block(
            "7. Scaling",
            "2026-01-02 03:04 UTC",
            CPU,
            [["1 x 2", "2.0 s", "1.00x"], ["2 x 2", "8.0 s", "0.25x"]],
            ["Shared note.", "CPU note."],
        ),
        "cpu/precision": _block(
            "6. Precision", "2026-01-01 00:00 UTC", CPU, [["fp32", "1.0 s", "1.00x"]], []
        ),
        "cuda/scaling": _block(
            "7. Scaling",
            "2026-02-03 04:05 UTC",
            GPU,
            [["1 x 16", "400 ms", "1.00x"]],
            ["Shared note.", "GPU note."],
        ),
    }
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"format": 1, "blocks": blocks}), encoding="utf-8")
    return path


def test_a_run_is_labelled_by_its_device_and_date() -> None:
    assert run_label({"when": "2026-12-04 17:33 UTC", "machine": GPU}) == "NVIDIA H200, 2026-12-04"
    assert run_label({"when": "2026-12-01 00:48 UTC", "machine": CPU}) == "2-core CPU, 2026-12-01"
    assert run_label({"when": "2026-12-01 00:48 UTC", "machine": "MPS; torch"}) == (
        "MPS, 2026-12-01"
    )


def test_a_small_table_has_a_row_per_recorded_row_of_each_device(results: Path) -> None:
    table = benchmark_rows("scaling", ["setting", "s/epoch"], results=results)
    assert table is not None
    assert table.splitlines() == [
        "| run | setting | s/epoch |",
        "|---|---|---|",
        "| 2-core CPU, 2026-01-02 | 1 x 2 | 2.0 s |",
        "| 2-core CPU, 2026-01-02 | 2 x 2 | 8.0 s |",
        "| NVIDIA H200, 2026-02-03 | 1 x 16 | 400 ms |",
    ]
    picked = benchmark_rows("scaling", ["s/epoch"], where={"setting": "2 x 2"}, results=results)
    assert picked is not None and picked.splitlines()[2:] == ["| 2-core CPU, 2026-01-02 | 8.0 s |"]


def test_a_single_run_names_itself_above_the_table(results: Path) -> None:
    table = benchmark_rows("scaling", ["setting", "speed-up"], kinds=("cuda",), results=results)
    assert table is not None
    assert table.splitlines() == [
        "_Seconds per epoch; NVIDIA H200, 2026-02-03._",
        "",
        "| setting | speed-up |",
        "|---|---|",
        "| 1 x 16 | 1.00x |",
    ]


def test_no_matching_row_is_no_table(results: Path) -> None:
    assert benchmark_rows("speedup", ["s/epoch"], results=results) is None
    assert benchmark_rows("scaling", ["s/epoch"], table=1, results=results) is None
    assert (
        benchmark_rows("scaling", ["s/epoch"], where={"setting": "9 x 9"}, results=results) is None
    )


def test_reports_of_a_device_come_in_their_order_and_leave_shown_notes_out(results: Path) -> None:
    text, notes = benchmark_reports(["scaling", "precision", "speedup"], "cpu", results=results)
    assert text.index("### 6. Precision") < text.index("### 7. Scaling")
    assert notes == ["Shared note.", "CPU note."]
    assert "2026-01-02 03:04 UTC, " + CPU in text and SHOWN_NOTE not in text
    gpu, _ = benchmark_reports(["scaling", "precision"], "cuda", shown=notes, results=results)
    assert "- GPU note." in gpu and "Shared note." not in gpu and f"- {SHOWN_NOTE}" in gpu
    assert benchmark_reports(["speedup"], "cuda", results=results) == ("", [])


def test_a_block_without_shown_notes_renders_as_in_results_md(results: Path) -> None:
    record = json.loads(results.read_text())["blocks"]["cpu/scaling"]
    assert block_markdown(record) == block_markdown(record, shown=["Not a note of it."])
    assert block_markdown(record).rstrip().endswith("- CPU note.")


def test_the_chunk_speed_is_read_from_the_throughput_rows_of_one_model(tmp_path: Path) -> None:
    def cell(v: object) -> dict[str, object]:
        return {"text": str(v), "value": v}

    rows = [
        [cell(m), cell(n), cell(rate)]
        for m, n, rate in (("resnet18", 1024, 4096.0), ("mlp", 128, 9.0), ("resnet18", 128, 512.0))
    ]
    block = {
        "provenance": {"when": "2026-01-02 03:04 UTC", "machine": "GPU: NVIDIA X (CUDA 1)"},
        "tables": [
            {"title": "cf/s (maxiter 30)", "columns": ["model", "nce", "Native cf/s"], "rows": rows}
        ],
    }
    results = tmp_path / "results.json"
    results.write_text(json.dumps({"format": 1, "blocks": {"cuda/throughput": block}}))
    text = chunk_speed_text(results=results)
    assert text.startswith("On NVIDIA X, 2026-01-02, a resnet18 search of up to 30 steps")
    assert "512 counterfactuals per second with 128 rows at once and 4,096 with 1,024" in text
    assert "about 2.00 s in 8 chunks of 128 and 0.25 s in one" in text
    assert "not yet measured" in chunk_speed_text("vgg", results=results)
    assert "not yet measured" in chunk_speed_text(kind="mps", results=results)
