"""Profiling, the scaling command's measurement and the chapter's stored benchmark, in one
process."""

from __future__ import annotations

import pytest
import torch
from distributed_worker import toy_data, toy_run

from cfbook.book.benchmarks import RESULTS_JSON, stored_benchmark
from cfbook.book.scaling import measure, run_path
from cfbook.data import DeviceLoader
from cfbook.profiling import REGIONS, profile_markdown
from cfbook.training import distributed
from cfbook.training.log import load_log


@pytest.fixture(scope="module")
def profiled():
    torch.set_num_threads(1)
    return toy_run("full", 30, nce=40, burnin=0.25, nepochs=4, profile_epoch=2)


def test_profiled_epoch_splits_its_time_into_the_loops_parts(profiled):
    _, log = profiled
    report = log.meta["epoch_profile"]
    assert report["epoch"] == 2
    regions = report["regions_s"]
    assert list(regions) == [*REGIONS, "bookkeeping"]
    assert all(regions[name] > 0 for name in REGIONS)
    assert sum(regions.values()) == pytest.approx(report["wall_s"], rel=1e-6)
    # The profiled epoch is the logged one: its time is what the log records (plus overhead).
    assert report["wall_s"] >= log[1].time_taken * 0.5
    assert report["top_ops"] and all(op["calls"] > 0 for op in report["top_ops"])
    text = profile_markdown(report)
    assert "| search |" in text and "| bookkeeping |" in text


def test_profiling_leaves_the_training_unchanged(profiled):
    model, log = profiled
    reference, log_ref = toy_run("full", 30, nce=40, burnin=0.25, nepochs=4)
    for a, b in zip(model.state_dict().values(), reference.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    assert [r.train_loss for r in log] == [r.train_loss for r in log_ref]


@pytest.mark.parametrize("epoch", [0, 5, True])
def test_profile_epoch_must_be_an_epoch_of_the_run(epoch):
    with pytest.raises(ValueError, match=r"profile_epoch must be an epoch in 1..4"):
        toy_run("vanilla", 30, nepochs=4, profile_epoch=epoch)


@pytest.mark.parametrize(
    ("accumulate", "error"), [(0, ValueError), (1.5, TypeError), (True, TypeError)]
)
def test_accumulate_must_be_a_positive_integer(accumulate, error):
    # A value out of range is a ValueError, another type a TypeError (cfbook.inputs).
    with pytest.raises(error, match="accumulate must be a positive integer"):
        toy_run("vanilla", 30, nepochs=1, accumulate=accumulate)


def test_training_refuses_a_loader_that_is_not_sharded_for_the_job(monkeypatch):
    monkeypatch.setattr(distributed, "world_size", lambda: 2)
    monkeypatch.setattr(distributed, "rank", lambda: 1)
    with pytest.raises(ValueError, match="not sharded for rank 1 of 2 processes"):
        distributed.check_sharded(DeviceLoader(*toy_data(), 30))
    distributed.check_sharded(DeviceLoader(*toy_data(), 30, rank=1, world_size=2))
    with pytest.raises(ValueError, match="does not split evenly over 2 processes"):
        distributed.loader_shard(33)
    assert distributed.loader_shard(64) == {"batch_size": 32, "rank": 1, "world_size": 2}


def test_stored_benchmark_blocks():
    scaling = stored_benchmark("scaling", "cpu")  # rendered from benchmarks/results.json
    assert scaling is not None and scaling.startswith("### 7. Scaling")
    assert scaling in RESULTS_JSON.with_name("RESULTS.md").read_text(encoding="utf-8")
    assert stored_benchmark("no-such-benchmark") is None


@pytest.mark.slow
def test_measure_keeps_the_stage_log_with_its_command_and_wall_time(tmp_path):
    from conftest import make_data_dir

    data_dir = make_data_dir(tmp_path)
    path = measure("smoke", "vanilla", 1, data_dir=data_dir, device="cpu")
    assert path == run_path(data_dir, "smoke", "vanilla", 1)
    log = load_log(path)
    assert log.meta["processes"] == 1 and log.meta["wall_s"] > 0 and len(log) == 4
    command = "python -m cfbook.commands.train_profile --profile smoke --mode vanilla --device cpu"
    assert log.meta["command"] == command
    assert "data/MNIST/raw" in log.meta["data_source"]  # relative: no machine paths in the log
    assert not (data_dir / "smoke").exists()  # the profile's own logs are left alone
