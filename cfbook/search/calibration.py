"""How often a search reaches its target on a model, measured on a probe of a few rows, and the
step size that makes it reach a wanted share.

CT learns from valid counterfactuals: under the paper's rule an invalid one is replaced by its
neighbour and adds nothing to the energy term. Whether a search converges depends on the model
(the scale of its logits, the shape of its decision surface) as much as on the search, so the
step that works is measured on the model, not assumed: ``probe_validity`` measures a generator on
a probe, ``calibrate_search`` picks the step size, and ``counterfactual_training`` probes once,
before its first search epoch, warning with a step measured to work on that model where its own
generator's would leave most counterfactuals invalid.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch
from torch import Tensor, nn

from cfbook.search.checks import count_classes, eval_mode
from cfbook.search.constraints import Categorical, Domain, Mutability
from cfbook.search.generators import SearchParameters
from cfbook.search.interface import Generator
from cfbook.search.logits import class_logits

__all__ = ["PROBE_SEARCH_ROWS", "STEP_SIZES", "StepProbe", "calibrate_search", "probe_validity"]

#: Rows a probe searches: enough to tell a search that mostly fails from one that mostly succeeds,
#: few enough to cost a fraction of an epoch.
PROBE_SEARCH_ROWS = 64
#: The step sizes ``calibrate_search`` tries, smallest first (CT.jl's default, 0.1, included).
STEP_SIZES = (0.1, 0.25, 0.5, 1.0, 2.0)


def _probe(model: nn.Module, x: Tensor, rows: int, seed: int) -> tuple[Tensor, Tensor]:
    """Up to ``rows`` rows of ``x``, drawn with a generator of their own (the caller's random
    state is left alone), and a target for each: a class the model does not predict, uniformly."""
    g = torch.Generator().manual_seed(seed)
    pick = torch.randperm(x.shape[0], generator=g)[:rows].to(x.device)
    probe = x[pick]
    n_classes = count_classes(model, probe)
    with torch.no_grad(), eval_mode(model):
        predicted = class_logits(model(probe)).argmax(1)
    shift = torch.randint(1, n_classes, (probe.shape[0],), generator=g).to(x.device)
    return probe, (predicted + shift) % n_classes


def _validity(generator: Generator, model: nn.Module, x: Tensor, target: Tensor, **kw) -> float:
    constraints = {k: v for k, v in kw.items() if v is not None or k != "categorical"}
    return float(generator.generate(model, x, target, **constraints).valid.float().mean())


def probe_validity(
    generator: Generator,
    model: nn.Module,
    x: Tensor,
    *,
    domain: Domain = None,
    mutability: Mutability = None,
    categorical: Categorical = None,
    rows: int = PROBE_SEARCH_ROWS,
    seed: int = 0,
) -> float:
    """The share of ``rows`` rows of ``x`` (drawn with ``seed``) whose search by ``generator``
    reaches a target drawn among the classes the model does not predict."""
    probe, target = _probe(model, x, rows, seed)
    return _validity(
        generator,
        model,
        probe,
        target,
        domain=domain,
        mutability=mutability,
        categorical=categorical,
    )


@dataclass(frozen=True)
class StepProbe:
    """One measured step size: the share of the probe's searches that reached their target."""

    step_size: float
    validity: float


def calibrate_search(
    model: nn.Module,
    x: Tensor,
    *,
    generator: SearchParameters | None = None,
    validity: float = 0.9,
    domain: Domain = None,
    mutability: Mutability = None,
    categorical: Categorical = None,
    step_sizes: Sequence[float] = STEP_SIZES,
    rows: int = 256,
    seed: int = 0,
) -> tuple[SearchParameters, list[StepProbe]]:
    """The smallest of ``step_sizes`` whose searches reach their target for at least
    ``validity`` of a probe of ``rows`` rows of ``x`` (targets drawn among the classes ``model``
    does not predict), as ``generator`` (default ``NativeGenerator()``) with that step; with
    the measurements, one ``StepProbe`` per step tried.

    Smaller steps come first because they stop nearer the factual (cheaper, closer
    counterfactuals); the search stops trying at the first step that is enough. If none is
    enough, the step with the highest validity is returned: the measurements say by how much it
    falls short (then raise ``maxiter``, lower ``tau`` or ``lambda_cost``). Calibrate on the
    model as training will search it, e.g. after burn-in epochs, since an untrained model's
    small logits are hard to move. The step chosen is part of the generator's settings, and so
    of a training run's identity."""
    from cfbook.search.generators import NativeGenerator

    base = NativeGenerator() if generator is None else generator
    if not isinstance(base, SearchParameters):
        raise TypeError(
            "calibrate_search tunes the step of cfbook's generators (NativeGenerator, "
            f"ReferenceGenerator), got {type(base).__name__}"
        )
    if not 0 < validity <= 1:
        raise ValueError(f"validity must be a share in (0, 1], got {validity!r}")
    probe, target = _probe(model, x, rows, seed)
    measured: list[StepProbe] = []
    for step in sorted(step_sizes):
        share = _validity(
            replace(base, step_size=step),
            model,
            probe,
            target,
            domain=domain,
            mutability=mutability,
            categorical=categorical,
        )
        measured.append(StepProbe(step, share))
        if share >= validity:
            break
    best = next((m for m in measured if m.validity >= validity), None)
    best = best or max(measured, key=lambda m: m.validity)
    return replace(base, step_size=best.step_size), measured
