"""The checks of a model and its data that every entry point runs once, before any work, with
the same messages: ``generate``, ``counterfactual_training`` (and ``CounterfactualLoss``),
``paper_evaluate``, ``accuracy`` and ``attack_accuracy``."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import Tensor, nn

from cfbook.inputs import (
    check_features,
    check_finite,
    check_label_range,
    check_labels,
    check_not_empty,
    forward_mismatch,
)
from cfbook.search.logits import class_logits

__all__ = ["PROBE_ROWS", "check_labelled", "check_logits", "count_classes", "eval_mode"]


@contextlib.contextmanager
def eval_mode(model: nn.Module) -> Iterator[None]:
    """Search in eval mode (BatchNorm on running statistics), then restore every module's mode."""
    modes = [(module, module.training) for module in model.modules()]
    model.eval()
    try:
        yield
    finally:
        for module, training in modes:
            module.training = training


def count_classes(
    model: nn.Module, x: Tensor, what: str = "x", var: str = "x", model_name: str = "the model"
) -> int:
    """Number of classes the model outputs (2 for a binary model's single logit: see
    ``cfbook.search.logits``), from a forward pass on a few rows in eval mode,
    which also checks that the model is one CT can use (``check_logits``). A forward pass that
    fails on a dtype or a number of features that is not the model's says so (``what``,
    ``var`` and ``model_name`` name them: see ``cfbook.inputs``)."""
    rows = x[:PROBE_ROWS].detach()
    if rows.is_floating_point():
        rows = rows.clone().requires_grad_(True)
    with torch.enable_grad(), eval_mode(model):
        try:
            out = model(rows)
        except RuntimeError as err:
            problem = forward_mismatch(model, x, what, var, model_name)
            if problem is None:
                raise
            raise ValueError(problem) from err
    check_logits(out, rows, model_name)
    return class_logits(out).shape[1]


PROBE_ROWS = 8  # rows of the forward pass that checks a model before any work


def check_logits(out: Tensor, rows: Tensor, model_name: str = "the model") -> None:
    """Refuse a model CT cannot train or explain, from its outputs ``out`` on ``rows``: outputs
    that are probabilities (the search and the energy differential need logits, and the
    probability of a probability tops out below most targets), and outputs that no gradient
    connects to the input (the search moves the input along that gradient)."""
    if not isinstance(out, Tensor) or out.ndim != 2:
        got = f"shape {tuple(out.shape)}" if isinstance(out, Tensor) else type(out).__name__
        raise ValueError(
            f"{model_name} must return logits of shape (n_samples, n_classes), or (n_samples, "
            f"1) for a binary model's single logit, got {got} for "
            f"{len(rows)} samples of shape {tuple(rows.shape[1:])}: end its forward pass with "
            "one score per class for each sample (an nn.Flatten() before the last nn.Linear "
            "makes a convolutional model's output flat)"
        )
    if out.shape[1] > 1 and out.is_floating_point():
        values = out.detach().float()
        # Strictly inside (0, 1), as a softmax's outputs are: logits such as a hand-set model's
        # exact 0 and 1 pass.
        in_unit = bool(((values > 0) & (values < 1)).all())
        if in_unit and torch.allclose(values.sum(1), torch.ones(len(values)), atol=1e-4):
            raise ValueError(
                f"{model_name} returns probabilities (every row of its outputs lies in (0, 1) "
                "and sums to 1): counterfactual training and search need logits, the scores "
                "before the softmax. Return logits: remove the final Softmax"
            )
    if not rows.requires_grad:
        return
    connected = out.requires_grad and out.is_floating_point()
    if connected:
        (grad,) = torch.autograd.grad(out.float().sum(), rows, allow_unused=True)
        connected = grad is not None
    if not connected:
        raise ValueError(
            f"no gradient reaches {model_name}'s input from its outputs (a .detach(), .item(), "
            ".numpy(), argmax or torch.no_grad() inside its forward?): counterfactual search "
            "moves the input along the gradient of the logits. Keep the forward pass "
            "differentiable from input to logits"
        )


def check_labelled(
    model: nn.Module,
    x: object,
    y: object,
    *,
    what: str = "x",
    labels: str = "y",
    model_name: str = "the model",
) -> int:
    """``x`` and its labels ``y`` as a model takes them, checked once: float samples (flat rows
    or of any shape), at least one, none NaN or infinite, one integer label each among the
    model's outputs, and a model CT can use (``count_classes``). Returns its number of classes.
    ``what`` and ``labels`` name the data in messages and fixes (``x_test``, ``y_test``)."""
    check_features(x, what, what)
    check_not_empty(x, what, f"pass at least one sample of {what} with its label")
    check_labels(y, x.shape[0], labels, labels, what)
    check_finite(x, what)
    n_classes = count_classes(model, x, what, what, model_name)
    check_label_range(y, n_classes, labels, model_name)
    return n_classes
