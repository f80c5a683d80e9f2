"""One epoch's counterfactuals (steps 2-8 of Algorithm 1): factuals, targets, the search,
neighbours and mature counterfactuals, all on the training device."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from cfbook.errors import warn
from cfbook.evaluation.metrics import predict
from cfbook.inputs import require_int
from cfbook.search.constraints import (
    Categorical,
    Constraints,
    Domain,
    Mutability,
    categorical_groups,
    make_constraints,
)
from cfbook.search.interface import Generator
from cfbook.search.step import rows_like
from cfbook.search.targets import draw_targets, label_levels, uniform_draws
from cfbook.training import distributed

#: What a counterfactual whose search did not converge contributes to the loss:
#: ``"neighbour"`` (the CT paper's rule: it is replaced by its neighbour, so its energy
#: differential is zero and only the ridge sees it) or ``"raw"`` (CT.jl's Native branch, which
#: the GPU tutorial runs: the search's last iterate, valid or not).
MATURE = ("neighbour", "raw")


#: Below this share of the training rows searched per epoch, ``nce`` warns (CT.jl's
#: ``_min_nce_ratio``).
MIN_NCE_RATIO = 0.1


def resolve_nce(nce: int | None, n: int, n_batches: int) -> int:
    """``nce`` checked; CT.jl's default is one counterfactual per mini-batch. Fewer than
    ``MIN_NCE_RATIO`` of the training rows an epoch warns, as CT.jl does."""
    resolved = n_batches if nce is None else _checked_nce(nce, n, n_batches)
    if resolved < MIN_NCE_RATIO * n:
        how = "the default, one per mini-batch" if nce is None else f"nce={nce}"
        warn(
            f"{resolved} counterfactuals an epoch ({how}) are {resolved / n:.1%} of the {n} "
            f"training rows, below the {MIN_NCE_RATIO:.0%} under which CT.jl warns: CT learns "
            f"from few counterfactuals each epoch. Pass nce={math.ceil(MIN_NCE_RATIO * n)} or "
            "more"
        )
    return resolved


def _checked_nce(nce: int, n: int, n_batches: int) -> int:
    require_int("nce", nce)
    if nce > n:
        raise ValueError(f"nce={nce} is larger than the training set ({n} samples)")
    if nce < n_batches:
        warn(
            f"nce={nce} is below the number of mini-batches; raised to {n_batches} so every "
            "batch gets at least one counterfactual"
        )
        nce = n_batches
    return nce


def check_mature(mature: str) -> str:
    if mature not in MATURE:
        raise ValueError(f"mature must be one of {', '.join(map(repr, MATURE))}, got {mature!r}")
    return mature


@dataclass
class CounterfactualBatch:
    """One epoch's search output, aligned row by row (constants for the loss: no gradient)."""

    counterfactual: (
        Tensor  # mature CF: the search result if valid (or mature="raw"), else its neighbour
    )
    neighbour: Tensor
    nascent: Tensor  # adversarial example
    target: Tensor
    label: Tensor  # true label of the factual
    valid: Tensor
    iterations: Tensor
    factual_index: Tensor  # rows of the training set the factuals were drawn from


class NeighbourSampler:
    """Draws, on the device, one training sample whose true label is each requested class."""

    def __init__(self, y: Tensor, n_classes: int):
        self.order = torch.argsort(y, stable=True)
        self.counts = torch.bincount(y, minlength=n_classes)
        self.offsets = torch.cumsum(self.counts, 0) - self.counts
        self.n = y.shape[0]

    def __call__(self, classes: Tensor, rng: torch.Generator | Tensor) -> Tensor:
        """``rng`` draws the uniforms, or is them (one per class requested) when drawn ahead."""
        u = uniform_draws(rng, classes)
        counts = self.counts[classes]
        in_class = self.offsets[classes] + (u * counts).long().clamp(max=counts - 1)
        # A class absent from the data falls back to any sample, as in the Julia package.
        anywhere = (u * self.n).long().clamp(max=self.n - 1)
        return self.order[torch.where(counts > 0, in_class, anywhere)]


def chunk_bounds(nce: int, n_batches: int) -> list[slice]:
    """Contiguous chunks of the nce counterfactuals, one per mini-batch, sizes differing by <= 1."""
    base, extra = divmod(nce, n_batches)
    bounds, start = [], 0
    for b in range(n_batches):
        stop = start + base + (b < extra)
        bounds.append(slice(start, stop))
        start = stop
    return bounds


@dataclass
class EpochSearch:
    """What a run's epochs need to search counterfactuals: the generator, the draws' classes and
    neighbours, the constraints, and each mini-batch's chunk of the ``nce`` counterfactuals."""

    generator: Generator
    nce: int
    rows: slice | None  # this process's share of the nce counterfactuals under DDP
    chunks: list[slice]
    levels: Tensor
    neighbours: NeighbourSampler
    constraints: Constraints
    domain: Domain
    mutability: Mutability
    mature: str
    categorical: list[list[int]] | None = None  # one-hot groups decoded by the search


def epoch_search(
    generator: Generator,
    x_all: Tensor,
    y_all: Tensor,
    *,
    nce: int,
    domain: Domain,
    mutability: Mutability,
    mature: str,
    n_batches: int,
    n_classes: int,
    world_size: int = 1,
    categorical: Categorical = None,
) -> EpochSearch:
    """The search of a run that searches: the constraints on the device (one-hot groups
    ``categorical`` checked), and each process's share (under DDP, ``world_size`` processes) and
    chunks of the ``nce`` counterfactuals."""
    rows = distributed.shard_rows(nce) if world_size > 1 else None
    return EpochSearch(
        generator=generator,
        nce=nce,
        rows=rows,
        chunks=chunk_bounds(nce if rows is None else rows.stop - rows.start, n_batches),
        levels=label_levels(y_all),
        neighbours=NeighbourSampler(y_all, n_classes),
        constraints=make_constraints(
            domain, mutability, x_all.shape[1:], device=x_all.device, categorical=categorical
        ),
        domain=domain,
        mutability=mutability,
        mature=mature,
        categorical=categorical_groups(categorical, x_all[0].numel()) or None,
    )


def epoch_counterfactuals(
    model: nn.Module, x_all: Tensor, y_all: Tensor, search: EpochSearch, rng: torch.Generator
) -> CounterfactualBatch:
    """Search ``search.nce`` counterfactuals with the model as it stands at the epoch start.

    Every random number of the epoch (factuals, targets, neighbours) is drawn for all ``nce``
    rows before the search. Under DDP each process keeps only its ``rows`` of them: with ``rng``
    seeded alike everywhere, the processes share the search of exactly the counterfactuals one
    process would find, without overlap, and their generators stay in step. ``search.mature``
    says what a non-converged counterfactual becomes (see ``MATURE``).
    """
    device, nce, rows = x_all.device, search.nce, search.rows
    idx = torch.randperm(x_all.shape[0], generator=rng, device=device)[:nce]
    u_target = torch.rand(nce, generator=rng, device=device)
    u_neighbour = torch.rand(nce, generator=rng, device=device)
    if rows is not None:
        idx, u_target, u_neighbour = idx[rows], u_target[rows], u_neighbour[rows]
    x, label = x_all[idx], y_all[idx]
    target = draw_targets(predict(model, x), search.levels, u_target)
    # Only a search with one-hot groups needs the keyword: other generators keep working.
    groups = {} if search.categorical is None else {"categorical": search.categorical}
    found = search.generator.generate(
        model, x, target, domain=search.domain, mutability=search.mutability, **groups
    )
    neighbour = x_all[search.neighbours(target, u_neighbour)]
    if search.mature == "raw":
        chosen = found.counterfactual
    else:
        chosen = torch.where(rows_like(found.valid, neighbour), found.counterfactual, neighbour)
    return CounterfactualBatch(
        counterfactual=chosen,
        neighbour=search.constraints.protect_neighbours(neighbour, chosen),
        nascent=found.nascent,
        target=target,
        label=label,
        valid=found.valid,
        iterations=found.iterations,
        factual_index=idx,
    )
