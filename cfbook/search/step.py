"""One iteration of the batched counterfactual search, written once.

``search_step`` is a pure function of tensors: it takes the rows still searched
(``SearchState``) and returns them one step later. It holds the whole update: the loss gradient
on the logits (cross-entropy and the energy term), the input gradient, the NaN guard, the cost
term, the mutability mask, the domain clamp, the decoding of one-hot groups, the nascent point
and the convergence test. Two executors run it (``cfbook.search.generators``): eagerly, as plain
PyTorch (any model, any device, autocast), and compiled by ``torch.compile``
(``cfbook.search.compiled``). ``ReferenceGenerator`` is the per-sample oracle both are held to.

With one-hot groups (``StepLayout.categorical``) the model, the cost and the convergence test see
the decoded point, the gradient there is applied to the state unchanged (straight through the
decoding) and, when ``frozen``, the state is overwritten by its decoding after each step (see
``cfbook.search.constraints.CategoricalCode``).

The rows are flat, ``(n, n_features)``, or samples of any shape, ``(n, *shape)`` such as images,
which the model takes as they are: the constraints have one sample's shape and broadcast, and the
per-row tests (epsilon, convergence) reduce over everything but the first dimension.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch
from torch import Tensor, nn

from cfbook.amp import FP16_GRAD_SCALE, autocast
from cfbook.search.constraints import CategoricalCode
from cfbook.search.logits import class_logits

# Strength of the quadratic term in the energy penalty E + ENERGY_RIDGE * E^2.
ENERGY_RIDGE = 1e-3


@dataclass(frozen=True)
class StepLayout:
    """What every iteration of one search shares besides its rows: the domain's bounds, the
    mutability as per-feature bounds on the step (0 where a direction is forbidden, infinite
    elsewhere), the one-hot groups and how the state passes their decoding, whether there is a
    cost term, and the autocast precision (fp16: logit gradients are scaled up by
    ``FP16_GRAD_SCALE`` before the backward pass)."""

    bounds: tuple[Tensor, Tensor] | None = None
    step_bounds: tuple[Tensor, Tensor] | None = None
    categorical: CategoricalCode | None = None
    frozen: bool = True
    with_cost: bool = True
    amp: str | None = None

    def decode(self, x: Tensor) -> Tensor:
        """``x`` with its one-hot groups decoded; ``x`` itself when there are none."""
        return x if self.categorical is None else self.categorical.decode(x)


@dataclass
class SearchState:
    """The rows still searched, aligned: their search state and their place in the chunk.

    ``nascent`` is kept lazily: a row whose point lies within epsilon of its factual
    (``within``) has that point as its nascent point, so ``nascent`` holds only the last such
    point of rows that have left the ball (``resolve_nascent``). ``energy`` holds each row's
    energy weight at every iteration when the rows have their own (``(n, maxiter)``), so that
    it follows them through compaction; None: one weight for all rows.
    """

    x: Tensor
    x0: Tensor
    target: Tensor  # (n, 1)
    active: Tensor
    nascent: Tensor
    within: Tensor
    iterations: Tensor
    rows: Tensor | None = None
    energy: Tensor | None = None

    @classmethod
    def start(
        cls, x0: Tensor, target: Tensor, layout: StepLayout, epsilon: float, energy: Tensor | None
    ) -> SearchState:
        """The rows before the first step. With one-hot groups the first point the model sees
        is the decoded factual; it is the first nascent point only if it lies within epsilon
        of the factual (else the factual is)."""
        n, device = x0.shape[0], x0.device
        within = torch.ones(n, dtype=torch.bool, device=device)
        if layout.categorical is not None:
            within = (layout.decode(x0) - x0).abs().flatten(1).amax(1) <= epsilon
        # Copies: no input of a compiled step may share memory with another or be a view of a
        # larger tensor (a chunk of the rows), as the rows after a compaction are not; torch.compile
        # would specialise on it and compile again.
        return cls(
            x=x0.clone(),
            x0=x0.clone(),
            target=target[:, None].clone(),
            active=torch.ones(n, dtype=torch.bool, device=device),
            nascent=x0.clone(),
            within=within,
            iterations=torch.zeros(n, dtype=torch.long, device=device),
            rows=torch.arange(n, device=device),
            energy=energy,
        )

    def __len__(self) -> int:
        return self.x.shape[0]

    def select(self, keep: Tensor) -> SearchState:
        """The rows ``keep`` (indices into this state)."""
        return SearchState(
            *(None if (v := getattr(self, f.name)) is None else v[keep] for f in fields(self))
        )

    def resolve_nascent(self, layout: StepLayout) -> Tensor:
        """Every row's nascent point: its decoded point where it lies within epsilon."""
        return torch.where(rows_like(self.within, self.x), layout.decode(self.x), self.nascent)


def rows_like(mask: Tensor, x: Tensor) -> Tensor:
    """A per-row ``mask`` (n,) shaped to broadcast over the rows of ``x`` (n, ...), flat rows or
    samples of any shape."""
    return mask.reshape(-1, *(1,) * (x.ndim - 1))


# What a step changes in a search's state; the rest stays as the search started.
RESULTS = ("x", "active", "nascent", "within", "iterations")


def reached(probs: Tensor, target: Tensor, tau: float | Tensor) -> Tensor:
    """Rows whose target probability has reached ``tau``; a NaN probability never has (as in
    CT.jl, where ``p >= tau`` is false for NaN)."""
    return probs.gather(1, target).squeeze(1) >= tau


def logit_gradient(logits: Tensor, probs: Tensor, target: Tensor, phi: Tensor) -> Tensor:
    """d(loss)/d(logits) per row: cross-entropy's ``p - onehot`` plus the derivative of the
    energy term ``phi * (E + ENERGY_RIDGE * E^2)`` with ``E = -z_target``, both in the target
    column alone."""
    z_t = logits.gather(1, target)
    term = -1.0 - phi * (1.0 - 2 * ENERGY_RIDGE * z_t)
    is_target = torch.arange(logits.shape[1], device=logits.device) == target
    return torch.where(is_target, probs + term, probs)


def search_step(
    model: nn.Module, state: SearchState, phi: Tensor, scalars: Tensor, layout: StepLayout
) -> SearchState:
    """One iteration: ``state`` one step later (call it under ``torch.no_grad()``).

    ``phi`` is the energy weight, 0-d or one per row (``(n, 1)``); ``scalars`` holds tau,
    lambda_cost, step_size and epsilon as one tensor (``step_scalars``), so that a
    compiled step reads them at run time rather than compiling them in. A row that has reached
    tau keeps its point exactly and stops counting iterations.
    """
    tau, lambda_cost, step_size, epsilon = scalars.unbind()
    x, x0, target = state.x, state.x0, state.target
    point = layout.decode(x)

    def forward(p: Tensor) -> Tensor:
        with autocast(layout.amp, p.device):
            return class_logits(model(p)).float()

    logits, pullback = torch.func.vjp(forward, point)
    probs = logits.softmax(1)
    still = state.active & ~reached(probs, target, tau)
    dlogits = logit_gradient(logits, probs, target, phi)
    if layout.amp == "fp16":
        (grad,) = pullback(dlogits * FP16_GRAD_SCALE)
        grad = grad.to(x.dtype) / FP16_GRAD_SCALE
    else:
        (grad,) = pullback(dlogits)
        grad = grad.to(x.dtype)
    # In place on the step's own temporaries: an eager step then touches fewer fresh pages.
    grad.nan_to_num_(nan=0.0)
    if layout.with_cost:  # the L1 cost's gradient: lambda_cost * sign(point - x0), exactly
        grad.add_((point - x0).sign_().mul_(lambda_cost))
    step = grad.mul_(-step_size)
    if layout.step_bounds is not None:
        step.clamp_(*layout.step_bounds)
    new = step.add_(x)  # x + step
    if layout.bounds is not None:
        new.clamp_(*layout.bounds)
    moving = rows_like(still, x)
    if layout.categorical is None:
        new_point = new = torch.where(moving, new, x)
    else:
        moved = layout.decode(new)
        new_point = torch.where(moving, moved, point)
        new = torch.where(moving, moved if layout.frozen else new, x)
    return SearchState(
        x=new,
        x0=x0,
        target=target,
        active=still,
        nascent=torch.where(rows_like(state.within, x), point, state.nascent),
        within=(new_point - x0).abs_().flatten(1).amax(1) <= epsilon,
        iterations=state.iterations + still,
        rows=state.rows,
        energy=state.energy,
    )


def step_scalars(
    tau: float, lambda_cost: float, step_size: float, epsilon: float, like: Tensor
) -> Tensor:
    """(tau, lambda_cost, step_size, epsilon) as the tensor ``search_step`` takes, in the dtype
    and on the device of the search's rows ``like`` (a float64 search steps by float64 numbers)."""
    values = [tau, lambda_cost, step_size, epsilon]
    return torch.tensor(values, dtype=like.dtype, device=like.device)
