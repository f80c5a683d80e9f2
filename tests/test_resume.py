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
import warnings
from pathlib import Path

import compiled_run
import pytest
import torch
from conftest import make_data_dir

from cfbook.book.profiles import get_profile
from cfbook.book.stages import log_path, stage_checkpoint_dir
from cfbook.data import DeviceLoader
from cfbook.search import NativeGenerator
from cfbook.training.checkpoint import (
    CHECKPOINT_NAME,
    load_checkpoint,
    prepare_checkpoint_dir,
    restore_rng_states,
    rng_states,
)
from cfbook.training.log import load_log

NEPOCHS = 12
# The smoke stage with more epochs. argv: data folder, seconds to pause after each epoch (the
# pause gives the test time to kill the first run before it ends; the rerun does not pause).
_STAGE = f"""
import dataclasses, sys, time
import cfbook.book.stages as stages
from cfbook.book.profiles import get_profile

train, pause = stages.counterfactual_training, float(sys.argv[2])
stages.counterfactual_training = lambda *args, **kwargs: train(
    *args, callback=lambda *_: time.sleep(pause), **kwargs)
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
    prepare_checkpoint_dir(folder, dict(reversed(smoke.items())))
    assert (folder / CHECKPOINT_NAME).read_bytes() == b"state"  # the order of keys is no setting
    prepare_checkpoint_dir(folder, {**smoke, "nepochs": 99})
    assert not (folder / CHECKPOINT_NAME).exists()  # other settings: start afresh
    assert json.loads((folder / "config.json").read_text())["nepochs"] == 99


def _epoch(loader: DeviceLoader) -> list[list[int]]:
    return [batch.tolist() for _, batch in loader]


def test_restored_random_states_repeat_the_draws_that_followed_the_save() -> None:
    rng = torch.Generator().manual_seed(3)
    loader = DeviceLoader(torch.zeros(10, 1), torch.arange(10), 4, seed=5)
    _epoch(loader)
    states = rng_states(rng, loader)
    after = (torch.rand(4, generator=rng), torch.rand(4), _epoch(loader))
    torch.rand(9, generator=rng), torch.rand(9), _epoch(loader)  # the run goes on
    restore_rng_states(states, rng, loader)
    assert torch.equal(torch.rand(4, generator=rng), after[0])
    assert torch.equal(torch.rand(4), after[1]) and _epoch(loader) == after[2]
    # A run whose loader kept no state (a plain iterable) restores the generators alone.
    restore_rng_states({k: v for k, v in states.items() if k != "loader"}, rng, loader)
    assert torch.equal(torch.rand(4, generator=rng), after[0])


def test_a_checkpoint_without_its_configuration_is_discarded(tmp_path: Path) -> None:
    (tmp_path / CHECKPOINT_NAME).write_bytes(b"state of unknown origin")
    prepare_checkpoint_dir(tmp_path, {"nepochs": 4})
    assert not (tmp_path / CHECKPOINT_NAME).exists()


# --- exact repeats with the compiled search (compile=True) ---------------------------------

COMPILED_RUN = Path(__file__).with_name("compiled_run.py")


def _same_runs(a: tuple, b: tuple) -> None:
    """Identical records (all but the epoch times), meta and weights."""
    (model_a, log_a), (model_b, log_b) = a, b
    strip = [{**dataclasses.asdict(r), "time_taken": None} for r in log_a]
    assert strip == [{**dataclasses.asdict(r), "time_taken": None} for r in log_b]
    assert log_a.meta == log_b.meta
    for name, value in model_a.state_dict().items():
        assert torch.equal(value, model_b.state_dict()[name]), name


def _run_compiled(checkpoint_dir: Path, out: Path, kill_at: int | None = None) -> int:
    args = [sys.executable, str(COMPILED_RUN), str(checkpoint_dir), str(out)]
    done = subprocess.run(
        [*args, *([str(kill_at)] if kill_at else [])], capture_output=True, text=True
    )
    assert done.returncode in (0, -9), done.stdout + done.stderr
    return done.returncode


def _saved_run(out: Path) -> tuple:
    model = compiled_run.mlp(compiled_run.N_FEATURES, (16,), compiled_run.N_CLASSES)
    model.load_state_dict(torch.load(out / "weights.pt", weights_only=True))
    return model, load_log(out / "log.json")


@pytest.mark.compiles
@pytest.mark.slow
def test_a_killed_compiled_run_resumes_to_the_same_log_and_weights(tmp_path: Path) -> None:
    """A run killed mid-way and resumed in a new process, which compiles afresh, ends where an
    uninterrupted run ends."""
    assert _run_compiled(tmp_path / "ck-whole", tmp_path / "whole") == 0
    killed_at = 5
    assert _run_compiled(tmp_path / "ck-cut", tmp_path / "cut", killed_at) == -9
    assert load_checkpoint(tmp_path / "ck-cut")["epoch"] == killed_at
    assert not (tmp_path / "cut").exists()
    assert _run_compiled(tmp_path / "ck-cut", tmp_path / "cut") == 0
    whole, resumed = _saved_run(tmp_path / "whole"), _saved_run(tmp_path / "cut")
    _same_runs(whole, resumed)
    assert whole[1].meta["generator"]["compile"] is True


@pytest.mark.compiles
def test_a_compiled_run_repeats_whatever_searched_before_it_in_the_process() -> None:
    """Searches before a run (another experiment's, a notebook's, eager or compiled) do not
    change its path: which executor runs is the generator's setting, nothing else."""
    first = compiled_run.train()
    model = compiled_run.mlp(compiled_run.N_FEATURES, (16,), compiled_run.N_CLASSES)
    x = torch.rand(4 * compiled_run.NCE, compiled_run.N_FEATURES)
    target = torch.zeros(len(x), dtype=torch.long)
    for compile in (False, True, False):
        NativeGenerator(compile=compile, maxiter=compiled_run.MAXITER).generate(model, x, target)
    _same_runs(first, compiled_run.train())
    # ... and the compiled run is not the eager one: the setting decides the last bits.
    eager = compiled_run.train(compile=False)
    assert any(
        not torch.equal(a, b)
        for a, b in zip(first[0].parameters(), eager[0].parameters(), strict=True)
    )


@pytest.mark.compiles
def test_a_resume_with_the_other_executor_is_refused(tmp_path: Path) -> None:
    """compile is part of the run's identity: epochs searched compiled are not continued
    eagerly under one log, nor the other way round."""
    with pytest.raises(RuntimeError, match="interrupted after epoch 3"):
        compiled_run.train(tmp_path, raise_at=3)
    with pytest.raises(ValueError, match="'compile': True in the checkpoint, None now"):
        compiled_run.train(tmp_path, compile=False)
    _, log = compiled_run.train(tmp_path)  # the same run resumes
    assert [r.epoch for r in log] == list(range(1, compiled_run.NEPOCHS + 1))


def _dataloader_run(nepochs, checkpoint_dir, generator=None, sampler=None):
    from torch.utils.data import DataLoader, TensorDataset

    from cfbook import FullObjective, NativeGenerator, counterfactual_training, mlp

    g = torch.Generator().manual_seed(1)
    x = torch.randn(200, 5, generator=g)
    y = (x[:, 0] > 0).long()
    torch.manual_seed(0)
    model = mlp(5, (8,), 2)
    loader = DataLoader(
        TensorDataset(x, y),
        batch_size=32,
        shuffle=sampler is None,
        sampler=sampler,
        generator=None if generator is None else torch.Generator().manual_seed(generator),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # few valid counterfactuals in these short runs
        _, log = counterfactual_training(
            FullObjective(),
            model,
            NativeGenerator(),
            loader,
            torch.optim.Adam(model.parameters(), lr=1e-2),
            device="cpu",
            nepochs=nepochs,
            nce=20,
            verbose=0,
            checkpoint_dir=checkpoint_dir,
        )
    return [r.train_loss for r in log]


@pytest.mark.parametrize("generator", [None, 5], ids=["global", "own-generator"])
def test_a_plain_dataloader_resumes_exactly(tmp_path, generator):
    # A DataLoader that shuffles with its own generator: the checkpoint holds its state.
    uninterrupted = _dataloader_run(4, None, generator)
    _dataloader_run(2, tmp_path, generator)
    assert _dataloader_run(4, tmp_path, generator) == uninterrupted
    # Its generator is part of the run: a loader without one is another run.
    if generator is not None:
        with pytest.raises(ValueError, match="loader: 'generators': 1 in the checkpoint, None"):
            _dataloader_run(4, tmp_path)


def test_a_dataloader_whose_sampler_cannot_be_saved_is_refused(tmp_path):
    class EveryOther(torch.utils.data.Sampler):
        def __init__(self, n):
            self.n = n

        def __iter__(self):
            return iter(range(0, self.n, 2))

        def __len__(self):
            return -(-self.n // 2)

    with pytest.raises(ValueError, match="batches come from EveryOther: cfbook cannot save"):
        _dataloader_run(1, tmp_path, sampler=EveryOther(200))
    assert len(_dataloader_run(1, None, sampler=EveryOther(200))) == 1  # fine without resuming
