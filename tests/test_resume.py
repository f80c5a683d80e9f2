"""A training stage killed mid-run resumes from its checkpoint when it runs again.

The stage runs in a subprocess, as it does in the pipeline's kernel, and is killed with SIGKILL
after its second epoch: nothing gets a chance to clean up, as when a machine stops.
"""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import make_data_dir

from cfbook.book.profiles import get_profile
from cfbook.book.stages import log_path, stage_checkpoint_dir
from cfbook.checkpoint import CHECKPOINT_NAME, load_checkpoint, prepare_checkpoint_dir
from cfbook.log import load_log

NEPOCHS = 12
# The smoke stage with more epochs. argv: data folder, seconds to pause after each epoch (the
# pause gives the test time to kill the first run before it ends; the rerun does not pause).
_STAGE = f"""
import dataclasses, sys, time
import cfbook.book.stages as stages
from cfbook.book.profiles import get_profile

train, pause = stages.counterfactual_training, float(sys.argv[2])
stages.counterfactual_training = lambda *args, **kwargs: train(
    *args, callback=lambda record: time.sleep(pause), **kwargs)
profile = dataclasses.replace(get_profile("smoke"), nepochs={NEPOCHS}, runs=1)
stages.run_training_stage("full", profile, device="cpu", data_dir=sys.argv[1])
"""


def _command(data_dir: Path, pause: float) -> list[str]:
    return [sys.executable, "-c", _STAGE, str(data_dir), str(pause)]


@pytest.mark.slow
def test_a_killed_stage_resumes_after_its_last_finished_epoch(tmp_path: Path) -> None:
    data_dir = make_data_dir(tmp_path)
    first = subprocess.Popen(
        _command(data_dir, 0.5), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    seen = []
    for line in first.stdout:
        seen.append(line)
        if line.startswith(f"FullObjective: epoch 2/{NEPOCHS},"):
            first.kill()
            break
    first.wait()
    first.stdout.close()
    assert first.returncode == -9, "".join(seen)  # killed, not finished
    state = load_checkpoint(stage_checkpoint_dir(data_dir, "smoke", "full"))
    killed_at = state["epoch"]
    assert 2 <= killed_at < NEPOCHS
    assert not log_path(data_dir, "smoke", "full").exists()

    second = subprocess.run(_command(data_dir, 0), capture_output=True, text=True)
    assert second.returncode == 0, second.stdout + second.stderr
    lines = re.findall(r"^FullObjective: (.+)$", second.stdout, re.MULTILINE)
    assert lines[0] == f"resuming from the checkpoint of epoch {killed_at}/{NEPOCHS}"
    trained = [int(re.match(r"epoch (\d+)/", line).group(1)) for line in lines[1:]]
    assert trained == list(range(killed_at + 1, NEPOCHS + 1))  # no epoch trained twice
    log = load_log(log_path(data_dir, "smoke", "full"))
    assert [r.epoch for r in log] == list(range(1, NEPOCHS + 1))
    # The epochs before the kill are the killed run's own records, times included.
    assert [dataclasses.asdict(r) for r in log[:killed_at]] == state["log"]


def test_a_checkpoint_of_another_configuration_is_discarded(tmp_path: Path) -> None:
    smoke = get_profile("smoke").config()
    folder = prepare_checkpoint_dir(tmp_path / "full", smoke)
    assert json.loads((folder / "config.json").read_text()) == smoke
    (folder / CHECKPOINT_NAME).write_bytes(b"state")
    assert prepare_checkpoint_dir(folder, smoke) == folder
    assert (folder / CHECKPOINT_NAME).read_bytes() == b"state"  # same run: resume it
    prepare_checkpoint_dir(folder, {**smoke, "nepochs": 99})
    assert not (folder / CHECKPOINT_NAME).exists()  # other settings: start afresh
    assert json.loads((folder / "config.json").read_text())["nepochs"] == 99


def test_a_checkpoint_without_its_configuration_is_discarded(tmp_path: Path) -> None:
    (tmp_path / CHECKPOINT_NAME).write_bytes(b"state of unknown origin")
    prepare_checkpoint_dir(tmp_path, {"nepochs": 4})
    assert not (tmp_path / CHECKPOINT_NAME).exists()
