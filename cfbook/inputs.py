"""Checks of what users pass to cfbook's entry points (``counterfactual_training``, a
generator's ``generate``, ``paper_evaluate``), each run once per call, before any work: every
message names the problem and the way to fix it.

The convention: ``TypeError`` when an argument is not the kind of object asked for (a string
where a number goes, a float or a bool where an integer goes, not a tensor); ``ValueError`` when
it is, but its value is wrong (out of range; a tensor of the wrong shape, dtype or contents).

``what`` names the data in messages ("x", "the training data", ...) and ``var`` is how a fix
writes it in code ("x", "y_test", ...).
"""

from __future__ import annotations

import numbers
from collections.abc import Callable

import torch
from torch import Tensor, nn

__all__ = [
    "check_features",
    "check_finite",
    "check_label_range",
    "check_labels",
    "check_not_empty",
    "forward_mismatch",
    "require_int",
    "require_number",
]

# How a fix converts a tensor or a model to a floating-point dtype (else ``.to(dtype)``).
_CONVERSIONS = {
    torch.float32: "float()",
    torch.float64: "double()",
    torch.float16: "half()",
    torch.bfloat16: "bfloat16()",
}
_ROWS_LISTED = 5


def _plural(what: str) -> bool:
    return what.endswith(("data", "labels"))


def _verb(what: str, singular: str, plural: str) -> str:
    return plural if _plural(what) else singular


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _kind(value: object) -> str:
    return f"{value!r} ({type(value).__name__})"


def require_int(name: str, value: object, *, minimum: int = 1, or_none: bool = False) -> None:
    """``value`` is an int (not a bool) of at least ``minimum`` (0 or 1), or None if
    ``or_none``."""
    if or_none and value is None:
        return
    kind = "a positive integer" if minimum == 1 else "a non-negative integer"
    kind += " or None" if or_none else ""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be {kind}, got {_kind(value)}")
    if value < minimum:
        raise ValueError(f"{name} must be {kind}, got {value!r}")


def require_number(name: str, value: object, kind: str, valid: Callable[[float], bool]) -> None:
    """``value`` is a real number (not a bool) for which ``valid`` holds; ``kind`` says which,
    e.g. "a number in (0, 1]"."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be {kind}, got {_kind(value)}")
    if not valid(value):
        raise ValueError(f"{name} must be {kind}, got {value!r}")


def check_features(x: object, what: str = "x", var: str = "x") -> None:
    """``x`` is a floating-point tensor of shape (n_samples, ...): flat rows (n_samples,
    n_features) or samples of any shape, such as images (n_samples, channels, height, width)."""
    need = "a floating-point tensor of shape (n_samples, n_features) or (n_samples, ...)"
    if not isinstance(x, Tensor):
        fix = f"convert with torch.as_tensor({var}, dtype=torch.float32)"
        if type(x).__name__ == "DataFrame":
            fix = "encode it with cfbook.data.TableEncoder, whose transform gives the tensor"
        raise TypeError(f"{what} must be {need}, got a {type(x).__name__}: {fix}")
    if x.ndim < 2:
        raise ValueError(
            f"{what} must be {need}, got shape {tuple(x.shape)}: give each sample its own row "
            f"({var}[:, None] for one feature per sample, {var}[None] for one sample)"
        )
    if not x.is_floating_point():
        raise ValueError(
            f"{what} must be {need}, got {_dtype_name(x.dtype)}: convert with {var}.float()"
        )


def check_not_empty(x: Tensor, what: str, fix: str) -> None:
    """``x`` has at least one row; ``fix`` says where to look when it has none."""
    if x.shape[0] == 0:
        raise ValueError(f"{what} {_verb(what, 'is', 'are')} empty (0 rows): {fix}")


def check_finite(x: Tensor, what: str) -> None:
    """``x`` holds no NaN and no infinity; the message counts them and names up to five rows.
    One host read when all is well."""
    bad = ~torch.isfinite(x)
    if not bool(bad.any()):
        return
    n_nan = int(torch.isnan(x).sum())
    n_inf = int(bad.sum()) - n_nan
    counts = [
        f"{n} {label} value{'' if n == 1 else 's'}"
        for n, label in ((n_nan, "NaN"), (n_inf, "infinite"))
        if n
    ]
    rows = bad.reshape(bad.shape[0], -1).any(1).nonzero().flatten().tolist()
    listed = ", ".join(map(str, rows[:_ROWS_LISTED]))
    if len(rows) > _ROWS_LISTED:
        listed += f" and {len(rows) - _ROWS_LISTED} more"
    where = f"row{'' if len(rows) == 1 else 's'} {listed}"
    raise ValueError(
        f"{what} {_verb(what, 'holds', 'hold')} {' and '.join(counts)} ({where}): drop or "
        "impute them first"
    )


def check_labels(y: object, n_rows: int, what: str, var: str, data: str) -> None:
    """``y`` holds one integer class index per row of ``data`` (``n_rows`` of them)."""
    if not isinstance(y, Tensor):
        raise TypeError(
            f"{what} must be a tensor of integer class indices, got a {type(y).__name__}: "
            f"convert with torch.as_tensor({var}).long()"
        )
    if y.is_floating_point() or y.is_complex() or y.dtype == torch.bool:
        raise ValueError(
            f"{what} must be integer class indices, got {_dtype_name(y.dtype)}: use {var}.long()"
        )
    if tuple(y.shape) != (n_rows,):
        raise ValueError(
            f"{what} must hold one class index per row of {data}: shape ({n_rows},), got "
            f"{tuple(y.shape)}"
        )


def check_label_range(
    y: Tensor, n_classes: int, what: str = "labels", model_name: str = "the model"
) -> None:
    """``y`` (integer, not empty) lies in the ``n_classes`` outputs of the model."""
    low, high = (int(v) for v in torch.stack([y.min(), y.max()]).tolist())
    if low < 0 or high >= n_classes:
        raise ValueError(
            f"{what} must lie in [0, {n_classes - 1}] (the outputs of {model_name}), got "
            f"{low}..{high}: number the classes 0..{n_classes - 1}, or give the model "
            f"{max(high + 1, n_classes)} outputs"
        )


def _input_features(model: nn.Module) -> int | None:
    """The inputs per sample of ``model``'s first layer with weights, if that is an initialised
    ``nn.Linear``; None when it cannot be told (a convolution, a lazy layer, no weights)."""
    for module in model.modules():
        if next(module.parameters(recurse=False), None) is None:
            continue
        if isinstance(module, nn.Linear) and module.in_features > 0:
            return module.in_features
        return None
    return None


def forward_mismatch(
    model: nn.Module, x: Tensor, what: str = "x", var: str = "x", model_name: str = "the model"
) -> str | None:
    """Why ``model`` cannot take ``x``, where that can be told: a dtype that is not its
    parameters', a number of features that is not its first ``nn.Linear``'s, or samples of
    several dimensions given to a model that starts with an ``nn.Linear``. For a forward
    pass that failed: None means the failure is something else."""
    dtypes = {p.dtype for p in model.parameters() if p.is_floating_point()}
    if len(dtypes) == 1 and x.dtype not in dtypes:
        (dtype,) = dtypes
        to_model = _CONVERSIONS.get(dtype, f"to({dtype})")
        to_data = _CONVERSIONS.get(x.dtype, f"to({x.dtype})")
        them = "them" if _plural(what) else var
        return (
            f"{what} {_verb(what, 'is', 'are')} {_dtype_name(x.dtype)} but the parameters of "
            f"{model_name} are {_dtype_name(dtype)}: convert {them} with {var}.{to_model} "
            f"(or the model with model.{to_data})"
        )
    features = _input_features(model)
    if features is None or x.ndim < 2:
        return None
    if x.ndim > 2:
        fix = (
            f"start the model with nn.Flatten(), or pass {var}.flatten(1)"
            if x[0].numel() == features
            else f"build the model for inputs of that shape ({x[0].numel()} numbers a sample)"
        )
        return (
            f"{what} {_verb(what, 'has', 'have')} samples of shape {tuple(x.shape[1:])} but "
            f"{model_name} starts with an nn.Linear of {features} in_features, which takes "
            f"flat rows: {fix}"
        )
    if x.shape[1] != features:
        return (
            f"{what} {_verb(what, 'has', 'have')} {x.shape[1]} features, {model_name} takes "
            f"{features}: pass the {features} features the model was built for, or build it "
            f"for {x.shape[1]} (its first nn.Linear's in_features)"
        )
    return None
