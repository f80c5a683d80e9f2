"""One epoch's counterfactuals (steps 2-8 of Algorithm 1): factuals, targets, the search,
neighbours and mature counterfactuals, all on the training device."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from cfbook.evaluation.metrics import predict
from cfbook.search.constraints import Constraints, Domain, Mutability
from cfbook.search.generators import NativeGenerator, ReferenceGenerator
from cfbook.search.targets import draw_targets, uniform_draws

Generator = NativeGenerator | ReferenceGenerator

#: What a counterfactual whose search did not converge contributes to the loss:
#: ``"neighbour"`` (the CT paper's rule: it is replaced by its neighbour, so its energy
#: differential is zero and only the ridge sees it) or ``"raw"`` (CT.jl's Native branch, which
#: the GPU tutorial runs: the search's last iterate, valid or not).
MATURE = ("neighbour", "raw")


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


def epoch_counterfactuals(
    model: nn.Module,
    generator: Generator,
    x_all: Tensor,
    y_all: Tensor,
    nce: int,
    levels: Tensor,
    neighbours: NeighbourSampler,
    constraints: Constraints,
    domain: Domain,
    mutability: Mutability,
    cf_batchsize: int | None,
    rng: torch.Generator,
    rows: slice | None = None,
    compile: bool | None = None,
    mature: str = "neighbour",
) -> CounterfactualBatch:
    """Search ``nce`` counterfactuals with the model as it stands at the epoch start.

    Every random number of the epoch (factuals, targets, neighbours) is drawn for all ``nce``
    rows before the search. Under DDP each process keeps only its ``rows`` of them: with ``rng``
    seeded alike everywhere, the processes share the search of exactly the counterfactuals one
    process would find, without overlap, and their generators stay in step. ``compile`` is the
    run's decision for a NativeGenerator (see ``NativeGenerator.settle_compile``); ``mature``
    says what a non-converged counterfactual becomes (see ``MATURE``).
    """
    device = x_all.device
    idx = torch.randperm(x_all.shape[0], generator=rng, device=device)[:nce]
    u_target = torch.rand(nce, generator=rng, device=device)
    u_neighbour = torch.rand(nce, generator=rng, device=device)
    if rows is not None:
        idx, u_target, u_neighbour = idx[rows], u_target[rows], u_neighbour[rows]
    x, label = x_all[idx], y_all[idx]
    target = draw_targets(predict(model, x), levels, u_target)
    native = isinstance(generator, NativeGenerator)
    kwargs = {"cf_batchsize": cf_batchsize, "compile": compile} if native else {}
    found = generator.generate(model, x, target, domain=domain, mutability=mutability, **kwargs)
    neighbour = x_all[neighbours(target, u_neighbour)]
    if mature == "raw":
        chosen = found.counterfactual
    else:
        chosen = torch.where(found.valid[:, None], found.counterfactual, neighbour)
    return CounterfactualBatch(
        counterfactual=chosen,
        neighbour=constraints.protect_neighbours(neighbour, chosen),
        nascent=found.nascent,
        target=target,
        label=label,
        valid=found.valid,
        iterations=found.iterations,
        factual_index=idx,
    )
