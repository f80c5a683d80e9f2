"""Counterfactual search with the ECCo-style gradient generator of CounterfactualTraining.jl.

``NativeGenerator`` searches a whole batch (flat rows or samples of any shape) at once on the
model's device; ``ReferenceGenerator`` walks one sample at a time and is the oracle the batched
search is tested against. Both implement ``cfbook.search.interface.Generator``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace

import torch
from torch import Tensor, nn

from cfbook.amp import autocast, check_amp
from cfbook.inputs import check_features, check_finite, check_labels, require_int, require_number
from cfbook.search import compiled as compiled_step
from cfbook.search.checks import count_classes, eval_mode
from cfbook.search.constraints import (
    CATEGORICAL_GRADIENTS,
    Categorical,
    Constraints,
    Domain,
    Mutability,
    make_constraints,
)
from cfbook.search.interface import CounterfactualResult, Generator
from cfbook.search.logits import class_logits
from cfbook.search.step import (
    ENERGY_RIDGE,
    RESULTS,
    SearchState,
    StepLayout,
    reached,
    search_step,
    step_scalars,
)

# Without cf_batchsize, a search on a CPU runs in chunks of equal size, as few as hold at most
# this many numbers (rows x features) each, or CPU_CHUNK_MIN_ROWS rows where features are many:
# past it the working set outgrows the processor's caches and a search of many rows in one
# batch is slower than in chunks (benchmarks/README.md). Elsewhere a search is one batch.
CPU_CHUNK_ELEMENTS = 2**22
CPU_CHUNK_MIN_ROWS = 1024


def chunk_rows(cf_batchsize: int | None, x: Tensor) -> int:
    """How many rows of ``x`` a search takes at once: ``cf_batchsize`` where set, else all of
    them, split on a CPU into equal chunks of at most ``CPU_CHUNK_ELEMENTS`` numbers."""
    if cf_batchsize:
        return cf_batchsize
    n = max(x.shape[0], 1)
    if x.device.type != "cpu":
        return n
    limit = max(CPU_CHUNK_ELEMENTS // max(math.prod(x.shape[1:]), 1), CPU_CHUNK_MIN_ROWS)
    parts = -(-n // limit)
    return -(-n // parts)


def model_device(model: nn.Module) -> torch.device | None:
    """The device of the model's first parameter or buffer, if it has any."""
    for tensor in (*model.parameters(), *model.buffers()):
        return tensor.device
    return None


# The generator settings of the CT paper's experiments (CT.jl's ECCo generator); the defaults of
# ``NativeGenerator()`` are those of CT.jl's ``NativeGenerator()``, which the GPU tutorial runs.
PAPER_SEARCH = {"lambda_cost": 0.001, "lambda_energy": 5.0}


@dataclass(frozen=True)
class SearchParameters(Generator):
    """Settings shared by both generators; defaults are CT.jl's ``NativeGenerator()``
    (``lambda = [0.1, 1.0]``, plain descent with step 0.1). ``PAPER_SEARCH`` holds the paper's.

    ``categorical_gradient`` matters only to searches given one-hot groups
    (``generate(..., categorical=groups)``; see ``cfbook.search.constraints.CategoricalCode``):
    either way the model, the cost and the convergence check see each group decoded to its
    largest entry and the gradient there is applied to the search state unchanged;
    ``"frozen"`` (default, as CounterfactualExplanations.jl's ``update!`` re-encodes the decoded
    counterfactual as the state each step) then overwrites the state by its decoding,
    ``"straight_through"`` keeps it continuous. ``settings()`` names it only when it is not the
    default, so that the identity of runs recorded before it existed stays the same."""

    maxiter: int = 30
    tau: float = 0.75
    lambda_cost: float = 0.1
    lambda_energy: float = 1.0
    step_size: float = 0.1
    epsilon: float = 0.3
    categorical_gradient: str = "frozen"

    def __post_init__(self) -> None:
        require_int("maxiter", self.maxiter, minimum=0)
        require_number("tau", self.tau, "a number in (0, 1]", lambda v: 0.0 < v <= 1.0)
        for name in ("lambda_cost", "lambda_energy", "epsilon"):
            require_number(name, getattr(self, name), "a non-negative number", lambda v: v >= 0)
        require_number("step_size", self.step_size, "a positive number", lambda v: v > 0)
        if self.categorical_gradient not in CATEGORICAL_GRADIENTS:
            raise ValueError(
                f"categorical_gradient must be one of {', '.join(CATEGORICAL_GRADIENTS)}, "
                f"got {self.categorical_gradient!r}"
            )

    def settings(self) -> dict[str, float | int | str | None]:
        """The settings that decide the search's results (not its speed or memory): logs record
        them and a resumed run must match them (``categorical_gradient`` only when it is not
        ``"frozen"``)."""
        out = {f.name: getattr(self, f.name) for f in fields(SearchParameters)}
        if out["categorical_gradient"] == "frozen":
            del out["categorical_gradient"]
        return out

    @property
    def frozen(self) -> bool:
        """Whether one-hot groups are overwritten by their decoding after each step."""
        return self.categorical_gradient == "frozen"

    def _schedule(self, t: int) -> tuple[float, float]:
        """``phi_t = a * decay_t``, as ``(a, decay_t)``: the energy penalty decays polynomially
        over the iterations."""
        b = round(self.maxiter / 25)
        return b / 10, (b + t + 1) ** -0.9

    def energy_weight(self, t: int) -> float:
        """``lambda_energy * phi_t``."""
        a, decay = self._schedule(t)
        return self.lambda_energy * a * decay

    def row_energy_weights(self, lambda_energy: Tensor) -> Tensor:
        """``energy_weight(t)`` for rows with their own ``lambda_energy`` (N,): ``(N, maxiter)``
        float32, each entry the float32 of the float64 product that ``energy_weight`` forms, so
        that a row searches exactly as it would in a search of its own weight."""
        weights = lambda_energy.to("cpu", torch.float64)
        columns = [weights * a * decay for a, decay in map(self._schedule, range(self.maxiter))]
        table = torch.stack(columns, 1) if columns else weights[:, None][:, :0]
        return table.float()


def prepare_search(
    model: nn.Module,
    x: Tensor,
    target: Tensor,
    domain: Domain,
    mutability: Mutability,
    categorical: Categorical = None,
) -> tuple[Tensor, Tensor, Constraints]:
    """Check shapes, dtypes, values and classes once, outside the search loop (a NaN or an
    infinity in ``x`` is refused, as in training and evaluation); move the inputs to the model's
    device and turn ``domain``, ``mutability`` and ``categorical`` into device tensors."""
    check_features(x)
    device = model_device(model) or x.device
    x = x.detach().to(device)
    check_finite(x, "x")
    target = torch.as_tensor(target, device=device)
    check_labels(target, x.shape[0], "target", "target", "x")
    target = target.long()
    if x.shape[0]:
        n_classes = count_classes(model, x)
        low, high = (int(v) for v in torch.stack([target.min(), target.max()]).tolist())
        if low < 0 or high >= n_classes:
            raise ValueError(f"target classes must lie in [0, {n_classes - 1}], got {low}..{high}")
    constraints = make_constraints(
        domain, mutability, x.shape[1:], device=device, dtype=x.dtype, categorical=categorical
    )
    return x, target, constraints


def row_weights(lambda_energy: Tensor | Sequence[float] | None, n: int) -> Tensor | None:
    """Per-row energy weights checked once: one finite, non-negative number per row of x."""
    if lambda_energy is None:
        return None
    weights = torch.as_tensor(lambda_energy).detach().to("cpu", torch.float64)
    if weights.shape != (n,):
        raise ValueError(
            f"lambda_energy must hold one energy weight per row of x ({n}), got shape "
            f"{tuple(weights.shape)}: pass a sequence or a 1-d tensor of length {n}, or None"
        )
    bad = ~(weights >= 0) | weights.isinf()
    if bad.any():
        rows = bad.nonzero().flatten()[:5].tolist()
        raise ValueError(
            f"lambda_energy must be finite and non-negative, got {weights[rows].tolist()} at "
            f"rows {rows}"
        )
    return weights


@dataclass(frozen=True)
class NativeGenerator(SearchParameters):
    """Batched search: all samples step together, converged ones are frozen and, every
    ``compact_every`` iterations, dropped from the batch so they stop costing compute.

    Inside the loop nothing waits for the device; the only host synchronisations are the
    compaction points. ``cf_batchsize`` bounds the rows searched at once (peak memory); without
    it a search on a CPU splits into chunks of at most ``CPU_CHUNK_ELEMENTS`` numbers and
    elsewhere searches all rows at once.

    Each iteration is ``cfbook.search.step.search_step``. ``compile=False`` (default) runs it
    eagerly: plain PyTorch, any model, any device, the path to read and debug. ``compile=True``
    runs it compiled by ``torch.compile`` (float32 without ``amp``, on a CPU or a CUDA GPU):
    faster for small models searched over many rows and many searches, after a compile of
    seconds per process; the results agree with the eager ones to float rounding. A model that
    fails to compile warns once and is searched eagerly from then on. ``compile`` decides
    results to the last bit, so a run's identity records it (``settings``).
    """

    cf_batchsize: int | None = None
    compact_every: int = 5
    amp: str | None = None
    compile: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        require_int("cf_batchsize", self.cf_batchsize, or_none=True)
        require_int("compact_every", self.compact_every)
        if not isinstance(self.compile, bool):
            raise ValueError(f"compile must be True or False, got {self.compile!r}")

    def settings(self) -> dict[str, float | int | str | None]:
        """``SearchParameters.settings`` with ``amp``, and ``compile`` when it is True."""
        out = {**super().settings(), "amp": self.amp}
        if self.compile:
            out["compile"] = True
        return out

    def generate(
        self,
        model: nn.Module,
        x: Tensor,
        target: Tensor,
        *,
        domain: Domain = None,
        mutability: Mutability = None,
        categorical: Categorical = None,
        record: bool = False,
        lambda_energy: Tensor | Sequence[float] | None = None,
    ) -> CounterfactualResult:
        """Search counterfactuals of ``x`` for classes ``target`` (N,): flat rows ``(N,
        n_features)`` or samples of any shape ``(N, *shape)``, such as images, which the model
        takes as they are (``domain`` and ``mutability``: see ``cfbook.search.constraints``).

        ``categorical``: the one-hot groups (sequences of column indices), decoded at every
        step (see ``SearchParameters`` and ``cfbook.search.constraints.CategoricalCode``).
        ``record=True`` keeps every iterate in ``result.path`` (for pictures of the search): the
        eager step without compaction, so every row steps ``maxiter`` times (a converged row
        stays where it stopped) and the results are those of ``compile=False``; with groups the
        iterates after the factuals are decoded. ``lambda_energy``: one energy weight per row
        (N,), in place of the generator's own: rows of several energy weights searched in one
        batch, each as in a search of its own weight."""
        x, target, constraints = prepare_search(model, x, target, domain, mutability, categorical)
        check_amp(self.amp, x.device)
        weights = row_weights(lambda_energy, x.shape[0])
        energy = None if weights is None else self.row_energy_weights(weights).to(x.device)
        layout = self.layout(constraints, x.dtype)
        chunk = chunk_rows(self.cf_batchsize, x)
        with eval_mode(model):
            parts = [
                self._search(
                    model,
                    x[s : s + chunk],
                    target[s : s + chunk],
                    layout,
                    record,
                    None if energy is None else energy[s : s + chunk],
                )
                for s in range(0, max(x.shape[0], 1), chunk)
            ]
        return CounterfactualResult.cat(parts)

    def layout(self, c: Constraints, dtype: torch.dtype) -> StepLayout:
        """What every step of a search under ``c`` shares (``StepLayout``)."""
        return StepLayout(
            bounds=c.bounds(),
            step_bounds=c.step_bounds(dtype),
            categorical=c.categorical,
            frozen=self.frozen,
            with_cost=self.lambda_cost != 0,
            amp=self.amp,
        )

    def _search(
        self,
        model: nn.Module,
        x0: Tensor,
        target: Tensor,
        layout: StepLayout,
        record: bool,
        energy: Tensor | None = None,
    ) -> CounterfactualResult:
        compiled = self.compile and not record and compiled_step.supported(model, x0, self.amp)
        scalars = step_scalars(self.tau, self.lambda_cost, self.step_size, self.epsilon, x0)
        phis = [
            torch.tensor(self.energy_weight(t), dtype=x0.dtype, device=x0.device)
            for t in range(self.maxiter)
        ]
        state = SearchState.start(x0, target, layout, self.epsilon, energy)
        # Every row's results: rows that leave the batch at a compaction point are written here.
        done = replace(state, **{name: getattr(state, name).clone() for name in RESULTS})
        compact_at = set() if record else set(self.compaction_points())
        path = [x0.clone()] if record else None
        for t in range(self.maxiter):
            if t in compact_at:
                keep = state.active.nonzero().squeeze(1)  # host sync: only at compaction points
                if keep.numel() < len(state):
                    _write_back(done, state)
                    state = state.select(_at_least_two(keep, len(state)) if compiled else keep)
                if not len(state):
                    break
            # A copy, not a view of the weights (see SearchState.start).
            phi = phis[t] if state.energy is None else state.energy[:, t : t + 1].contiguous()
            with torch.no_grad():
                stepped = None
                if compiled:
                    stepped = compiled_step.step(model, state, phi, scalars, layout)
                    compiled = stepped is not None
                if stepped is None:
                    stepped = search_step(model, state, phi, scalars, layout)
            state = stepped
            if path is not None:
                path.append(layout.decode(state.x))
        with torch.no_grad():
            if len(state):
                with autocast(self.amp, x0.device):
                    probs = class_logits(model(layout.decode(state.x))).float().softmax(1)
                state.active = state.active & ~reached(probs, state.target, self.tau)
            _write_back(done, state)
            nascent = done.resolve_nascent(layout)
            x = layout.decode(done.x)  # the counterfactual: the search state decoded
            active = done.active
            if self.amp is not None:
                # Validity is a promise about the model as it is, in full precision.
                probs = class_logits(model(x)).float().softmax(1)
                active = ~reached(probs, target[:, None], self.tau)
        return CounterfactualResult(
            x, nascent, ~active, done.iterations, None if path is None else torch.stack(path)
        )

    def compaction_points(self) -> list[int]:
        """Iterations before which converged rows leave the batch, each costing one host read of
        the active set: early (1, 2, 4) for samples that converge at once, then every
        ``compact_every`` iterations."""
        return [t for t in range(1, self.maxiter) if t in (1, 2, 4) or t % self.compact_every == 0]


def _write_back(done: SearchState, state: SearchState) -> None:
    """Copy the rows of ``state`` into the chunk's results ``done``, at their places."""
    for name in RESULTS:
        getattr(done, name)[state.rows] = getattr(state, name)


def _at_least_two(keep: Tensor, n: int) -> Tensor:
    """``keep`` with a second, converged row when only one is left: the compiled step treats the
    row count as a size, and a single row would be specialised and compiled again. The extra
    row keeps its point and is written back unchanged."""
    if keep.numel() != 1 or n < 2:
        return keep
    return torch.cat([keep, (keep + 1) % n])


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
        categorical: Categorical = None,
        lambda_energy: Tensor | Sequence[float] | None = None,
    ) -> CounterfactualResult:
        """Search counterfactuals of ``x`` (``(N, ...)``) for classes ``target`` (N,), sample by
        sample (``categorical`` and ``lambda_energy``: as ``NativeGenerator.generate``)."""
        x, target, constraints = prepare_search(model, x, target, domain, mutability, categorical)
        weights = row_weights(lambda_energy, x.shape[0])
        results = []
        with eval_mode(model):
            for i in range(x.shape[0]):
                one = slice(i, i + 1)
                own = self if weights is None else replace(self, lambda_energy=float(weights[i]))
                results.append(own._search_one(model, x[one], target[one], constraints))
        if not results:
            return CounterfactualResult(x, x, target.bool(), target)
        return CounterfactualResult(*(torch.cat(parts) for parts in zip(*results, strict=True)))

    def _converged(self, logits: Tensor, target: Tensor) -> bool:
        return bool(logits.softmax(1)[0, target[0]] >= self.tau)

    def _search_one(
        self, model: nn.Module, x0: Tensor, target: Tensor, c: Constraints
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        x, nascent, steps = x0.clone(), x0.clone(), 0
        point = c.decode(x0)
        if (point - x0).abs().max() <= self.epsilon:
            nascent = point.clone()  # with one-hot groups the first point is the decoded x0
        for t in range(self.maxiter):
            x.requires_grad_(True)
            # The decoded point, with the gradient passed straight through the decoding.
            z = x if c.categorical is None else x + (c.decode(x.detach()) - x).detach()
            logits = class_logits(model(z))
            if self._converged(logits.detach(), target):
                break
            energy = -logits[0, target[0]]
            loss = (
                nn.functional.cross_entropy(logits, target, reduction="sum")
                + self.lambda_cost * (z - x0).abs().sum()
                + self.energy_weight(t) * (energy + ENERGY_RIDGE * energy**2)
            )
            (grad,) = torch.autograd.grad(loss, x)
            with torch.no_grad():
                step = c.mask_step(-self.step_size * torch.nan_to_num(grad, nan=0.0))
                x = c.clamp(x + step)
                point = c.decode(x)
                if self.frozen:
                    x = point
            steps += 1
            if (point - x0).abs().max() <= self.epsilon:
                nascent = point.clone()
        with torch.no_grad():
            x = c.decode(x.detach())
            valid = self._converged(class_logits(model(x)), target)
        return (
            x.detach(),
            nascent,
            torch.tensor([valid], device=x.device),
            torch.tensor([steps], device=x.device),
        )
