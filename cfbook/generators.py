"""Counterfactual search with the ECCo-style gradient generator of CounterfactualTraining.jl.

``NativeGenerator`` searches a whole ``N x D`` batch at once on the model's device;
``ReferenceGenerator`` walks one sample at a time and is the oracle the batched search is tested
against.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields

import torch
from torch import Tensor, nn

from cfbook.amp import FP16_GRAD_SCALE, autocast, check_amp
from cfbook.constraints import Constraints, Domain, Mutability, make_constraints

# Strength of the quadratic term in the energy penalty E + ENERGY_RIDGE * E^2.
ENERGY_RIDGE = 1e-3


@dataclass
class CounterfactualResult:
    """Per sample: final point, nascent (adversarial) point, validity, steps taken."""

    counterfactual: Tensor
    nascent: Tensor
    valid: Tensor
    iterations: Tensor

    def __len__(self) -> int:
        return self.counterfactual.shape[0]

    @staticmethod
    def cat(parts: list[CounterfactualResult]) -> CounterfactualResult:
        if len(parts) == 1:
            return parts[0]
        return CounterfactualResult(
            *(torch.cat([getattr(p, name) for p in parts]) for name in _RESULT_FIELDS)
        )


_RESULT_FIELDS = ("counterfactual", "nascent", "valid", "iterations")


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


def model_device(model: nn.Module) -> torch.device | None:
    """The device of the model's first parameter or buffer, if it has any."""
    for tensor in (*model.parameters(), *model.buffers()):
        return tensor.device
    return None


# The generator settings of the CT paper's experiments (CT.jl's ECCo generator); the defaults of
# ``NativeGenerator()`` are those of CT.jl's ``NativeGenerator()``, which the GPU tutorial runs.
PAPER_SEARCH = {"lambda_cost": 0.001, "lambda_energy": 5.0}


@dataclass(frozen=True)
class SearchParameters:
    """Settings shared by both generators; defaults are CT.jl's ``NativeGenerator()``
    (``lambda = [0.1, 1.0]``, plain descent with step 0.1). ``PAPER_SEARCH`` holds the paper's."""

    maxiter: int = 30
    tau: float = 0.75
    lambda_cost: float = 0.1
    lambda_energy: float = 1.0
    step_size: float = 0.1
    epsilon: float = 0.3

    def __post_init__(self) -> None:
        if not isinstance(self.maxiter, int) or self.maxiter < 0:
            raise ValueError(f"maxiter must be a non-negative integer, got {self.maxiter!r}")
        if not 0.0 < self.tau <= 1.0:
            raise ValueError(f"tau must lie in (0, 1], got {self.tau!r}")
        for name in ("lambda_cost", "lambda_energy", "epsilon"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name} must be non-negative, got {getattr(self, name)!r}")
        if not self.step_size > 0:
            raise ValueError(f"step_size must be positive, got {self.step_size!r}")

    def settings(self) -> dict[str, float | int | str | None]:
        """The settings that decide the search's results (not its speed or memory): logs record
        them and a resumed run must match them."""
        return {f.name: getattr(self, f.name) for f in fields(SearchParameters)}

    def energy_weight(self, t: int) -> float:
        """``lambda_energy * phi_t``: the energy penalty decays polynomially over the iterations."""
        b = round(self.maxiter / 25)
        return self.lambda_energy * (b / 10) * (b + t + 1) ** -0.9


def count_classes(model: nn.Module, x: Tensor) -> int:
    """Number of classes the model outputs, from one sample in eval mode."""
    with torch.no_grad(), eval_mode(model):
        return model(x[:1]).shape[1]


def _prepare(
    model: nn.Module, x: Tensor, target: Tensor, domain: Domain, mutability: Mutability
) -> tuple[Tensor, Tensor, Constraints]:
    """Check shapes and classes once, outside the search loop; move inputs to the model's device."""
    if not isinstance(x, Tensor) or x.ndim != 2 or not x.is_floating_point():
        raise ValueError("x must be a floating-point tensor of shape (n_samples, n_features)")
    device = model_device(model) or x.device
    x = x.detach().to(device)
    target = torch.as_tensor(target, device=device)
    if target.shape != (x.shape[0],) or target.is_floating_point():
        raise ValueError(
            f"target must hold one integer class per sample: shape ({x.shape[0]},), "
            f"got {tuple(target.shape)} of {target.dtype}"
        )
    target = target.long()
    if x.shape[0]:
        n_classes = count_classes(model, x)
        low, high = int(target.min()), int(target.max())
        if low < 0 or high >= n_classes:
            raise ValueError(f"target classes must lie in [0, {n_classes - 1}], got {low}..{high}")
    return x, target, make_constraints(domain, mutability, x.shape[1], device=device, dtype=x.dtype)


def _not_converged(probs: Tensor, target: Tensor, tau: float) -> Tensor:
    """Rows whose target probability has not reached ``tau``; a NaN probability never has (as in
    CT.jl, where ``p >= tau`` is false for NaN)."""
    return ~(probs.gather(1, target).squeeze(1) >= tau)


def _update(
    xw: Tensor,
    x0w: Tensor,
    dw: Tensor,
    grad: Tensor,
    active: Tensor,
    nascent: Tensor,
    c: Constraints,
    lambda_cost: float,
    step_size: float,
    epsilon: float,
) -> tuple[Tensor, Tensor, Tensor]:
    """One step of the working set: cost gradient, masked descent, domain clamp, freezing of
    converged rows, nascent tracking. Returns the new point, its offset from x0, and the nascent.

    In place where possible and without a ``where`` over the iterate (converged rows get a zero
    step instead): the eager CPU search is memory-bandwidth bound, so passes over N x D count.
    """
    grad = grad.nan_to_num_(nan=0.0)
    if lambda_cost:
        grad.add_(torch.sign(dw), alpha=lambda_cost)
    row_step = active.to(grad.dtype).mul_(-step_size)
    xw = c.mask_step(grad.mul_(row_step[:, None])).add_(xw)
    if c.lower is not None:
        xw.clamp_(c.lower, c.upper)
    dw = xw - x0w
    within = (dw.amax(1, keepdim=True) <= epsilon) & (dw.amin(1, keepdim=True) >= -epsilon)
    return xw, dw, torch.where(within, xw, nascent)


@functools.cache
def _compiled_update() -> Callable[..., tuple[Tensor, Tensor, Tensor]]:
    return torch.compile(_update, dynamic=True)


@dataclass(frozen=True)
class NativeGenerator(SearchParameters):
    """Batched search: all samples step together, converged ones are frozen and, every
    ``compact_every`` iterations, dropped from the batch so they stop costing compute.

    Inside the loop nothing waits for the device; the only host synchronisations are the
    compaction points. ``cf_batchsize`` bounds the rows searched at once (peak memory).
    ``compile=True`` fuses each iteration's bookkeeping into one kernel with ``torch.compile``
    (worth it when the model is cheap next to that bookkeeping, e.g. an MLP on a CPU).
    """

    cf_batchsize: int | None = None
    compact_every: int = 5
    amp: str | None = None
    compile: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.cf_batchsize is not None and self.cf_batchsize < 1:
            raise ValueError(f"cf_batchsize must be a positive int, got {self.cf_batchsize!r}")
        if self.compact_every < 1:
            raise ValueError(f"compact_every must be a positive int, got {self.compact_every!r}")

    def settings(self) -> dict[str, float | int | str | None]:
        return {**super().settings(), "amp": self.amp}

    def generate(
        self,
        model: nn.Module,
        x: Tensor,
        target: Tensor,
        *,
        domain: Domain = None,
        mutability: Mutability = None,
        cf_batchsize: int | None = None,
    ) -> CounterfactualResult:
        """Search counterfactuals of ``x`` (N x D) for classes ``target`` (N,)."""
        x, target, constraints = _prepare(model, x, target, domain, mutability)
        check_amp(self.amp, x.device)
        chunk = cf_batchsize or self.cf_batchsize or max(x.shape[0], 1)
        with eval_mode(model):
            parts = [
                self._search(model, x[s : s + chunk], target[s : s + chunk], constraints)
                for s in range(0, max(x.shape[0], 1), chunk)
            ]
        return CounterfactualResult.cat(parts)

    def _search(
        self, model: nn.Module, x0: Tensor, target: Tensor, c: Constraints
    ) -> CounterfactualResult:
        n = x0.shape[0]
        x, nascent = x0.clone(), x0.clone()
        active = torch.ones(n, dtype=torch.bool, device=x0.device)
        iterations = torch.zeros(n, dtype=torch.long, device=x0.device)
        rows = torch.arange(n, device=x0.device)
        # The working set: rows still being searched (all of them until the first compaction).
        # dw = xw - x0w is kept between iterations: the cost term's sign and the nascent test
        # share it.
        xw, x0w, tw, aw, nw, iw = x, x0, target[:, None], active, nascent, iterations
        dw = torch.zeros_like(x0)
        scale = FP16_GRAD_SCALE if self.amp == "fp16" else 1.0
        update = _compiled_update() if self.compile else _update
        steps = (self.lambda_cost, self.step_size, self.epsilon)

        @torch.no_grad()
        def write_back() -> None:
            x[rows], nascent[rows], active[rows], iterations[rows] = xw, nw, aw, iw

        compact_at = set(self.compaction_points())
        for t in range(self.maxiter):
            if t in compact_at:
                keep = aw.nonzero().squeeze(1)  # host sync: only at compaction points
                if keep.numel() < rows.numel():
                    write_back()
                    rows = rows[keep]
                    xw, x0w, dw, tw, aw, nw, iw = (v[keep] for v in (xw, x0w, dw, tw, aw, nw, iw))
                if not rows.numel():
                    break
            xw = xw.detach().requires_grad_(True)
            with autocast(self.amp, x0.device):
                logits = model(xw).float()
            with torch.no_grad():
                probs = logits.softmax(1)
                aw = aw & _not_converged(probs, tw, self.tau)
                # d(loss)/d(logits): cross-entropy p - onehot, plus the energy term on the target.
                weight = self.energy_weight(t)
                z_t = logits.gather(1, tw)
                probs.scatter_add_(1, tw, -1.0 - weight * (1.0 - 2 * ENERGY_RIDGE * z_t))
                if scale != 1.0:
                    probs.mul_(scale)
            (grad,) = torch.autograd.grad(logits, xw, probs)
            with torch.no_grad():
                grad = grad.float()
                if scale != 1.0:
                    grad.div_(scale)
                xw, dw, nw = update(xw.detach(), x0w, dw, grad, aw, nw, c, *steps)
                iw = iw + aw
        if rows.numel():
            with torch.no_grad(), autocast(self.amp, x0.device):
                probs = model(xw).float().softmax(1)
            aw = aw & _not_converged(probs, tw, self.tau)
        write_back()
        # Rows that never stepped keep x0 exactly: the zero step still went through the clamp,
        # which moves an x0 outside the domain (the reference never touches such a sample).
        unmoved = (iterations == 0)[:, None]
        x, nascent = torch.where(unmoved, x0, x), torch.where(unmoved, x0, nascent)
        if self.amp is not None:
            # Validity is a promise about the model as it is, in full precision.
            with torch.no_grad():
                probs = model(x).float().softmax(1)
            active = _not_converged(probs, target[:, None], self.tau)
        return CounterfactualResult(x, nascent, ~active, iterations)

    def compaction_points(self) -> list[int]:
        """Iterations before which converged rows leave the batch, each costing one host read of
        the active set: early (1, 2, 4) for samples that converge at once, then every
        ``compact_every`` iterations."""
        return [t for t in range(1, self.maxiter) if t in (1, 2, 4) or t % self.compact_every == 0]


@dataclass(frozen=True)
class ReferenceGenerator(SearchParameters):
    """The same search, one sample at a time with autograd on the full loss: slow and plain,
    the oracle for tests and the baseline for benchmarks."""

    def generate(
        self,
        model: nn.Module,
        x: Tensor,
        target: Tensor,
        *,
        domain: Domain = None,
        mutability: Mutability = None,
    ) -> CounterfactualResult:
        """Search counterfactuals of ``x`` (N x D) for classes ``target`` (N,), sample by sample."""
        x, target, constraints = _prepare(model, x, target, domain, mutability)
        results = []
        with eval_mode(model):
            for i in range(x.shape[0]):
                one = slice(i, i + 1)
                results.append(self._search_one(model, x[one], target[one], constraints))
        if not results:
            return CounterfactualResult(x, x, target.bool(), target)
        return CounterfactualResult(
            *(torch.cat([r[k] for r in results]) for k in range(len(_RESULT_FIELDS)))
        )

    def _converged(self, logits: Tensor, target: Tensor) -> bool:
        return bool(logits.softmax(1)[0, target[0]] >= self.tau)

    def _search_one(
        self, model: nn.Module, x0: Tensor, target: Tensor, c: Constraints
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        x, nascent, steps = x0.clone(), x0.clone(), 0
        for t in range(self.maxiter):
            x.requires_grad_(True)
            logits = model(x)
            if self._converged(logits.detach(), target):
                break
            energy = -logits[0, target[0]]
            loss = (
                nn.functional.cross_entropy(logits, target, reduction="sum")
                + self.lambda_cost * (x - x0).abs().sum()
                + self.energy_weight(t) * (energy + ENERGY_RIDGE * energy**2)
            )
            (grad,) = torch.autograd.grad(loss, x)
            with torch.no_grad():
                step = c.mask_step(-self.step_size * torch.nan_to_num(grad, nan=0.0))
                x = c.clamp(x + step)
            steps += 1
            if (x - x0).abs().max() <= self.epsilon:
                nascent = x.clone()
        with torch.no_grad():
            valid = self._converged(model(x), target)
        return (
            x.detach(),
            nascent,
            torch.tensor([valid], device=x.device),
            torch.tensor([steps], device=x.device),
        )
