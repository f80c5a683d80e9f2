"""The scaling command's launcher and log paths, and :func:`cfbook.book.scaling.measure` around a
stand-in for the training command (the real command: test_scaling.py)."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

from cfbook.book import scaling
from cfbook.book.scaling import RUN_TIMEOUT_S, launcher, measure, run_path
from cfbook.training.log import EpochRecord, TrainingLog, load_log, save_log


def _log(times: list[float], burnin: int, **meta: object) -> TrainingLog:
    """Epoch k took times[k-1] s; every epoch's loss and accuracies differ, so the last is known."""
    records = [
        EpochRecord(
            epoch=k,
            acc=0.5 + k / 100,
            acc_val=0.4 + k / 100,
            train_loss=1 / k,
            implaus=None,
            reg_loss=None,
            adv_loss=None,
            time_taken=t,
            percent_valid=None,
            avg_iter=None,
        )
        for k, t in enumerate(times, start=1)
    ]
    return TrainingLog(records, {"burnin_epochs": burnin, **meta})


@pytest.mark.parametrize("processes", [2, 3])
def test_two_or_more_processes_run_under_torchrun(processes: int) -> None:
    assert launcher(1) == [sys.executable, "-m"]
    assert launcher(processes) == [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={processes}",
        "--max-restarts=0",
        "-m",
    ]


def test_runs_are_kept_in_the_data_folder_by_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CFBOOK_DATA_DIR", str(tmp_path))
    assert run_path(None, "cpu", "full", 2) == tmp_path / "scaling" / "cpu-full-2proc.json"
    assert run_path(tmp_path / "x", "smoke", "vanilla", 1) == (
        tmp_path / "x" / "scaling" / "smoke-vanilla-1proc.json"
    )


@pytest.mark.parametrize("by_default", [True, False], ids=["CFBOOK_DATA_DIR", "data_dir"])
def test_measure_runs_the_stage_on_a_scratch_copy_and_keeps_its_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, by_default: bool
) -> None:
    data_dir = tmp_path / "data"
    (data_dir / "MNIST" / "raw").mkdir(parents=True)
    (data_dir / "MNIST" / "raw" / "digits").write_text("pixels")
    calls, printed = [], []

    def run(command: list[str], *, check: bool, timeout: float) -> None:
        # The training command: it reads the scratch copy and writes the stage's log beside it.
        calls.append((command, check, timeout))
        scratch = Path(command[command.index("--data-dir") + 1])
        assert (scratch / "MNIST" / "raw" / "digits").read_text() == "pixels"
        assert scratch.parent.name.startswith("cfbook-scaling-")
        save_log(_log([2.0, 2.0], 1, threads=1), scratch / "smoke" / "full.json")

    clock = iter([100.0, 103.0])
    monkeypatch.setattr(scaling.subprocess, "run", run)
    monkeypatch.setattr(scaling, "time", types.SimpleNamespace(perf_counter=lambda: next(clock)))
    monkeypatch.setattr(scaling, "print", lambda *a, **k: printed.append((a, k)), raising=False)
    if by_default:
        monkeypatch.setenv("CFBOOK_DATA_DIR", str(data_dir))
        path = measure("smoke", "full", 2, device="cpu", profile_epoch=2)
    else:
        monkeypatch.delenv("CFBOOK_DATA_DIR", raising=False)
        path = measure("smoke", "full", 2, data_dir=data_dir, device="cpu", profile_epoch=2)

    args = (
        "cfbook.commands.train_profile --profile smoke --mode full --device cpu --profile-epoch 2"
    )
    ((command, check, timeout),) = calls
    assert command[: len(launcher(2))] == launcher(2)
    assert command[len(launcher(2)) : -2] == args.split() and command[-2] == "--data-dir"
    assert (check, timeout) == (True, RUN_TIMEOUT_S)  # a failed stage raises; a hung one ends
    shown = f"torchrun --standalone --nproc_per_node=2 -m {args}"
    assert printed == [
        ((shown,), {"flush": True}),
        (("  3 s in all; log in data/scaling/smoke-full-2proc.json",), {"flush": True}),
    ]
    assert path == run_path(data_dir, "smoke", "full", 2)
    log = load_log(path)
    assert {k: log.meta[k] for k in ("processes", "wall_s", "command", "threads")} == {
        "processes": 2,
        "wall_s": 3.0,
        "command": shown,
        "threads": 1,
    }
    assert not (data_dir / "smoke").exists()  # the profile's own logs are left alone


def test_the_scaling_command_measures_each_process_count_in_order(monkeypatch) -> None:
    from cfbook.commands import scaling as command

    calls = []
    monkeypatch.setattr(command, "measure", lambda *a, **k: calls.append((a, k)))
    assert command.main([]) == 0
    defaults = {"data_dir": None, "device": None, "profile_epoch": None}
    assert calls == [(("cpu", "full", 1), defaults), (("cpu", "full", 2), defaults)]
    calls.clear()
    argv = "--profile tutorial --mode vanilla --processes 3 1 --device cuda --profile-epoch 2"
    assert command.main([*argv.split(), "--data-dir", "somewhere"]) == 0
    given = {"data_dir": Path("somewhere"), "device": "cuda", "profile_epoch": 2}
    assert calls == [(("tutorial", "vanilla", 3), given), (("tutorial", "vanilla", 1), given)]
    with pytest.raises(SystemExit):
        command.main(["--mode", "neither"])
    assert len(calls) == 2


def test_the_scaling_command_refuses_a_profile_it_does_not_know(monkeypatch, capsys) -> None:
    from cfbook.commands import scaling as command

    monkeypatch.setattr(command, "measure", lambda *a, **k: pytest.fail("measured"))
    with pytest.raises(SystemExit):
        command.main(["--profile", "huge"])
    assert "argument --profile: invalid choice: 'huge' (choose from " in capsys.readouterr().err
