"""One score per class from a model's output; a binary model with a single output is read as
two classes.

A model with one output per sample (a logit ``z``, as trained with ``BCEWithLogitsLoss``) gives
class 1 the probability ``sigmoid(z)``. Read as the two logits ``(-z/2, z/2)``, the softmax gives
exactly that, cross-entropy is the binary cross-entropy of ``z``, and each class's logit, which
CT's energy term and its ridge use, moves with ``z`` alike: the energy differential trains
towards both classes, where ``(0, z)`` would hold class 0's energy constant. Every place cfbook
reads a model's outputs (search, training, evaluation, attacks) reads them through
``class_logits``.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["class_logits"]


def class_logits(out: Tensor) -> Tensor:
    """``out`` (n, classes) as it is, or a single logit per sample (n, 1) as ``(-z/2, z/2)``."""
    if out.ndim == 2 and out.shape[1] == 1:
        half = out * 0.5
        return torch.cat([-half, half], 1)
    return out
