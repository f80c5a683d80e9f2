"""Bad inputs to the public entry points (``counterfactual_training``, ``generate``,
``paper_evaluate``) and to the command lines get a clear error, checked once at the start, that
names the problem and the fix (``cfbook.inputs``)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from cfbook import (
    FullObjective,
    NativeGenerator,
    PaperProtocol,
    ReferenceGenerator,
    counterfactual_training,
    paper_evaluate,
)
from cfbook.commands import pipeline, train_profile
from cfbook.data import DeviceLoader
from cfbook.errors import SetupError
from cfbook.inputs import check_label_range, forward_mismatch

N_FEATURES, N_CLASSES = 10, 3
GENERATORS = [NativeGenerator(maxiter=2), ReferenceGenerator(maxiter=2)]
GENERATOR_IDS = ["native", "reference"]


def _model(n_features: int = N_FEATURES) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(n_features, 16), nn.ReLU(), nn.Linear(16, N_CLASSES))


def _data(n: int = 12, n_features: int = N_FEATURES) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return torch.randn(n, n_features, generator=g), torch.arange(n) % N_CLASSES


def _train(x, y, model=None, **kwargs):
    model = model or _model()
    kwargs.setdefault("nepochs", 1)
    return counterfactual_training(
        FullObjective(),
        model,
        NativeGenerator(maxiter=2),
        DeviceLoader(x, y, batch_size=6),
        torch.optim.SGD(model.parameters(), lr=0.1),
        device="cpu",
        verbose=0,
        **kwargs,
    )


def _evaluate(x, y, model=None, **kwargs):
    protocol = PaperProtocol(rounds=2, individuals=4, energy_weights=(1.0,), maxiter=2)
    return paper_evaluate({"m": model or _model()}, x, y, protocol, **kwargs)


def _targets(n: int = 4) -> torch.Tensor:
    return torch.arange(n) % N_CLASSES


# --------------------------------------------------------------------------------------------------


def test_training_names_features_the_model_does_not_take():
    x, y = _data()
    with pytest.raises(ValueError, match="the training data have 7 features, the model takes 10"):
        _train(x[:, :7], y)


@pytest.mark.parametrize("generator", GENERATORS, ids=GENERATOR_IDS)
def test_generate_names_features_the_model_does_not_take(generator):
    x, _ = _data(4, 7)
    with pytest.raises(ValueError, match=r"x has 7 features, the model takes 10: pass the 10"):
        generator.generate(_model(), x, _targets())


def test_evaluation_names_features_a_model_does_not_take():
    x, y = _data()
    with pytest.raises(ValueError, match="x_test has 7 features, model 'm' takes 10"):
        _evaluate(x[:, :7], y)


def test_an_image_model_that_cannot_be_read_keeps_the_error_of_torch():
    """With a convolution first, the input size is not told: torch's own error stays, and data
    the model takes pass."""
    model = nn.Sequential(
        nn.Unflatten(1, (1, 4, 4)), nn.Conv2d(1, 2, 3), nn.Flatten(), nn.Linear(8, N_CLASSES)
    )
    x, _ = _data(4, 16)
    with pytest.raises(RuntimeError):
        NativeGenerator(maxiter=2).generate(model, x[:, :15], _targets())
    assert len(NativeGenerator(maxiter=2).generate(model, x, _targets())) == 4


# --------------------------------------------------------------------------------------------------


def test_training_names_a_dtype_that_is_not_the_models():
    x, y = _data()
    with pytest.raises(
        ValueError,
        match=r"the training data are float64 but the parameters of the model are float32: "
        r"convert them with x\.float\(\) \(or the model with model\.double\(\)\)",
    ):
        _train(x.double(), y)


@pytest.mark.parametrize("generator", GENERATORS, ids=GENERATOR_IDS)
def test_generate_names_a_dtype_that_is_not_the_models(generator):
    x, _ = _data(4)
    with pytest.raises(ValueError, match=r"x is float64 but .* float32: convert x with x\.float"):
        generator.generate(_model(), x.double(), _targets())


def test_evaluation_names_a_dtype_that_is_not_the_models():
    x, y = _data()
    with pytest.raises(ValueError, match=r"x_test is float64 .* with x_test\.float\(\)"):
        _evaluate(x.double(), y)


# --------------------------------------------------------------------------------------------------


def test_training_refuses_float_labels():
    x, y = _data()
    with pytest.raises(
        ValueError, match=r"labels must be integer class indices, got float32: use y\.long\(\)"
    ):
        _train(x, y.float())


@pytest.mark.parametrize("generator", GENERATORS, ids=GENERATOR_IDS)
def test_generate_refuses_float_targets(generator):
    x, _ = _data(4)
    with pytest.raises(
        ValueError, match=r"target must be integer class indices, got float32: use target\.long"
    ):
        generator.generate(_model(), x, _targets().float())


def test_evaluation_refuses_float_labels():
    x, y = _data()
    with pytest.raises(ValueError, match=r"y_test must be integer class indices, got float32"):
        _evaluate(x, y.float())


def test_labels_of_the_wrong_length_are_named():
    x, y = _data()
    with pytest.raises(ValueError, match=r"y_test must hold one class index per row of x_test"):
        _evaluate(x, y[:-1])


# --------------------------------------------------------------------------------------------------


def test_training_refuses_nan_and_names_its_rows():
    x, y = _data()
    x[3, 1] = x[7, 4] = float("nan")
    with pytest.raises(
        ValueError,
        match=r"the training data hold 2 NaN values \(rows 3, 7\): drop or impute them first",
    ):
        _train(x, y, domain=None)


def test_training_refuses_infinity_and_lists_at_most_five_rows():
    x, y = _data()
    x[[0, 2, 4, 6, 8, 10], 0] = float("inf")
    x[1, 1] = float("nan")
    with pytest.raises(
        ValueError,
        match=r"1 NaN value and 6 infinite values \(rows 0, 1, 2, 4, 6 and 2 more\)",
    ):
        _train(x, y)


def test_evaluation_refuses_nan_in_the_test_data():
    x, y = _data()
    x[5, 0] = float("nan")
    with pytest.raises(ValueError, match=r"x_test holds 1 NaN value \(row 5\)"):
        _evaluate(x, y)


# --------------------------------------------------------------------------------------------------


def test_training_refuses_empty_data():
    x, y = _data()
    with pytest.raises(ValueError, match=r"the training data are empty \(0 rows\): train on"):
        _train(x[:0], y[:0])


def test_evaluation_refuses_an_empty_test_set():
    x, y = _data()
    with pytest.raises(ValueError, match=r"the test set is empty \(0 rows\)"):
        _evaluate(x[:0], y[:0])


def test_evaluation_names_the_test_labels_when_they_hold_one_class():
    x, y = _data()
    with pytest.raises(ValueError, match="y_test holds 1 class"):
        _evaluate(x, torch.zeros_like(y))


# --------------------------------------------------------------------------------------------------


def test_a_string_tau_is_named():
    with pytest.raises(TypeError, match=r"tau must be a number in \(0, 1\], got '0.5' \(str\)"):
        NativeGenerator(tau="0.5")


@pytest.mark.parametrize("cls", [NativeGenerator, ReferenceGenerator], ids=GENERATOR_IDS)
@pytest.mark.parametrize(
    "setting,value",
    [
        ("maxiter", "30"),
        ("maxiter", 1.5),
        ("maxiter", True),
        ("tau", None),
        ("lambda_cost", "0.1"),
        ("lambda_energy", [1.0]),
        ("step_size", "0.1"),
        ("epsilon", True),
    ],
)
def test_numeric_generator_settings_check_their_type(cls, setting, value):
    with pytest.raises(TypeError, match=rf"^{setting} must be a .* \({type(value).__name__}\)$"):
        cls(**{setting: value})


@pytest.mark.parametrize(
    "setting,value", [("cf_batchsize", "8"), ("cf_batchsize", 2.0), ("compact_every", 2.5)]
)
def test_native_generator_settings_check_their_type(setting, value):
    with pytest.raises(TypeError, match=rf"^{setting} must be a positive integer"):
        NativeGenerator(**{setting: value})


@pytest.mark.parametrize(
    "setting,value",
    [("tau", 1.5), ("tau", float("nan")), ("step_size", 0.0), ("lambda_cost", -1.0)],
)
def test_generator_settings_out_of_range_stay_value_errors(setting, value):
    with pytest.raises(ValueError, match=rf"^{setting} must be a"):
        NativeGenerator(**{setting: value})
    with pytest.raises(ValueError, match="cf_batchsize must be a positive integer or None"):
        NativeGenerator(cf_batchsize=0)


@pytest.mark.parametrize(
    "setting,value,error",
    [
        ("nepochs", "2", TypeError),
        ("nepochs", 0, ValueError),
        ("burnin", "0.5", TypeError),
        ("burnin", 1.5, ValueError),
        ("nce", 2.5, TypeError),
        ("accumulate", True, TypeError),
    ],
)
def test_training_settings_check_their_type_and_value(setting, value, error):
    x, y = _data()
    with pytest.raises(error, match=rf"^{setting} must be a"):
        _train(x, y, **{setting: value})


@pytest.mark.parametrize("generator", GENERATORS, ids=GENERATOR_IDS)
def test_generate_names_data_that_are_not_a_tensor(generator):
    x, _ = _data(4)
    with pytest.raises(TypeError, match=r"x must be a floating-point tensor .* got a list"):
        generator.generate(_model(), x.tolist(), _targets())
    with pytest.raises(ValueError, match=r"got int64: convert with x\.float\(\)"):
        generator.generate(_model(), x.long(), _targets())


# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("generator", GENERATORS, ids=GENERATOR_IDS)
def test_generate_keeps_its_clear_errors(generator):
    x, _ = _data(4)
    with pytest.raises(ValueError, match=r"target classes must lie in \[0, 2\], got 2\.\.4"):
        generator.generate(_model(), x, _targets() + 2)
    with pytest.raises(ValueError, match="domain has 3 entries but the data has 10 features"):
        generator.generate(_model(), x, _targets(), domain=[(-1.0, 1.0)] * 3)
    with pytest.raises(ValueError, match=r"mutability values must be one of .*\['sideways'\]"):
        generator.generate(_model(), x, _targets(), mutability=["both"] * 9 + ["sideways"])


def test_training_keeps_its_clear_errors():
    x, y = _data()
    with pytest.raises(
        ValueError, match=r"labels must lie in \[0, 2\] .*, got 0\.\.3: .* give the model 4"
    ):
        _train(x, y + y // 2)
    with pytest.raises(ValueError, match="domain has 3 entries but the data has 10 features"):
        _train(x, y, domain=[(-1.0, 1.0)] * 3)
    with pytest.raises(ValueError, match=r"mutability values must be one of .*\['sideways'\]"):
        _train(x, y, mutability=["both"] * 9 + ["sideways"])
    with pytest.raises(ValueError, match=r"nce=100 is larger than the training set \(12 samples"):
        _train(x, y, nce=100)


def test_evaluation_keeps_its_clear_errors():
    x, y = _data()
    with pytest.raises(ValueError, match=r"y_test must lie in \[0, 2\] \(the outputs of model 'm'"):
        _evaluate(x, y + 1)
    with pytest.raises(ValueError, match="domain has 3 entries but the data has 10 features"):
        _evaluate(x, y, domain=[(-1.0, 1.0)] * 3)


# --------------------------------------------------------------------------------------------------

TRAIN_ARGS = ["--mode", "full", "--profile", "smoke", "--device", "cpu"]


def _raise(error: Exception):
    def stage(*args, **kwargs):
        raise error

    return stage


def test_train_profile_keeps_the_traceback_of_an_unexpected_error(monkeypatch):
    monkeypatch.setattr(train_profile, "run_training_stage", _raise(RuntimeError("boom")))
    with pytest.raises(RuntimeError, match="boom"):
        train_profile.main(TRAIN_ARGS)


@pytest.mark.parametrize(
    "error", [ValueError("bad"), FileNotFoundError("gone"), SetupError("no device")]
)
def test_train_profile_prints_expected_errors_as_one_line(monkeypatch, capsys, error):
    monkeypatch.setattr(train_profile, "run_training_stage", _raise(error))
    assert train_profile.main(TRAIN_ARGS) == 2
    assert capsys.readouterr().err == f"error: {type(error).__name__}: {error}\n"


def test_a_missing_device_is_still_one_line(capsys):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert train_profile.main(["--mode", "full", "--profile", "smoke", "--device", "cuda"]) == 2
    assert capsys.readouterr().err.startswith("error: SetupError: prefer='cuda' asks for CUDA")


def test_pipeline_keeps_the_traceback_of_an_unexpected_error(monkeypatch, capsys):
    monkeypatch.setattr(pipeline, "run_pipeline", _raise(RuntimeError("boom")))
    with pytest.raises(RuntimeError, match="boom"):
        pipeline.main(["--profile", "smoke"])
    monkeypatch.setattr(pipeline, "run_pipeline", _raise(SetupError("no kernel")))
    assert pipeline.main(["--profile", "smoke"]) == 2
    assert capsys.readouterr().err == "error: SetupError: no kernel\n"


def test_the_test_set_is_named_in_every_message_of_paper_evaluate():
    x, y = _data()
    with pytest.raises(TypeError, match=r"^x_test must be .*torch\.as_tensor\(x_test"):
        _evaluate(x.tolist(), y)
    with pytest.raises(ValueError, match=r"^x_test must be .*\(x_test\[:, None\] for one"):
        _evaluate(x[:, 0], y)
    with pytest.raises(ValueError, match=r"^model 'm' must return logits of shape \(n_samples"):
        _evaluate(x[:, None, :], y)
    with pytest.raises(ValueError, match=r"^the test set is empty \(0 rows\): pass x_test and"):
        _evaluate(x[:0], y[:0])
    with pytest.raises(TypeError, match=r"^y_test must be .*torch\.as_tensor\(y_test\)\.long"):
        _evaluate(x, y.tolist())
    with pytest.raises(ValueError, match=r"^y_test must hold one class index per row of x_test"):
        _evaluate(x, y[:5])


def _module(name: str, source: str, **names: object) -> dict[str, object]:
    """Functions defined as if in module ``name`` (the frames ``warn`` walks see that name)."""
    scope: dict[str, object] = {"__name__": name, **names}
    exec(compile(source, f"<{name}>", "exec"), scope)
    return scope


def test_a_library_warning_names_the_users_line_past_a_wrapper_between_library_frames():
    from cfbook.errors import warn

    inner = _module("cfbook.search.fake", "def inner():\n    warn('deep')\n", warn=warn)["inner"]
    wrapper = _module("some.decorator", "def wrapper(f):\n    return f()\n")["wrapper"]
    outer = _module(
        "cfbook.training.fake",
        "def outer():\n    return wrapper(inner)\n",
        wrapper=wrapper,
        inner=inner,
    )["outer"]
    book = _module("cfbook.book.fake", "def chapter():\n    outer()\n", outer=outer)["chapter"]
    with pytest.warns(UserWarning, match="deep") as caught:
        outer()  # the user's line
    assert (caught[0].filename, caught[0].lineno) == (__file__, _line_of("outer()  # the user's"))
    with pytest.warns(UserWarning, match="deep") as caught:
        book()  # the book is an application: its line is named, not the test's
    assert caught[0].filename == "<cfbook.book.fake>"


def _line_of(text: str) -> int:
    with open(__file__, encoding="utf-8") as f:
        return next(i for i, line in enumerate(f, 1) if text in line)


def test_a_forward_mismatch_names_a_fix_that_runs():
    double = nn.Linear(3, 2).double()
    message = forward_mismatch(double, torch.zeros(4, 3))
    assert "convert x with x.double() (or the model with model.float())" in message
    # A dtype without a short method is converted with .to(dtype), itself a call.
    odd = torch.zeros(4, 3, dtype=torch.float8_e4m3fn)
    message = forward_mismatch(double, odd)
    assert "x.double() (or the model with model.to(torch.float8_e4m3fn))" in message
    # The first layer's inputs: one feature is a real count; a lazy layer's 0 is "cannot tell".
    assert "x has 3 features, the model takes 1" in forward_mismatch(nn.Linear(1, 2), odd.float())
    assert forward_mismatch(nn.LazyLinear(2), torch.zeros(4, 3)) is None
    with pytest.raises(ValueError, match=r"number the classes 0\.\.2, or give the model 6 outputs"):
        check_label_range(torch.tensor([0, 5]), 3)


# --------------------------------------------------------------------------------------------------


class _Detached(nn.Module):
    """A model whose forward cuts the graph between its input and its outputs."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = _model()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x.detach())


@pytest.mark.parametrize(
    ("model", "message"),
    [
        (nn.Sequential(_model(), nn.Softmax(dim=1)), "returns probabilities .* remove the final"),
        (_Detached(), "no gradient reaches the model's input"),
    ],
    ids=["softmax", "detached"],
)
def test_a_model_ct_cannot_use_is_refused_before_any_work(model, message):
    x, y = _data()
    with pytest.raises(ValueError, match=message):
        _train(x, y, model=model)
    with pytest.raises(ValueError, match=message):
        NativeGenerator(maxiter=2).generate(model, x[:4], _targets())
    with pytest.raises(ValueError, match=message.replace("the model's", "model 'm''s")):
        _evaluate(x, y, model=model)


def test_log_probabilities_and_logits_pass():
    # Log-softmax outputs are logits too (their softmax is the model's probabilities); a model's
    # logits may happen to lie in [0, 1] without summing to 1.
    x, y = _data()
    _train(x, y, model=nn.Sequential(_model(), nn.LogSoftmax(dim=1)))
    _train(x, y, model=nn.Sequential(_model(), nn.Sigmoid()))


def test_accuracy_and_the_attacks_check_what_training_checks():
    from cfbook import accuracy, attack_accuracy
    from cfbook.evaluation.attacks import PAPER_PGD

    x, y = _data()
    model = _model()
    for measure in (
        lambda x, y: accuracy(model, x, y),
        lambda x, y: attack_accuracy(model, x, y, **PAPER_PGD),
    ):
        with pytest.raises(ValueError, match=r"x is float64 but the parameters of the model"):
            measure(x.double(), y)
        with pytest.raises(ValueError, match=r"^y must lie in \[0, 2\] \(the outputs of the mod"):
            measure(x, y + 1)
        bad = x.clone()
        bad[4, 1] = float("nan")
        with pytest.raises(ValueError, match=r"^x holds 1 NaN value \(row 4\)"):
            measure(bad, y)
        with pytest.raises(ValueError, match=r"^y must hold one class index per row of x"):
            measure(x, y[:3])
    # The paper's attack in one call: its epsilons are the default grid.
    result = attack_accuracy(model, x, y, **PAPER_PGD)
    assert len(result["pgd"]) == len(result["epsilons"]) == 10


def test_rounds_without_a_valid_counterfactual_are_said():
    from cfbook import NativeGenerator

    x, y = _data()
    with pytest.warns(UserWarning, match=r"model 'm': 2 of 2 rounds found no valid counterfa"):
        result = _evaluate(x, y, search=lambda w: NativeGenerator(maxiter=0))
    assert result["per_round"]["m"]["cost"] == [None, None]
    assert result["per_round"]["m"]["validity"] == [0.0, 0.0]
