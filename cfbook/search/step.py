"""One iteration of the batched counterfactual search, in two interchangeable forms.

Both update a ``WorkingSet`` (the rows still searched) for iteration ``t``:

- ``eager_step``: plain PyTorch with autograd, a handful of in-place kernels per iteration; it runs
  any model, and it is the path to read and debug. For plain MLPs it calls autograd's own kernels
  directly (``cfbook.search.pullback``): the same bits, without the autograd engine, but for
  large float32 products on an x86 CPU, which go to oneDNN (``cfbook.search.onednn``).
- ``fused_step``: the same iteration as one pure function of tensors (model forward, input
  gradient by ``torch.func.vjp``, update, constraints, bookkeeping), written to be traced and
  compiled whole (``cfbook.search.compiled``). It writes its results into the working set's
  buffers in place, so a compiled iteration allocates one gradient and nothing else, and it
  touches each N x D buffer once: one loop over the iterate per iteration.

The two agree to float rounding; tests hold both to ``ReferenceGenerator``.

With one-hot groups (``Constraints.categorical``) both evaluate the model and the cost at the
decoded point, apply the gradient there to the state (straight through the decoding), and, when
``frozen``, overwrite the state by its decoding after each step (see
``cfbook.search.constraints.CategoricalCode``); ``x`` is then the state and the points that
leave the search (nascent points, and the counterfactual via ``Constraints.decode``) are decoded.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields

import torch
from torch import Tensor, nn

from cfbook.amp import autocast
from cfbook.search.constraints import Constraints
from cfbook.search.pullback import PlainMLP

# Strength of the quadratic term in the energy penalty E + ENERGY_RIDGE * E^2.
ENERGY_RIDGE = 1e-3
# On a CPU, where reading a value on the host costs no device synchronisation, the eager step
# reads which rows leave the epsilon ball and bounds the plain-MLP gradient (PlainMLP.finite) at
# every iteration. True: it does neither, as on a GPU (the tests and the sync benchmark set it to
# hold a CPU search to the GPU's rule of no per-iteration sync).
SYNC_FREE = False


@dataclass(frozen=True)
class StepSettings:
    """What one iteration needs besides the tensors."""

    tau: float
    lambda_cost: float
    step_size: float
    epsilon: float
    amp: str | None
    grad_scale: float  # fp16: logit gradients are scaled up before the backward pass
    frozen: bool = True  # one-hot groups: the state is overwritten by its decoding each step

    def scalars(self, device: torch.device) -> Tensor:
        """(tau, lambda_cost, step_size, epsilon) as one float32 tensor, the form the fused step
        takes: a compiled graph reads a tensor's values at run time, whereas Python floats
        would be compiled in as constants (and a new tau would compile again). Float32 is also
        the precision in which the eager step applies them to float32 tensors."""
        values = [self.tau, self.lambda_cost, self.step_size, self.epsilon]
        return torch.tensor(values, dtype=torch.float32, device=device)


@dataclass
class WorkingSet:
    """The rows still searched, aligned: their position in the chunk and their search state.

    ``offset_sign`` (the sign of point - x0, the L1 cost's gradient) is kept only by the eager
    step, which computes it in the buffer of x - x0 and uses it at the next iteration.
    ``energy`` holds each row's energy weight at every iteration when the rows have their own
    (``NativeGenerator.generate(..., lambda_energy=...)``), so that it follows them through
    compaction; None: one weight for all rows.
    ``within`` marks the rows whose point lies within epsilon of x0. Both steps keep the nascent
    point lazily: a row within epsilon has its point as its nascent point, so ``nascent`` holds
    only the last such point of rows that have left (``copy_rows(nascent, x, within)`` resolves
    it). A row's nascent point is then written once per exit from the ball rather than at every
    iteration.
    ``spare`` is the buffer the eager step writes the next input gradient into (plain MLPs only,
    ``PlainMLP``): the previous state's, free once a step is done.
    """

    rows: Tensor
    x: Tensor
    x0: Tensor
    target: Tensor  # (n, 1)
    active: Tensor
    nascent: Tensor
    iterations: Tensor
    within: Tensor
    offset_sign: Tensor | None = None
    energy: Tensor | None = None  # per-row energy weights, (n, maxiter): see SearchParameters
    spare: Tensor | None = None  # eager step with PlainMLP: a free buffer for the next gradient

    @classmethod
    def start(
        cls, x0: Tensor, target: Tensor, *, fused: bool, energy: Tensor | None = None
    ) -> WorkingSet:
        n = x0.shape[0]
        return cls(
            rows=torch.arange(n, device=x0.device),
            x=x0.clone(),
            x0=x0,
            target=target[:, None],
            active=torch.ones(n, dtype=torch.bool, device=x0.device),
            # A lazy nascent point is not used while its row lies within epsilon, where every
            # row starts: no copy of x0 is needed here.
            nascent=torch.empty_like(x0),
            iterations=torch.zeros(n, dtype=torch.long, device=x0.device),
            within=torch.ones(n, dtype=torch.bool, device=x0.device),
            offset_sign=None if fused else torch.zeros_like(x0),
            energy=energy,
        )

    def __len__(self) -> int:
        return self.rows.shape[0]

    def select(self, keep: Tensor) -> WorkingSet:
        """The rows ``keep`` (indices into this set), copied into fresh contiguous buffers (the
        spare buffer is not copied: it holds nothing)."""
        return WorkingSet(
            *(
                None if (v := getattr(self, f.name)) is None or f.name == "spare" else v[keep]
                for f in fields(self)
            )
        )


def copy_rows(dest: Tensor, source: Tensor, rows: Tensor) -> None:
    """Write the rows of ``source`` that the boolean ``rows`` marks into ``dest``, in place.

    On a CPU, where reading the mask costs no device synchronisation, only those rows are copied
    (few, as a rule: the rows leaving the epsilon ball at one iteration, the factuals that never
    stepped); a ``where`` with a per-row mask walks every entry at several times a copy's cost
    there. Elsewhere every row passes through one ``where``. The lazy nascent points are resolved
    with it: ``copy_rows(nascent, x, within)``."""
    if rows.device.type == "cpu" and not SYNC_FREE:
        index = rows.nonzero().squeeze(1)
        if index.numel():
            dest.index_copy_(0, index, source.index_select(0, index))
    else:
        torch.where(rows[:, None], source, dest, out=dest)


def reached(probs: Tensor, target: Tensor, tau: float | Tensor) -> Tensor:
    """Rows whose target probability has reached ``tau``; a NaN probability never has (as in
    CT.jl, where ``p >= tau`` is false for NaN)."""
    return probs.gather(1, target).squeeze(1) >= tau


def not_converged(probs: Tensor, target: Tensor, tau: float | Tensor) -> Tensor:
    """Rows whose target probability has not reached ``tau`` (NaN included)."""
    return ~reached(probs, target, tau)


def target_term(logits: Tensor, target: Tensor, phi: float | Tensor) -> Tensor:
    """What the loss adds to the target column of d(loss)/d(logits), per row ``(n, 1)``:
    cross-entropy's ``-1`` and the energy term ``phi * (E + ENERGY_RIDGE * E^2)``'s derivative,
    with ``E = -z_target``."""
    z_t = logits.gather(1, target)
    return -1.0 - phi * (1.0 - 2 * ENERGY_RIDGE * z_t)


def logit_gradient(logits: Tensor, probs: Tensor, target: Tensor, phi: float | Tensor) -> Tensor:
    """d(loss)/d(logits) per row: cross-entropy ``p - onehot`` plus the energy term.

    A ``where`` against the target column rather than a scatter: a compiler fuses it.
    """
    is_target = torch.arange(logits.shape[1], device=logits.device) == target
    return torch.where(is_target, probs + target_term(logits, target, phi), probs)


def eager_step(
    model: nn.Module,
    ws: WorkingSet,
    phi: float | Tensor,
    c: Constraints,
    s: StepSettings,
    mlp: PlainMLP | None = None,
) -> None:
    """One iteration with in-place kernels (any model, any device); ``phi`` is the energy
    weight, one for all rows or one per row (``(n, 1)``). The input gradient comes from
    autograd, or from ``mlp`` (``PlainMLP.of(model)``, without the autograd engine) where
    given; never under autocast."""
    if mlp is not None and s.amp is None:
        with torch.no_grad():
            xw = c.decode(ws.x)
            out = mlp.forward(xw)
            dlogits = _logit_step(ws, out.float(), phi, s)
            bound = xw.device.type == "cpu" and not SYNC_FREE
            grad = mlp.pullback(dlogits.to(out.dtype), out=ws.spare, bound=bound)
            state = ws.x
            _eager_update(ws, grad, xw, c, s, finite=mlp.finite)
            # The update wrote the new state into the gradient's buffer (or, with frozen one-hot
            # groups, into a new one): the old state's buffer takes the next gradient.
            ws.spare = state
        return
    xw = c.decode(ws.x).detach().requires_grad_(True)  # the decoded point: ws.x without groups
    with autocast(s.amp, xw.device):
        logits = model(xw).float()
    with torch.no_grad():
        dlogits = _logit_step(ws, logits, phi, s)
        if s.grad_scale != 1.0:
            dlogits.mul_(s.grad_scale)
    (grad,) = torch.autograd.grad(logits, xw, dlogits)
    with torch.no_grad():
        grad = grad.to(ws.x.dtype)  # the search's dtype (float64 searches stay float64)
        if s.grad_scale != 1.0:
            grad.div_(s.grad_scale)
        _eager_update(ws, grad, xw.detach(), c, s)


def _logit_step(ws: WorkingSet, logits: Tensor, phi: float | Tensor, s: StepSettings) -> Tensor:
    """Drop the rows whose target probability reached tau from ``ws.active``; return the loss
    gradient with respect to the logits.

    ``not_converged`` and ``logit_gradient`` in fewer kernels, to the bit: ``active > reached``
    is ``active & ~reached`` on booleans (NaN never reaches tau), and the energy term is added
    into the target column alone (``scatter_add_``) rather than to every column and selected
    back. At a hundred rows an eager iteration is mostly the overhead of its kernels.
    """
    probs = logits.softmax(1)
    ws.active = ws.active > reached(probs, ws.target, s.tau)
    return probs.scatter_add_(1, ws.target, target_term(logits, ws.target, phi))


def _eager_update(
    ws: WorkingSet,
    grad: Tensor,
    previous: Tensor,
    c: Constraints,
    s: StepSettings,
    finite: bool = False,
) -> None:
    """Cost gradient, masked descent, domain clamp, freezing of converged rows, nascent tracking,
    iteration counts (the offset and the nascent point are those of the decoded point;
    ``previous`` is the decoded point before the step, which becomes the nascent point of a row
    that leaves the ball).

    In place where possible, allocating at most the gradient (nothing for plain MLPs), and
    without a ``where`` over the iterate (converged rows get a zero step instead): eager kernels
    are memory-bandwidth bound, so passes over N x D count, and a fresh N x D buffer costs its
    pages' first touch. ``finite`` says the gradient is known to hold no NaN or infinity
    (``PlainMLP.finite``): zeroing NaNs and capping infinities, as CT.jl does, would change
    nothing, and its pass is skipped.
    """
    if not finite:
        grad = grad.nan_to_num_(nan=0.0)
    if s.lambda_cost:
        grad.add_(ws.offset_sign, alpha=s.lambda_cost)
    row_step = ws.active.to(grad.dtype).mul_(-s.step_size)
    x = c.clamp_(c.mask_step(grad.mul_(row_step[:, None])).add_(ws.x))
    point = c.decode(x)
    if s.frozen:
        x = point
    ws.x = x
    offset = torch.sub(point, ws.x0, out=ws.offset_sign)
    eps = s.epsilon
    within = (offset.amax(1) <= eps) & (offset.amin(1) >= -eps)
    ws.offset_sign = offset.sign_()
    copy_rows(ws.nascent, previous, ws.within > within)  # leaving: within before, not now
    ws.within = within
    ws.iterations = ws.iterations + ws.active


def fused_step(
    model: Callable[[Tensor], Tensor],
    x: Tensor,
    x0: Tensor,
    nascent: Tensor,
    within: Tensor,
    active: Tensor,
    iterations: Tensor,
    target: Tensor,
    phi: Tensor,
    scalars: Tensor,
    bounds: tuple[Tensor, Tensor] | None,
    step_bounds: tuple[Tensor, Tensor] | None,
    with_cost: bool,
    decode: Callable[[Tensor], Tensor] | None,
    frozen: bool,
    vjp: Callable[[Tensor], tuple[Tensor, Callable[[Tensor], tuple[Tensor]]]] | None = None,
) -> None:
    """One iteration as a pure tensor program that updates ``x``, ``nascent``, ``within``,
    ``active`` and ``iterations`` in place (call it under ``torch.no_grad()``; float32, no
    autocast). ``nascent`` is lazy (see ``WorkingSet``).

    ``phi`` (the energy weight: 0-d, or ``(n, 1)`` with one per row) and ``scalars``
    (``StepSettings.scalars``, 1-d) are tensors; ``with_cost`` says whether lambda_cost is
    non-zero. ``decode`` decodes the one-hot groups (None: there are none); ``frozen``: the state
    becomes its decoding after each step. ``vjp``: the logits and their pullback at a point, as
    ``torch.func.vjp(model, point)`` returns them (None: that call).

    Formulated for a fused kernel rather than for eager PyTorch: ``nan_to_num`` is a clamp and a
    self-comparison, mutability is a per-feature clamp of the step (``step_bounds``: 0 where a
    direction is forbidden, infinite elsewhere), ``x - x0`` is recomputed rather than stored, and
    converged rows keep their point exactly (a select, not a zero step through the domain clamp),
    so a factual that never steps needs no restoring afterwards. The lazy nascent point needs only
    the previous point's ``within``: storing it does not wait for the new point's distance (a
    reduction over the row), so one loop reads x, x0, the gradient and ``nascent`` and writes x
    and ``nascent``, where an eager nascent update would need a second loop.
    """
    tau, lambda_cost, step_size, epsilon = scalars.unbind()
    point = x if decode is None else decode(x)
    logits, pullback = torch.func.vjp(model, point) if vjp is None else vjp(point)
    probs = logits.softmax(1)
    still = active & not_converged(probs, target, tau)
    (grad,) = pullback(logit_gradient(logits, probs, target, phi))
    if bounds is None:
        # nan_to_num's infinities become the largest float; with a domain the clamp below sends
        # an infinite step to the same bound, so the pass is skipped.
        largest = torch.finfo(grad.dtype).max
        grad = grad.clamp(-largest, largest)
    grad = torch.where(grad != grad, 0.0, grad)  # NaN gradients become 0
    if with_cost:
        offset = point - x0  # lambda_cost * sign(offset), as two selects: fewer vector operations
        grad = grad + torch.where(offset > 0, lambda_cost, torch.where(offset < 0, -lambda_cost, 0))
    step = grad * -step_size
    if step_bounds is not None:
        step = step.clamp(*step_bounds)
    new = x + step
    if bounds is not None:
        new = new.clamp(*bounds)
    if decode is None:
        new = torch.where(still[:, None], new, x)
        new_point = new
    else:
        moved = decode(new)
        new_point = torch.where(still[:, None], moved, point)
        new = torch.where(still[:, None], moved if frozen else new, x)
    nascent.copy_(torch.where(within[:, None], point, nascent))
    within.copy_((new_point - x0).abs().amax(1) <= epsilon)
    x.copy_(new)
    iterations.add_(still)
    active.copy_(still)
