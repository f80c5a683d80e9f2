"""The scaling chapter's table, figure and device comparison from hand-made logs, and
:func:`cfbook.book.scaling.measure` around a stand-in for the training command (the real
command, and logs of real runs: test_scaling.py)."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

from cfbook.book import scaling
from cfbook.book.scaling import (
    RUN_TIMEOUT_S,
    device_comparison_markdown,
    launcher,
    load_scaling_runs,
    measure,
    run_path,
    scaling_markdown,
    scaling_profiles,
)
from cfbook.book.stages import log_path
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


def _runs() -> dict[int, TrainingLog]:
    one = _log([1.0, 3.0, 5.0], 1, processes=1, wall_s=1.0, threads=2)
    # Two processes: epoch 4 ran under the profiler and is left out of the mean; no thread count
    # recorded; the last epoch without a training accuracy.
    two = _log([0.25, 1.5, 2.5, 0.25], 1, processes=2, wall_s=0.75, epoch_profile={"epoch": 4})
    two[-1].acc = None
    # Four processes that never left the burn-in: no epoch to average.
    four = _log([1.5, 1.5], 2, processes=4, wall_s=1.5, threads=1)
    return {1: one, 2: two, 4: four}


def test_the_scaling_table_per_process_count() -> None:
    assert scaling_markdown(_runs()).splitlines()[2:] == [
        "| 1 | 2 | 9.0 s | 4.0 s | 1.0 s | 0.3333 | 0.530 / 0.430 | 1.00x |",
        "| 2 | ? | 4.5 s | 2.0 s | 750 ms | 0.2500 | n/a / 0.440 | 2.00x |",
        "| 4 | 1 | 3.0 s | n/a | 1.5 s | 0.5000 | 0.520 / 0.420 | 3.00x |",
    ]
    assert scaling_markdown({}) == (
        "No scaling runs stored: run `python -m cfbook.commands.scaling --profile cpu --mode full`."
    )


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


def test_runs_are_found_in_the_data_folder_by_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CFBOOK_DATA_DIR", str(tmp_path))
    assert run_path(None, "cpu", "full", 2) == tmp_path / "scaling" / "cpu-full-2proc.json"
    for processes, log in _runs().items():
        save_log(log, run_path(None, "cpu", "full", processes))
    save_log(_log([1.0], 0, processes=1), run_path(None, "smoke", "vanilla", 1))
    assert scaling_profiles() == ["cpu"] and scaling_profiles(mode="vanilla") == ["smoke"]
    assert list(load_scaling_runs("cpu", "full")) == [1, 2, 4]
    assert load_scaling_runs("cpu", "vanilla") == {}


def _stage_log(times: list[float], **meta: object) -> TrainingLog:
    config = {"model": "mlp", "n": 120, "nce": 40}
    return _log(times, 1, config=config, **meta)


def test_the_device_comparison_reads_each_profiles_first_seed(tmp_path: Path) -> None:
    save_log(
        _stage_log([9.0, 3.0, 5.0], device_name="CPU: test"), log_path(tmp_path, "cpu", "full")
    )
    save_log(
        _stage_log([9.0, 1.0, 2.0], device_name="CPU: test"), log_path(tmp_path, "cpu", "vanilla")
    )
    save_log(_stage_log([1.0, 2.0]), log_path(tmp_path, "smoke", "full"))
    save_log(_stage_log([1.0, 1.0]), log_path(tmp_path, "smoke", "vanilla"))
    text = device_comparison_markdown(tmp_path, profiles=("tutorial", "cpu", "smoke", "big"))
    rows = [line for line in text.split("\n") if line.startswith("| `")]
    assert rows == [
        "| `cpu` | CPU: test | mlp, 120, 40 | 4.00 | 1.50 | 2.7x |",
        "| `smoke` | ? | mlp, 120, 40 | 2.00 | 1.00 | 2.0x |",
    ]
    assert "`tutorial`, `big`" in text  # the profiles without a stored run


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
