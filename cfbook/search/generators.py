"""Counterfactual search with the ECCo-style gradient generator of CounterfactualTraining.jl.

``NativeGenerator`` searches a whole ``N x D`` batch at once on the model's device;
``ReferenceGenerator`` walks one sample at a time and is the oracle the batched search is tested
against. Both implement ``cfbook.search.interface.Generator``.
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from cfbook.amp import FP16_GRAD_SCALE, autocast, check_amp
from cfbook.inputs import (
    check_features,
    check_labels,
    forward_mismatch,
    require_int,
    require_number,
)
from cfbook.search import prepared
from cfbook.search.compiled import (
    Compile,
    Step,
    auto_compiles,
    check_compile,
    compile_search,
    use_fused,
)
from cfbook.search.constraints import (
    CATEGORICAL_GRADIENTS,
    Categorical,
    Constraints,
    Domain,
    Mutability,
    make_constraints,
)
from cfbook.search.interface import CounterfactualResult, Generator
from cfbook.search.pullback import PlainMLP
from cfbook.search.step import (
    ENERGY_RIDGE,
    StepSettings,
    WorkingSet,
    copy_rows,
    eager_step,
    not_converged,
)

# Without cf_batchsize, a search on a CPU runs in chunks of equal size, as few as hold at most
# this many numbers (rows x features) each, or CPU_CHUNK_MIN_ROWS rows where features are many:
# past it the working set outgrows the processor's caches. 10,000 MNIST digits searched in two
# chunks took 0.77x the time of one batch at 30 steps and 0.76x at 100, with the same bits
# (benchmark 12, Intel Xeon, 2 threads, 2026-12-05); in unrecorded probes 20,000 in four took
# 0.67x, and 3,000 in two 1.05x, hence no smaller chunks. The paper's largest training search,
# 5,000 MNIST digits, stays one batch. Elsewhere a search is one batch.
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


def count_classes(
    model: nn.Module, x: Tensor, what: str = "x", var: str = "x", model_name: str = "the model"
) -> int:
    """Number of classes the model outputs, from one sample in eval mode. A forward pass that
    fails on a dtype or a number of features that is not the model's says so (``what``,
    ``var`` and ``model_name`` name them: see ``cfbook.inputs``)."""
    with torch.no_grad(), eval_mode(model):
        try:
            return model(x[:1]).shape[1]
        except RuntimeError as err:
            problem = forward_mismatch(model, x, what, var, model_name)
            if problem is None:
                raise
            raise ValueError(problem) from err


def prepare_search(
    model: nn.Module,
    x: Tensor,
    target: Tensor,
    domain: Domain,
    mutability: Mutability,
    categorical: Categorical = None,
) -> tuple[Tensor, Tensor, Constraints]:
    """Check shapes, dtypes and classes once, outside the search loop; move the inputs to the
    model's device and turn ``domain``, ``mutability`` and ``categorical`` into device tensors.
    A row holding NaN is searched like any other (its logits are NaN: it never converges and is
    returned unmoved) and spoils no other row, so it is not refused here."""
    check_features(x)
    device = model_device(model) or x.device
    x = x.detach().to(device)
    target = torch.as_tensor(target, device=device)
    check_labels(target, x.shape[0], "target", "target", "x")
    target = target.long()
    if x.shape[0]:
        n_classes = count_classes(model, x)
        low, high = (int(v) for v in torch.stack([target.min(), target.max()]).tolist())
        if low < 0 or high >= n_classes:
            raise ValueError(f"target classes must lie in [0, {n_classes - 1}], got {low}..{high}")
    constraints = make_constraints(
        domain, mutability, x.shape[1], device=device, dtype=x.dtype, categorical=categorical
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
    it a search on a CPU splits into chunks of at most ``CPU_CHUNK_ELEMENTS`` numbers, faster
    there than one batch, and elsewhere searches all rows at once.

    ``compile`` picks how each iteration runs (the results agree to float rounding):

    - ``"auto"`` (default): the compiled step (``cfbook.search.compiled``) where it pays, i.e. for
      large searches with a cheap model such as the paper's MLP whose planned work reaches
      ``AUTO_COMPILE_STEPS`` counterfactual-steps: a ``generate()`` call counts its own rows
      x ``maxiter``, ``counterfactual_training`` its whole run's (see ``plan``), so
      that only long runs pay for the compile; the eager step otherwise. A ``generate()`` call
      whose layout has a prepared step on this machine (``prepare``) takes it, compiling nothing.
    - ``True``: the compiled step whenever the model and inputs allow it (float32 without
      ``amp``, on a CPU or a CUDA GPU, at least two rows).
    - ``False``: always the eager step: plain autograd, the path to debug with.

    A model that fails to compile warns once and is searched eagerly from then on.
    """

    cf_batchsize: int | None = None
    compact_every: int = 5
    amp: str | None = None
    compile: Compile = "auto"

    def __post_init__(self) -> None:
        super().__post_init__()
        require_int("cf_batchsize", self.cf_batchsize, or_none=True)
        require_int("compact_every", self.compact_every)
        check_compile(self.compile)

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
        categorical: Categorical = None,
        record: bool = False,
        lambda_energy: Tensor | Sequence[float] | None = None,
    ) -> CounterfactualResult:
        """Search counterfactuals of ``x`` (N x D) for classes ``target`` (N,).

        ``categorical``: the one-hot groups (sequences of column indices), decoded at every
        step (see ``SearchParameters`` and ``cfbook.search.constraints.CategoricalCode``).
        ``record=True`` keeps every iterate in ``result.path`` (for pictures of the search): the
        eager step without compaction, so every row steps ``maxiter`` times (a converged row
        stays where it stopped) and the results are those of ``compile=False``; with groups the
        iterates after the factuals are decoded. ``lambda_energy``: one energy weight per row
        (N,), in place of the generator's own: the rows of several energy weights searched in
        one batch, each as in a search of its own weight (the paper's protocol searches its
        five test-time weights so)."""
        x, target, constraints = prepare_search(model, x, target, domain, mutability, categorical)
        check_amp(self.amp, x.device)
        weights = row_weights(lambda_energy, x.shape[0])
        energy = None if weights is None else self.row_energy_weights(weights).to(x.device)
        chunk = chunk_rows(self.cf_batchsize, x)
        with eval_mode(model):
            ready = self.compile == "auto" and not record
            compiled = not record and self._compiles(
                self.compile,
                model,
                x[:chunk],
                x.shape[0] * self.maxiter,
                ready
                and self._prepared(model, x[:chunk], constraints, energy is not None) is not None,
            )
            parts = [
                self._search(
                    model,
                    x[s : s + chunk],
                    target[s : s + chunk],
                    constraints,
                    compiled,
                    record,
                    None if energy is None else energy[s : s + chunk],
                )
                for s in range(0, max(x.shape[0], 1), chunk)
            ]
        return CounterfactualResult.cat(parts)

    def plan(
        self,
        model: nn.Module,
        rows: Tensor,
        planned_rows: int,
        saved: dict[str, Any] | None = None,
        *,
        constraints: Constraints | None = None,
    ) -> tuple[NativeGenerator, dict[str, Any]]:
        """``compile`` settled once (True or False) for a run of searches with rows like
        ``rows`` (split by ``cf_batchsize`` as ``generate`` splits them) that search
        ``planned_rows`` rows in all: ``counterfactual_training`` calls it before its first
        epoch and uses the generator it returns for every search, so that they all take the
        same path, whatever ran before in the process and wherever the run was resumed (an
        interrupted run's ``saved`` decision under ``"auto"`` is kept, even if the rule has
        changed since, or the prepared step it counted on is gone: ``compile=True`` gives its
        bits). ``constraints``: the searches' domain and mutability, so that "auto" takes a
        step prepared for them (``prepare``) whatever the plan, as ``generate`` does; None
        leaves prepared steps out of the decision (``counterfactual_training`` passes None
        across several processes, which may not share a machine and must decide alike)."""
        if saved and self.compile == saved.get("compile") == "auto":
            return replace(self, compile=bool(saved["compiled"])), dict(saved)
        planned_steps = planned_rows * self.maxiter
        chunk = rows[: chunk_rows(self.cf_batchsize, rows)]
        with eval_mode(model):
            ready = (
                self.compile == "auto"
                and constraints is not None
                and self._prepared(model, chunk, constraints, False) is not None
            )
            compiled = self._compiles(self.compile, model, chunk, planned_steps, ready)
        record = {"compile": self.compile, "compiled": compiled, "planned_steps": planned_steps}
        if ready:
            record["prepared"] = True
        return replace(self, compile=compiled), record

    def _compiles(
        self,
        setting: Compile,
        model: nn.Module,
        chunk: Tensor,
        planned_steps: int,
        prepared: bool = False,
    ) -> bool:
        """``setting`` settled for searches with chunks like ``chunk`` (True or False);
        ``prepared``: a prepared step serves them (``cfbook.search.prepared``), so that a
        compiled search costs no compile and "auto" takes it whatever the plan."""
        if setting == "auto":
            return auto_compiles(model, chunk, self.amp, planned_steps, prepared)
        return setting

    def _prepared(
        self, model: nn.Module, chunk: Tensor, c: Constraints, per_row_energy: bool
    ) -> Step | None:
        """The prepared step for searches of ``chunk``-like rows under ``c``, if one exists
        (none with one-hot groups or ``amp``)."""
        if c.categorical is not None or self.amp is not None or chunk.shape[0] < 2:
            return None
        return prepared.step_for(
            model,
            chunk,
            c.bounds(),
            c.step_bounds(chunk.dtype),
            self.lambda_cost != 0,
            per_row_energy,
        )

    def prepare(
        self,
        model: nn.Module,
        x: Tensor,
        *,
        domain: Domain = None,
        mutability: Mutability = None,
        per_row_energy: bool = False,
    ) -> Path:
        """Build and keep on disk the compiled step for searches of ``model``'s architecture
        from rows like ``x`` (their feature count) under ``domain`` and ``mutability``, with
        this generator's cost term on or off and, with ``per_row_energy``, one energy weight
        per row (``generate(..., lambda_energy=...)``). From then on every such search on this
        machine, in any process with the same torch thread count, runs it with no compile, the
        searches of a ``counterfactual_training`` run in one process included: see
        ``cfbook.search.prepared``. Returns the package's path. Took 10.1 s for the MNIST MLP on
        a 2-core CPU, 18.6 s with inductor's cache cold (the first compile on a machine; benchmark
        12)."""
        target = torch.zeros(x.shape[0], dtype=torch.long)
        x, _, c = prepare_search(model, x, target, domain, mutability)
        with eval_mode(model):
            return prepared.build(
                model, x, c.bounds(), c.step_bounds(x.dtype), self.lambda_cost != 0, per_row_energy
            )

    def _step_settings(self) -> StepSettings:
        scale = FP16_GRAD_SCALE if self.amp == "fp16" else 1.0
        return StepSettings(
            self.tau, self.lambda_cost, self.step_size, self.epsilon, self.amp, scale, self.frozen
        )

    def _search(
        self,
        model: nn.Module,
        x0: Tensor,
        target: Tensor,
        c: Constraints,
        compiled: bool,
        record: bool,
        energy: Tensor | None = None,
    ) -> CounterfactualResult:
        step = None
        if use_fused(compiled, model, x0, self.amp):
            x0, target = x0.contiguous(), target.contiguous()  # as the graph assumes
            step = self._prepared(model, x0, c, energy is not None) or compile_search(
                model,
                x0,
                c.bounds(),
                c.step_bounds(x0.dtype),
                self.lambda_cost != 0,
                categorical=c.categorical,
                frozen=self.frozen,
                per_row_energy=energy is not None,
            )
        fused = step is not None
        mlp = None if fused else PlainMLP.of(model)
        # The working set holds the rows still searched (all of them until the first compaction).
        ws = WorkingSet.start(x0, target, fused=fused, energy=energy)
        nascent0 = x0
        if c.categorical is not None:
            # The first point the model sees is the decoded factual; it is the first nascent
            # point only if it lies within epsilon of the factual (else the factual is).
            point0 = c.decode(x0)
            offset0 = point0 - x0
            within0 = offset0.abs().amax(1) <= self.epsilon
            nascent0 = torch.where(within0[:, None], point0, x0)
            ws.within, ws.nascent = within0, x0.clone()  # lazy: x0 for the rows outside
            if not fused:
                ws.offset_sign = offset0.sign()
        x, nascent, within = ws.x, ws.nascent, ws.within
        active, iterations = ws.active, ws.iterations
        settings = self._step_settings()
        if fused:
            scalars = settings.scalars(x0.device)
            phis = _energy_weights(tuple(map(self.energy_weight, range(self.maxiter))), x0.device)

        @torch.no_grad()
        def write_back() -> None:
            """Copy the working set into the chunk's buffers (where it does not share them)."""
            for full, part in (
                (x, ws.x),
                (nascent, ws.nascent),
                (within, ws.within),
                (active, ws.active),
                (iterations, ws.iterations),
            ):
                if part is not full:
                    full[ws.rows] = part

        compact_at = set() if record else set(self.compaction_points())
        path = [ws.x.detach().clone()] if record else None
        for t in range(self.maxiter):
            if t in compact_at:
                keep = ws.active.nonzero().squeeze(1)  # host sync: only at compaction points
                if keep.numel() < len(ws):
                    write_back()
                    ws = ws.select(_at_least_two(keep, len(ws)) if fused else keep)
                if not len(ws):
                    break
            if fused:
                phi = phis[t] if ws.energy is None else ws.energy[:, t : t + 1].contiguous()
                with torch.no_grad():
                    step(ws, phi, scalars)
            else:
                phi = self.energy_weight(t) if ws.energy is None else ws.energy[:, t : t + 1]
                eager_step(model, ws, phi, c, settings, mlp)
            if path is not None:
                path.append(c.decode(ws.x).detach().clone())
        if len(ws):
            with torch.no_grad(), autocast(self.amp, x0.device):
                probs = model(c.decode(ws.x)).float().softmax(1)
            ws.active = ws.active & not_converged(probs, ws.target, self.tau)
        write_back()
        with torch.no_grad():
            # In place, into the chunk's own buffers: a fresh N x D result would cost its pages'
            # first touch, more than the select itself on a CPU.
            copy_rows(nascent, c.decode(x), within)  # the lazy nascent points resolved
            if not fused:
                # Rows that never stepped keep x0 exactly: the eager zero step still went through
                # the clamp, which moves an x0 outside the domain (the reference never touches it).
                unmoved = iterations == 0
                copy_rows(x, x0, unmoved)
                copy_rows(nascent, nascent0, unmoved)
        with torch.no_grad():
            x = c.decode(x)  # the counterfactual: the search state decoded
        if self.amp is not None:
            # Validity is a promise about the model as it is, in full precision.
            with torch.no_grad():
                probs = model(x).float().softmax(1)
            active = not_converged(probs, target[:, None], self.tau)
        return CounterfactualResult(
            x, nascent, ~active, iterations, None if path is None else torch.stack(path)
        )

    def compaction_points(self) -> list[int]:
        """Iterations before which converged rows leave the batch, each costing one host read of
        the active set: early (1, 2, 4) for samples that converge at once, then every
        ``compact_every`` iterations."""
        return [t for t in range(1, self.maxiter) if t in (1, 2, 4) or t % self.compact_every == 0]


@functools.lru_cache(maxsize=32)
def _energy_weights(weights: tuple[float, ...], device: torch.device) -> tuple[Tensor, ...]:
    """The compiled step's energy weights, one 0-d tensor per iteration (a view of one tensor
    would be a costlier input), made once per schedule and device: thirty new tensors per search
    cost as much as a compiled iteration of a small search."""
    return tuple(torch.tensor(w, dtype=torch.float32, device=device) for w in weights)


def _at_least_two(keep: Tensor, n: int) -> Tensor:
    """``keep`` with a second, frozen row when only one is left: the compiled step treats the row
    count as a size, and a single row would be specialised and compiled again. The frozen row
    takes a zero step and is written back unchanged."""
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
        """Search counterfactuals of ``x`` (N x D) for classes ``target`` (N,), sample by sample
        (``categorical`` and ``lambda_energy``: as ``NativeGenerator.generate``)."""
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
            logits = model(z)
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
            valid = self._converged(model(x), target)
        return (
            x.detach(),
            nascent,
            torch.tensor([valid], device=x.device),
            torch.tensor([steps], device=x.device),
        )
