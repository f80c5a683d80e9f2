"""Profiles and CT_MODE resolution: the knobs every chapter and the pipeline share."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from cfbook import FullObjective, NativeGenerator, VanillaObjective
from cfbook.book.evaluation import EvaluationConfig
from cfbook.book.profiles import (
    CT_MODES,
    MODEL_NAMES,
    PROFILES,
    Profile,
    check_mode,
    default_profile_name,
    get_profile,
    resolve_parameters,
)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("CT_MODE", "CFBOOK_PROFILE", "CFBOOK_DEVICE"):
        monkeypatch.delenv(name, raising=False)


def test_tutorial_profile_is_the_julia_tutorial_configuration() -> None:
    # ResNet-18 on 5,000 samples, 25 epochs, Adam(1e-3), batch 128, nce 1024, cf_batchsize 128,
    # maxiter 30, burn-in 0.2, accuracy every div(25, 10) = 2 epochs, Random.seed!(42), the
    # default FullObjective and NativeGenerator(), and its Native branch: a non-converged
    # counterfactual counts as found (mature="raw"); evaluated with the paper's protocol.
    tutorial = get_profile("tutorial")
    settings = dataclasses.asdict(tutorial)
    assert {k: v for k, v in settings.items() if k not in ("evaluation", "paired")} == {
        "name": "tutorial",
        "model": "resnet18",
        "n": 5000,
        "nepochs": 25,
        "batch_size": 128,
        "lr": 1e-3,
        "nce": 1024,
        "cf_batchsize": 128,
        "maxiter": 30,
        "burnin": 0.2,
        "accuracy_every": 2,
        "seed": 42,
        "runs": 1,
        "lambdas": (1.0, 0.5, 0.1, 0.25),
        "generator": "native",
        "tau": 0.75,
        "step_size": 0.1,
        "mature": "raw",
    }
    assert tutorial.search() == NativeGenerator(cf_batchsize=128)
    assert tutorial.objective("full") == FullObjective()
    assert tutorial.objective("vanilla") == VanillaObjective()
    assert tutorial.evaluation == EvaluationConfig()


def test_profile_config_is_plain_json() -> None:
    config = get_profile("smoke").config()
    assert json.loads(json.dumps(config)) == config
    assert config["lambdas"] == [1.0, 0.5, 0.1, 0.25]
    # The training stages' configuration leaves the evaluation out: it has its own.
    assert "evaluation" not in config and "paired" not in config
    both = get_profile("smoke").evaluation_config()
    assert both["training"] == config and both["evaluation"]["epsilons"] == [0.03]
    assert json.loads(json.dumps(both)) == both


def test_cpu_profile_keeps_the_model_and_search_but_shrinks_the_run() -> None:
    cpu, tutorial = get_profile("cpu"), get_profile("tutorial")
    assert (cpu.model, cpu.maxiter, cpu.burnin, cpu.lr) == ("resnet18", 30, 0.2, 1e-3)
    assert cpu.n < tutorial.n and cpu.nepochs < tutorial.nepochs and cpu.nce <= tutorial.nce
    assert round(cpu.burnin * cpu.nepochs) >= 1  # burn-in still visible in the figure
    # Several seeds, under the paper's rule, with the search benchmark 11 chose.
    assert cpu.runs >= 3 and cpu.mature == "neighbour"
    assert cpu.search() == NativeGenerator(step_size=1.0, lambda_cost=0.001, cf_batchsize=512)


def test_smoke_profile_is_tiny_but_exercises_burn_in_and_skipped_accuracy() -> None:
    smoke = get_profile("smoke")
    assert smoke.model == "mlp" and smoke.n <= 500 and smoke.nepochs <= 4 and smoke.maxiter <= 10
    burnin_epochs = round(smoke.burnin * smoke.nepochs)
    assert 1 <= burnin_epochs < smoke.nepochs  # epochs with and without counterfactuals
    assert 1 < smoke.accuracy_every <= smoke.nepochs  # epochs with and without accuracy


def test_every_profile_is_registered_under_its_own_name() -> None:
    assert set(PROFILES) == {"tutorial", "cpu", "smoke"}
    assert all(p.name == name and p.model in MODEL_NAMES for name, p in PROFILES.items())


@pytest.mark.parametrize("bad", ["gpu", "", "Tutorial", None])
def test_unknown_profile_lists_the_valid_ones(bad: object) -> None:
    with pytest.raises(ValueError, match="tutorial, cpu, smoke"):
        get_profile(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("mode", CT_MODES)
def test_valid_modes_pass_through(mode: str) -> None:
    assert check_mode(mode) == mode


@pytest.mark.parametrize("bad", ["train", "FULL", ""])
def test_unknown_mode_lists_the_valid_ones(bad: str) -> None:
    with pytest.raises(ValueError, match="full, vanilla, plot") as info:
        check_mode(bad)
    assert repr(bad) in str(info.value)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("model", "vgg", "model must be one of"),
        ("nepochs", 0, "nepochs"),
        ("nce", 0, "nce"),
        ("burnin", 1.0, "burnin"),
        ("lr", 0.0, "lr"),
        ("n", 0, "n must"),
        ("runs", 0, "runs"),
        ("generator", "ecco", "generator must be one of native, paper"),
        ("tau", 1.5, "tau"),
        ("step_size", -0.1, "step_size"),
        ("lambdas", (1.0, -0.5, 0.1, 0.25), "lambda_div"),
    ],
)
def test_profile_rejects_bad_values(field: str, value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(get_profile("smoke"), **{field: value})


@pytest.mark.parametrize(
    ("field", "value"), [("nce", 2.5), ("nepochs", True), ("n", "100"), ("lr", "0.1")]
)
def test_profile_rejects_wrongly_typed_values(field: str, value: object) -> None:
    with pytest.raises(TypeError, match=f"{field} must be a"):
        dataclasses.replace(get_profile("smoke"), **{field: value})


def test_a_profile_may_train_without_burn_in() -> None:
    assert dataclasses.replace(get_profile("smoke"), burnin=0.0).burnin == 0.0
    with pytest.raises(ValueError, match=r"burnin must be in \[0, 1\), got -0.1"):
        dataclasses.replace(get_profile("smoke"), burnin=-0.1)


def test_profiles_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        get_profile("cpu").nepochs = 1  # type: ignore[misc]
    assert isinstance(get_profile("cpu"), Profile)


@pytest.mark.parametrize(
    ("device", "expected"),
    [
        ("cpu", "cpu"),
        (torch.device("cpu"), "cpu"),
        ("cuda", "tutorial"),
        ("cuda:1", "tutorial"),
        (torch.device("mps"), "tutorial"),
    ],
)
def test_default_profile_follows_the_device(device: object, expected: str) -> None:
    assert default_profile_name(device) == expected  # type: ignore[arg-type]


def test_resolve_defaults_to_plot_and_the_device_profile() -> None:
    assert resolve_parameters(None, None, "cpu") == ("plot", get_profile("cpu"))
    assert resolve_parameters(None, None, "cuda") == ("plot", get_profile("tutorial"))


def test_resolve_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CT_MODE", "vanilla")
    monkeypatch.setenv("CFBOOK_PROFILE", "smoke")
    assert resolve_parameters(None, None, "cuda") == ("vanilla", get_profile("smoke"))


def test_explicit_parameters_beat_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CT_MODE", "vanilla")
    monkeypatch.setenv("CFBOOK_PROFILE", "smoke")
    assert resolve_parameters("full", "tutorial", "cpu") == ("full", get_profile("tutorial"))


def test_empty_environment_values_count_as_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CT_MODE", "")
    monkeypatch.setenv("CFBOOK_PROFILE", " ")
    assert resolve_parameters(None, None, "cpu") == ("plot", get_profile("cpu"))


def test_bad_environment_values_are_errors_naming_the_valid_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CT_MODE", "both")
    with pytest.raises(ValueError, match="'both'.*full, vanilla, plot"):
        resolve_parameters(None, None, "cpu")
    monkeypatch.setenv("CT_MODE", "plot")
    monkeypatch.setenv("CFBOOK_PROFILE", "huge")
    with pytest.raises(ValueError, match="'huge'.*tutorial, cpu, smoke"):
        resolve_parameters(None, None, "cpu")


def test_resolve_detects_the_device_only_when_needed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CFBOOK_DEVICE", "cpu")
    assert resolve_parameters("plot", None) == ("plot", get_profile("cpu"))
    assert capsys.readouterr().out == ""  # quietly: the chapter prints its own line
    monkeypatch.setenv("CFBOOK_DEVICE", "no-such-device")  # would fail if it were consulted
    assert resolve_parameters("plot", "smoke") == ("plot", get_profile("smoke"))


def test_the_shipped_tutorial_logs_are_the_tutorial_profile_run_as_configured() -> None:
    from cfbook.book.stages import load_comparison_runs
    from cfbook.data.paths import find_data_dir

    profile = get_profile("tutorial")
    runs = load_comparison_runs(profile, data_dir=find_data_dir())
    assert runs is not None, "data/tutorial/ lacks its logs"
    for log in (runs[0][0], runs[1][0]):
        assert log.meta["config"] == profile.config()
        assert len(log) == profile.nepochs
    full = runs[0][0]
    assert full.meta["mature"] == "raw" and full.meta["nce"] == profile.nce
    burnin = full.meta["burnin_epochs"]
    assert all((r.implaus is not None) == (r.epoch > burnin) for r in full)


def test_the_profile_differences_are_written_from_the_profiles():
    from cfbook.book.figures.profile_text import (
        REASONS,
        differing_settings,
        profile_differences_text,
    )

    tutorial, cpu = PROFILES["tutorial"], PROFILES["cpu"]
    changed = differing_settings(tutorial, cpu)
    assert "burnin" not in changed  # the same share; only its number of epochs differs
    assert {"generator", "step_size", "mature", "cf_batchsize", "n"} <= set(changed)
    text = profile_differences_text(tutorial, cpu)
    assert all(f"`{name}`" in text for name in changed)
    assert "`step_size` (0.1 → 1)" in text and "`mature` (raw → neighbour)" in text
    assert text.count("\n- ") == len(REASONS)  # every topic differs between these two
    assert profile_differences_text(cpu, cpu) == "`cpu` has every setting of `cpu`."
