"""Distributed counterfactual training on CPUs: real torchrun jobs of two gloo processes.

Every launch runs under a timeout this file enforces; nothing here asserts how fast anything is.
The toy runs themselves live in ``distributed_worker.py``, so one process and two processes train
through the very same code.
"""

from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from distributed_worker import toy_data, toy_run

from cfbook.book.profiles import PROFILES
from cfbook.book.stages import stage_outputs
from cfbook.data import DeviceLoader
from cfbook.device import cpu_cores
from cfbook.training import distributed
from cfbook.training.checkpoint import load_checkpoint
from cfbook.training.log import load_log

REPO = Path(__file__).resolve().parents[1]
WORKER = Path(__file__).with_name("distributed_worker.py")
LAUNCH_TIMEOUT_S = 120  # a healthy launch takes seconds; a hang fails the test instead of CI
FAILURE_LIMIT_S = 60  # a failed rank must end the job within this


def torchrun(*args: str, timeout: float = LAUNCH_TIMEOUT_S) -> subprocess.CompletedProcess:
    """``torchrun --standalone --nproc_per_node=2 ARGS`` (a free port, so parallel runs coexist)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CFBOOK_DEVICE": "cpu"}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node=2",
            "--max-restarts=0",
            *args,
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def worker(out: Path, *args: str, **kwargs) -> subprocess.CompletedProcess:
    return torchrun(str(WORKER), str(out), *args, **kwargs)


def ok(result: subprocess.CompletedProcess) -> None:
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]


def assert_same_weights(a: dict, b: dict, atol: float) -> None:
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=0, atol=atol, msg=name)


@pytest.fixture(scope="module")
def vanilla_job(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("vanilla")
    ok(worker(out, "vanilla"))
    return out


@pytest.fixture(scope="module")
def full_job(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("full")
    ok(worker(out, "full"))
    return out


def load_weights(path: Path) -> dict:
    return torch.load(path, weights_only=True)


@pytest.mark.parametrize("accumulate", [1, 2])
def test_two_ranks_of_batch_b_train_like_one_process_of_batch_2b(vanilla_job, accumulate):
    torch.set_num_threads(1)
    model, log = toy_run("vanilla", 30 * accumulate)
    two = load_log(vanilla_job / f"vanilla-acc{accumulate}.json")
    weights = load_weights(vanilla_job / f"vanilla-acc{accumulate}.pt")
    assert_same_weights(model.state_dict(), weights, atol=1e-5)
    assert two.meta["world_size"] == 2 and len(two) == len(log) == 3
    for one_rec, two_rec in zip(log, two, strict=True):
        assert two_rec.train_loss == pytest.approx(one_rec.train_loss, abs=1e-5)
        assert two_rec.acc == pytest.approx(one_rec.acc, abs=1e-6)


def test_accumulating_two_batches_of_b_equals_one_batch_of_2b():
    torch.set_num_threads(1)
    big, log_big = toy_run("vanilla", 30, nepochs=4)
    small, log_small = toy_run("vanilla", 15, accumulate=2, nepochs=4)
    assert_same_weights(big.state_dict(), small.state_dict(), atol=1e-5)
    assert log_small.meta["accumulate"] == 2
    # The log still reports every mini-batch's loss: the means agree.
    for a, b in zip(log_big, log_small, strict=True):
        assert a.train_loss == pytest.approx(b.train_loss, abs=1e-5)


def test_uneven_accumulation_steps_on_the_remainder():
    # 120 samples in batches of 30 with accumulate=3: updates after batches 3 and 4 (a group of 1).
    torch.set_num_threads(1)
    model, log = toy_run("vanilla", 30, accumulate=3, nepochs=1)
    assert len(log) == 1 and log[0].skipped_batches == 0
    assert all(torch.isfinite(p).all() for p in model.parameters())


def searched(job: Path) -> list[list[dict]]:
    """Per rank, per counterfactual epoch: the rows searched and how many were valid."""
    return [json.loads((job / f"searched-rank{r}.json").read_text()) for r in range(2)]


def test_full_objective_on_two_ranks_splits_the_search(full_job):
    torch.set_num_threads(1)
    log = load_log(full_job / "full.json")
    per_rank = searched(full_job)
    assert len(log) == 4 and all(len(calls) == 4 for calls in per_rank)
    for epoch, record in enumerate(log):
        calls = [per_rank[r][epoch] for r in range(2)]
        rows = [set(c["rows"]) for c in calls]
        assert len(rows[0]) == len(rows[1]) == 20, "each rank searches half of nce=40"
        assert not rows[0] & rows[1], f"epoch {epoch + 1}: the ranks' factuals overlap"
        valid = sum(c["valid"] for c in calls)
        assert 0 < valid < 40, "both outcomes, or the check is weak"
        assert record.percent_valid == valid / 40
        assert record.avg_iter == pytest.approx(sum(c["iterations"] for c in calls) / 40)
    # One seeded permutation: before the first update both ranks' factuals together are exactly
    # the ones a single process draws.
    import distributed_worker

    distributed_worker.SEARCHED.clear()
    toy_run("full", 30, nce=40, burnin=0.0, nepochs=1)
    assert set(distributed_worker.SEARCHED[0]["rows"]) == set(per_rank[0][0]["rows"]) | set(
        per_rank[1][0]["rows"]
    )


def test_killed_job_fails_then_resumes_from_its_checkpoint_on_two_ranks(full_job, tmp_path):
    checkpoints, out = tmp_path / "checkpoints", tmp_path / "out"
    out.mkdir()
    start = time.monotonic()
    killed = worker(
        out, "full", "--checkpoint-dir", str(checkpoints), "--fail-epoch", "2", "--fail-how", "kill"
    )
    assert killed.returncode != 0
    assert time.monotonic() - start < LAUNCH_TIMEOUT_S
    saved = load_checkpoint(checkpoints)
    assert saved is not None and 1 <= saved["epoch"] < 4 and saved["run"]["world_size"] == 2
    assert not list(checkpoints.glob(".*.tmp")), "a half-written checkpoint is left behind"
    assert not (out / "full.json").exists()
    with pytest.raises(ValueError, match=r"written by 2 process\(es\), this run has 1"):
        toy_run("full", 30, nce=40, burnin=0.0, nepochs=4, checkpoint_dir=checkpoints)

    ok(worker(out, "full", "--checkpoint-dir", str(checkpoints)))
    resumed = load_log(out / "full.json")
    reference = load_log(full_job / "full.json")
    # Only the epochs after the checkpoint were trained again...
    assert [len(calls) for calls in searched(out)] == [4 - saved["epoch"]] * 2
    # ...and the run ends where the uninterrupted one did.
    assert_same_weights(load_weights(out / "full.pt"), load_weights(full_job / "full.pt"), atol=0)
    strip = [{k: v for k, v in vars(r).items() if k != "time_taken"} for r in reference]
    assert strip == [{k: v for k, v in vars(r).items() if k != "time_taken"} for r in resumed]


def test_a_rank_that_raises_ends_the_job_in_bounded_time(tmp_path):
    start = time.monotonic()
    result = worker(tmp_path, "full", "--fail-epoch", "1", timeout=FAILURE_LIMIT_S)
    elapsed = time.monotonic() - start
    assert result.returncode != 0
    assert "fails after epoch 1, as planned" in result.stdout + result.stderr
    assert elapsed < FAILURE_LIMIT_S
    assert not (tmp_path / "full.json").exists()


def test_loader_shards_are_disjoint_and_cover_every_global_batch():
    x, y = torch.arange(50.0)[:, None], torch.zeros(50, dtype=torch.long)
    one = [xb.flatten().tolist() for xb, _ in DeviceLoader(x, y, 10, seed=1)]
    shards = [
        [xb.flatten().tolist() for xb, _ in DeviceLoader(x, y, 5, seed=1, rank=r, world_size=2)]
        for r in range(2)
    ]
    assert len(shards[0]) == len(shards[1]) == len(one) == 5
    for b, batch in enumerate(one):
        assert shards[0][b] + shards[1][b] == batch


def test_loader_refuses_a_last_batch_smaller_than_the_world():
    x, y = torch.zeros(21, 1), torch.zeros(21, dtype=torch.long)
    with pytest.raises(ValueError, match="last global batch holds 1 sample"):
        DeviceLoader(x, y, 5, rank=0, world_size=2)


def test_single_process_helpers_are_no_ops():
    assert distributed.world_size() == 1 and distributed.is_main()
    assert distributed.shard_rows(7) == slice(0, 7)
    model = torch.nn.Linear(2, 2)
    assert distributed.wrap_model(model, torch.device("cpu")) is model
    distributed.check_sharded(DeviceLoader(*toy_data(), 30))


def test_threads_follow_the_cores_per_local_process(monkeypatch):
    before = torch.get_num_threads()
    try:
        monkeypatch.setattr(distributed, "cpu_cores", lambda: 8)
        monkeypatch.delenv(distributed.THREADS_ENV, raising=False)
        monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
        assert distributed.configure_threads() == 2 == torch.get_num_threads()
        monkeypatch.setenv(distributed.THREADS_ENV, "3")
        assert distributed.configure_threads() == 3
        assert distributed.configure_threads(1) == 1
        with pytest.raises(ValueError, match="threads must be a positive integer"):
            distributed.configure_threads(0)
    finally:
        torch.set_num_threads(before)


def fake_scontrol(bin_dir: Path) -> None:
    """``scontrol show hostnames`` for a two-node allocation, as SLURM would answer."""
    bin_dir.mkdir()
    script = bin_dir / "scontrol"
    script.write_text('#!/bin/sh\nprintf "gpu-node-07\\ngpu-node-08\\n"\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)


def test_slurm_dry_run_prints_the_torchrun_command_for_2_nodes_of_4_gpus(tmp_path):
    fake_scontrol(tmp_path / "bin")
    env = {
        **os.environ,
        "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}",
        "SLURM_JOB_ID": "4242",
        "SLURM_NNODES": "2",
        "SLURM_JOB_NODELIST": "gpu-node-[07-08]",
        "SLURM_GPUS_ON_NODE": "4",
    }
    result = subprocess.run(
        ["bash", "scripts/slurm-train.sh", "--dry-run", "--profile", "tutorial", "--mode", "full"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0, result.stderr
    (line,) = [ln for ln in result.stdout.splitlines() if "torchrun" in ln]
    words = shlex.split(line)
    srun, torchrun_at = words[0], words.index("torchrun")
    assert srun == "srun" and "--ntasks-per-node=1" in words[:torchrun_at]
    launch = words[torchrun_at:]
    for flag in (
        "--nnodes=2",
        "--nproc_per_node=4",
        "--rdzv_id=4242",
        "--rdzv_backend=c10d",
        "--rdzv_endpoint=gpu-node-07:29500",
        "--max_restarts=0",
    ):
        assert flag in launch, f"{flag} missing from {line}"
    module = launch.index("-m")
    assert launch[module + 1 :] == [
        "cfbook.commands.train_profile",
        "--profile",
        "tutorial",
        "--mode",
        "full",
    ]


@pytest.mark.slow
def test_command_line_stage_on_one_and_two_processes(tmp_path):
    from conftest import make_data_dir

    data_dir = make_data_dir(tmp_path)
    single = subprocess.run(
        [
            sys.executable,
            "-m",
            "cfbook.commands.train_profile",
            "--profile",
            "smoke",
            "--mode",
            "vanilla",
            "--data-dir",
            str(data_dir),
            "--device",
            "cpu",
            "--threads",
            "1",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=LAUNCH_TIMEOUT_S,
    )
    ok(single)
    ok(
        torchrun(
            "-m",
            "cfbook.commands.train_profile",
            "--profile",
            "smoke",
            "--mode",
            "full",
            "--data-dir",
            str(data_dir),
            "--device",
            "cpu",
            "--profile-epoch",
        )
    )
    smoke = PROFILES["smoke"]
    for mode in ("full", "vanilla"):  # every run's log and the evaluation, written once
        assert all(path.is_file() for path in stage_outputs(data_dir, smoke, mode)), mode
    full, vanilla = (
        load_log(data_dir / "smoke" / "full.json"),
        load_log(data_dir / "smoke" / "vanilla.json"),
    )
    assert full.meta["world_size"] == 2 and "world_size" not in vanilla.meta
    assert vanilla.meta["threads"] == 1  # --threads
    assert full.meta["threads"] == max(1, cpu_cores() // 2)  # the cores shared by 2 processes
    assert full.meta["config"] == vanilla.meta["config"]  # the profile's settings, as the stage
    assert len(full) == len(vanilla) == 4
    profile = full.meta["epoch_profile"]
    assert profile["epoch"] == 2 and profile["regions_s"]["search"] > 0


@pytest.mark.slow
def test_pipeline_threads_reach_the_training_stages(smoke_book):
    assert smoke_book.exit_code == 0, smoke_book.output[-3000:]
    for mode in ("full", "vanilla"):
        assert load_log(smoke_book.data_dir / "smoke" / f"{mode}.json").meta["threads"] == 1


def test_gpu_check_stops_at_once_without_a_gpu():
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: run scripts/gpu-check.sh itself")
    result = subprocess.run(
        ["bash", "scripts/gpu-check.sh"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=LAUNCH_TIMEOUT_S,
    )
    assert result.returncode == 1 and "no CUDA GPU visible" in result.stderr


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_profiled_epoch_on_cuda_reports_device_time():
    _, log = toy_run("full", 30, nce=40, burnin=0.0, nepochs=2, device="cuda", profile_epoch=2)
    report = log.meta["epoch_profile"]
    assert report["regions_s"]["search"] > 0
    assert all("self_device_s" in op for op in report["top_ops"])


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs (NCCL)")
def test_two_gpus_with_nccl_train_like_one_gpu_with_twice_the_batch(tmp_path):
    ok(worker(tmp_path, "vanilla", "--device", "cuda"))
    model, _ = toy_run("vanilla", 30, device="cuda")
    weights = {k: v.cpu() for k, v in model.state_dict().items()}
    assert_same_weights(weights, load_weights(tmp_path / "vanilla-acc1.pt"), atol=1e-5)
