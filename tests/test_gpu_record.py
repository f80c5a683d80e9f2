"""The GPU chapters' record (``cfbook.book.gpu_record``): it refuses to run without CUDA, its
demonstrations and its ``cf_batchsize`` timing run on the CPU, and the chapters' reader shows a
recorded output under its device and date, or says that none was measured."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from cfbook.book import gpu_record
from cfbook.errors import SetupError

CPU = torch.device("cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA GPU")
def test_the_record_refuses_to_run_without_cuda(tmp_path: Path) -> None:
    with pytest.raises(SetupError, match="needs a CUDA GPU"):
        gpu_record.record(tmp_path / "record.json")
    assert not (tmp_path / "record.json").exists()


@pytest.mark.parametrize(
    "demo", [d for d in gpu_record.DEMOS if d is not gpu_record.compiled_update]
)
def test_each_demo_prints_on_the_cpu(demo) -> None:
    assert gpu_record.run_demo(demo, CPU).strip()


def test_the_reader_labels_a_recorded_output_with_device_and_date(tmp_path: Path) -> None:
    path = tmp_path / "record.json"
    assert "Not yet measured on a GPU" in gpu_record.recorded_output("timed_product", path)
    data = {
        "format": gpu_record.FORMAT,
        "when": "2000-01-01 00:00 UTC",
        "device": "Some GPU (CUDA 0.0)",
        "torch": "0",
        "outputs": {"timed_product": "call returned after 0.01 ms\n"},
    }
    path.write_text(json.dumps(data))
    shown = gpu_record.recorded_output("timed_product", path)
    assert shown == "Recorded on Some GPU (CUDA 0.0), 2000-01-01 00:00 UTC:\n" + (
        "call returned after 0.01 ms\n"
    )
    assert "Not yet measured on a GPU" in gpu_record.recorded_output("search_memory", path)


def test_ct_epoch_seconds_times_each_chunk_size() -> None:
    timing = gpu_record.ct_epoch_seconds(CPU, "smoke", chunks=(8, 32), epochs=2)
    assert timing["nce"] == 32 and set(timing["epoch_seconds"]) == {"8", "32"}
    assert all(len(v) == 2 and min(v) > 0 for v in timing["epoch_seconds"].values())
    assert timing["seconds_per_epoch"]["8"] == timing["epoch_seconds"]["8"][1]


def test_the_memory_figure_draws_each_recorded_device() -> None:
    from cfbook.book.benchmarks import benchmark_table
    from cfbook.book.figures.benchmarks import search_memory_figure

    kinds = [k for k in ("cpu", "cuda") if benchmark_table("memory", k) is not None]
    fig = search_memory_figure(tuple(kinds))
    peaks = [t for t in fig.data if t.name != "stored results"]
    assert len(peaks) == 2 * len(kinds)  # one line per sweep and device
    assert all(t.name.split(",")[-1].strip()[:4].isdigit() for t in peaks if t.showlegend)


def test_a_recorded_table_keeps_the_rows_asked_for_under_its_device_and_date() -> None:
    from cfbook.book.benchmarks import benchmark_record, benchmark_table, run_label
    from cfbook.book.gpu_record import recorded_table

    assert "not yet measured on a GPU" in recorded_table("no-such-benchmark", ["model"])
    if benchmark_record("efficiency", "cuda") is None:
        pytest.skip("no GPU run of the efficiency benchmark is recorded")
    rows = benchmark_table("efficiency", "cuda", text=True)
    columns = ["model", "search", "Native"]
    text = recorded_table("efficiency", columns, lambda r: r["model"] == "mlp")
    lines = text.splitlines()
    label = run_label(benchmark_record("efficiency", "cuda")["provenance"])
    assert lines[0].startswith(f"Recorded on {label} (benchmark ")
    assert lines[2] == "| model | search | Native |"
    shown = [line for line in lines[4:] if line]
    assert len(shown) == sum(r["model"] == "mlp" for r in rows) and 0 < len(shown) < len(rows)
    assert all(line.startswith("| mlp | ") for line in shown)
