"""What a counterfactual search is to the rest of cfbook: the ``Generator`` protocol and the
``CounterfactualResult`` it returns.

The training loop and the evaluation depend on this protocol only, so a search of one's own
plugs in beside ``NativeGenerator`` and ``ReferenceGenerator``: implement ``generate``, and
subclass ``Generator`` to inherit the default ``settings``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import torch
from torch import Tensor, nn

from cfbook.search.constraints import Categorical, Domain, Mutability

_RESULT_FIELDS = ("counterfactual", "nascent", "valid", "iterations")


@dataclass
class CounterfactualResult:
    """Per sample: final point, nascent (adversarial) point, validity, steps taken; and, when the
    search was asked to record them, every iterate (``path``: ``(maxiter + 1, N, ...)``, the
    factuals first)."""

    counterfactual: Tensor
    nascent: Tensor
    valid: Tensor
    iterations: Tensor
    path: Tensor | None = None

    def __len__(self) -> int:
        return self.counterfactual.shape[0]

    @staticmethod
    def cat(parts: list[CounterfactualResult]) -> CounterfactualResult:
        """The results of consecutive chunks of one search, as one."""
        if len(parts) == 1:
            return parts[0]
        paths = [p.path for p in parts]
        return CounterfactualResult(
            *(torch.cat([getattr(p, name) for p in parts]) for name in _RESULT_FIELDS),
            path=None if any(p is None for p in paths) else torch.cat(paths, dim=1),
        )


@runtime_checkable
class Generator(Protocol):
    """A counterfactual search, as ``counterfactual_training`` and the evaluation use it.

    ``generate`` searches one counterfactual per sample of ``x`` (flat rows ``(N, n_features)``
    or samples of any shape ``(N, *shape)``, e.g. images) towards ``target`` (N, integer
    classes), within ``domain`` and ``mutability`` (``None``: unconstrained, every
    feature free; see ``cfbook.search.constraints``), with the one-hot groups ``categorical``
    (sequences of column indices; ``None``: none) decoded to one category each, as
    ``NativeGenerator`` does (a search of one's own that takes no groups may leave the keyword
    out: cfbook passes it only when groups are given). ``settings`` are what decides its results:
    logs record them and a resumed training run must match them.
    """

    def generate(
        self,
        model: nn.Module,
        x: Tensor,
        target: Tensor,
        *,
        domain: Domain = None,
        mutability: Mutability = None,
        categorical: Categorical = None,
    ) -> CounterfactualResult: ...

    def settings(self) -> dict[str, Any]:
        """What decides the search's results (default: the generator's type)."""
        return {"generator": f"{type(self).__module__}.{type(self).__qualname__}"}


def check_generator(generator: object) -> Generator:
    """``generator`` if it implements the protocol; else an error that says what is missing."""
    methods = ("generate", "settings")
    missing = [m for m in methods if not callable(getattr(generator, m, None))]
    if missing:
        raise TypeError(
            f"the generator {type(generator).__name__} has no {', '.join(missing)}: implement "
            "generate(model, x, target, *, domain, mutability[, categorical]) and subclass "
            "cfbook.search.Generator to inherit settings()"
        )
    return generator  # type: ignore[return-value]
