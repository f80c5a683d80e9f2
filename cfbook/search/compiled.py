"""The compiled search iteration: when it pays, how it is compiled, and the fall-back to eager.

``step.fused_step`` is traced into one graph per iteration (``make_fx``: the model as a pure
function of its parameters, the input gradient, the update and the bookkeeping) and compiled by
inductor: the model's matrix products plus a few generated kernels (one loop over the iterate for
the whole update), instead of some twenty eager kernels and their temporaries. The graph is then
called directly, without ``torch.compile``'s guards and frame handling, whose cost per call is a
tenth of a small model's pass; ``compile_search`` checks once per search what guards would check on
every call (the model's modules and tensors, the constraint layout, the thread count).

It pays where the bookkeeping outweighs the model (small models, large batches) and when the
compile, a few seconds per model architecture and process (8-16 s the first time on a machine,
before the inductor cache is warm; 4.4 of an AMD EPYC's 7.9 s and 9-11 of an Intel Xeon's 13-16 s
went to inductor's probes of the processor's vector instruction sets; benchmark 9), is spread over
many searches, as in a long training run that searches every epoch. So ``compile="auto"`` decides
once, from the work planned: a training run from its counterfactual-steps (search epochs x ``nce``
x ``maxiter``), a lone ``generate()`` call from its own (rows x ``maxiter``), and compiles if they
reach ``AUTO_COMPILE_STEPS``. The decision depends on nothing that ran before in the process, so a
run repeats its results whether it is resumed, run alone or after other searches. Where a step was
prepared on the machine for the search's layout (``cfbook.search.prepared``), there is no compile
to repay and "auto" takes it whatever the plan.

Shapes stay stable: the row count is a symbol of the graph, so compaction and chunks of any size
reuse it, and a working set never shrinks below two rows (the graph assumes at least two).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Literal

import torch
from torch import Tensor, nn
from torch.utils.flop_counter import FlopCounterMode

from cfbook.errors import warn
from cfbook.search import onednn
from cfbook.search.constraints import CategoricalCode
from cfbook.search.pullback import PlainMLP
from cfbook.search.step import WorkingSet, fused_step

Compile = bool | Literal["auto"]

# "auto" compiles when a search holds at least this many numbers (rows x features; MNIST: 335 rows
# and up): below it a search lasts milliseconds and a compile would not be repaid.
AUTO_MIN_ELEMENTS = 2**18
# ... and when the model's forward pass costs at most this many FLOPs per input feature and row
# (an MLP 784-32-10: 65; ResNet-18 on MNIST: about 700,000, whose passes dwarf the bookkeeping).
AUTO_MAX_FLOPS_PER_FEATURE = 512
# ... and when the planned counterfactual-steps (rows x iterations, summed over a run's searches)
# reach this many, per device type. On a 2-core CPU, training the paper's MLP, a warm compile
# was repaid after 1.4 million planned steps (AMD EPYC, 1.7 s; Intel Xeon 1.6 million, 2.2 s,
# against the eager step with its direct path for MLPs) and a cold one (the first on a machine)
# after 10 million (9.9 s; Intel 9.9 million, 14 s) (benchmark 9, 2026-12-01 and 2026-12-04).
# The eager step has got faster since: 2.5 million warm (2.0 s) and 16.9 million cold on the
# Intel Xeon (2026-12-05); 4.9 million warm (1.5 s) and 27 million cold on the AMD EPYC with
# oneDNN's products (2026-12-06), so a run of 2 million planned steps there loses about 0.9 s to
# the compile. The bar stays, since moving it changes which runs compile, and so their last
# bits. On a GPU, where an eager step is launch-bound and far cheaper, a guess not yet measured.
# Steps, not seconds: the decision does not depend on the machine's load.
AUTO_COMPILE_STEPS = {"cpu": 2_000_000, "cuda": 50_000_000}

_flops_per_row: weakref.WeakKeyDictionary[nn.Module, int] = weakref.WeakKeyDictionary()
_failed: weakref.WeakSet[nn.Module] = weakref.WeakSet()


def check_compile(compile: object) -> Compile:
    """Validate NativeGenerator's ``compile`` setting."""
    if isinstance(compile, bool) or compile == "auto":
        return compile  # type: ignore[return-value]
    raise ValueError(f"compile must be True, False or 'auto', got {compile!r}")


def forward_flops(model: nn.Module, x: Tensor) -> int:
    """FLOPs of the model's forward pass on one row (counted once per model)."""
    if model not in _flops_per_row:
        counter = FlopCounterMode(display=False)
        with torch.no_grad(), counter:
            model(x[:1])
        _flops_per_row[model] = counter.get_total_flops()
    return _flops_per_row[model]


def _supported(model: nn.Module, x0: Tensor, amp: str | None) -> bool:
    return (
        model not in _failed
        and amp is None
        and x0.device.type in ("cpu", "cuda")
        and x0.dtype == torch.float32
        and x0.shape[0] >= 2
        and all(p.dtype == torch.float32 for p in model.parameters())
    )


def compiler_available() -> bool:
    """Whether this torch can build the compiled step (``standalone_compile``, torch 2.8 and
    later). Without it ``compile="auto"`` searches eagerly; ``compile=True`` warns and does."""
    return torch.torch_version.TorchVersion(torch.__version__) >= "2.8"


def _qualifies(model: nn.Module, x0: Tensor) -> bool:
    """A search big enough, with a model cheap enough, for the compiled step to be faster."""
    return (
        compiler_available()
        and x0.numel() >= AUTO_MIN_ELEMENTS
        and forward_flops(model, x0) <= AUTO_MAX_FLOPS_PER_FEATURE * x0.shape[1]
    )


def auto_compiles(
    model: nn.Module, x0: Tensor, amp: str | None, planned_steps: int, prepared: bool = False
) -> bool:
    """What ``compile="auto"`` decides for searches with chunks like ``x0`` that together plan
    ``planned_steps`` counterfactual-steps: compile if the compiled step is faster for them and
    the work is enough to repay the compile, or if a prepared step serves them (``prepared``:
    no compile to repay; ``cfbook.search.prepared``)."""
    # The plan first: counting the model's FLOPs (_qualifies) imports most of torch._dynamo the
    # first time in a process, 0.9 s that a lone search below the bar should not pay.
    return _supported(model, x0, amp) and (
        prepared
        or (
            planned_steps >= AUTO_COMPILE_STEPS.get(x0.device.type, float("inf"))
            and _qualifies(model, x0)
        )
    )


def use_fused(compile: bool, model: nn.Module, x0: Tensor, amp: str | None) -> bool:
    """Whether a chunk's search runs the compiled step, once ``compile`` is settled (True or
    False; see ``auto_compiles``): True where the model and the chunk allow it."""
    return compile and _supported(model, x0, amp)


Step = Callable[[WorkingSet, Tensor, Tensor], None]

# Per model: the compiled iterations, one per fingerprint and layout (see compile_search).
_graphs: weakref.WeakKeyDictionary[nn.Module, dict[tuple, Callable[..., object]]] = (
    weakref.WeakKeyDictionary()
)
_compiles = 0  # graphs compiled in the process


def graphs_compiled() -> int:
    """How many graphs this process has compiled (traced and built or taken from inductor's
    cache): benchmarks report it to show that nothing compiles epoch after epoch."""
    return _compiles


def compile_search(
    model: nn.Module,
    x0: Tensor,
    bounds: tuple[Tensor, Tensor] | None,
    step_bounds: tuple[Tensor, Tensor] | None,
    with_cost: bool,
    categorical: CategoricalCode | None,
    frozen: bool,
    per_row_energy: bool = False,
) -> Step | None:
    """The compiled iteration for searches of ``model`` from rows like ``x0`` (any row count of
    at least two) under this constraint layout, compiled on first use; None, with a warning, if
    the model cannot be compiled (the caller then searches eagerly, now and from then on).
    ``categorical`` and ``frozen``: the one-hot groups and how the state passes their decoding
    (``step.fused_step``); the groups' index tensors are inputs of the graph, so searches with
    other groups of the same sizes reuse it. ``per_row_energy``: the step's energy weight is
    ``(n, 1)``, one per row, rather than 0-d.

    The step writes into the working set's buffers in place: ``step(ws, phi, scalars)`` (see
    ``step.fused_step``). Its inputs must be contiguous, as the search's buffers are.
    """
    global _compiles
    state, constraints = graph_inputs(model, bounds, step_bounds)
    n_constraints = len(constraints)
    layout = None if categorical is None else categorical.layout()
    if categorical is not None:
        constraints += categorical.tensors()
    key = (
        _fingerprint(model),
        x0.device,
        x0.shape[1],
        bounds is not None,
        step_bounds is not None,
        with_cost,
        layout,
        frozen if categorical is not None else None,
        per_row_energy,
        torch.get_num_threads(),
        tuple((t.shape, t.stride(), t.dtype) for t in constraints),
        onednn.graph_products(model, x0) if PlainMLP.of(model) is not None else None,
    )
    graphs = _graphs.setdefault(model, {})
    if key not in graphs:
        try:
            graphs[key] = _compile(
                *trace_step(
                    model,
                    state,
                    x0,
                    constraints,
                    bounds is not None,
                    step_bounds is not None,
                    with_cost,
                    (n_constraints, layout, frozen),
                    per_row_energy,
                )
            )
            _compiles += 1
        except Exception as err:  # noqa: BLE001 - any compiler failure means: search eagerly
            _failed.add(model)
            reason = str(err).strip().splitlines()[0] if str(err).strip() else ""
            warn(
                f"cfbook: the compiled search step failed for {type(model).__name__} "
                f"({type(err).__name__}: {reason}); searching with the eager step instead "
                "(NativeGenerator(compile=False) skips the attempt)",
                RuntimeWarning,
            )
            return None
    graph = graphs[key]

    def step(ws: WorkingSet, phi: Tensor, scalars: Tensor) -> None:
        graph(*step_arguments(state, ws, phi, scalars, constraints))

    return step


def graph_inputs(
    model: nn.Module,
    bounds: tuple[Tensor, Tensor] | None,
    step_bounds: tuple[Tensor, Tensor] | None,
) -> tuple[list[Tensor], list[Tensor]]:
    """The step graph's fixed inputs: the model's parameters and buffers (``state``), and the
    domain's and then the step's bounds, where there are any (``constraints``)."""
    state = [*(p.detach() for p in model.parameters()), *model.buffers()]
    return state, [*(bounds or ()), *(step_bounds or ())]


def step_arguments(
    state: list[Tensor], ws: WorkingSet, phi: Tensor, scalars: Tensor, constraints: list[Tensor]
) -> list[Tensor]:
    """The step graph's arguments in its order (``trace_step``): the model's tensors, the
    working set's, the energy weight, the scalars, the constraints."""
    return [
        *state,
        ws.x,
        ws.x0,
        ws.nascent,
        ws.within,
        ws.active,
        ws.iterations,
        ws.target,
        phi,
        scalars,
        *constraints,
    ]


def _fingerprint(model: nn.Module) -> tuple:
    """What a model's compiled graph assumed beyond its parameters' values: its modules, their
    modes and forward hooks, and its parameters' and buffers' names and layouts. A search whose
    model differs compiles again (no guard checks a compiled call)."""
    tensors = (*model.named_parameters(), *model.named_buffers())
    return (
        tuple(
            (id(m), m.training, *m._forward_pre_hooks, *m._forward_hooks) for m in model.modules()
        ),
        tuple((name, t.shape, t.stride(), t.dtype, t.device) for name, t in tensors),
    )


def _compile(graph: torch.fx.GraphModule, args: list[Tensor]) -> Callable[..., object]:
    """``trace_step``'s graph compiled by inductor. Called directly, the result skips what a
    ``torch.compile`` call costs on top (guards and frame handling, up to a few tenths of a
    millisecond on a 2-core CPU: a tenth of a small model's pass)."""
    with torch.no_grad():
        return torch._inductor.standalone_compile(graph, args, dynamic_shapes="from_graph")


def trace_step(
    model: nn.Module,
    state: list[Tensor],
    x0: Tensor,
    constraints: list[Tensor],
    has_bounds: bool,
    has_step_bounds: bool,
    with_cost: bool,
    categorical: tuple[int, tuple[bool, bool, bool] | None, bool] = (0, None, True),
    per_row_energy: bool = False,
) -> tuple[torch.fx.GraphModule, list[Tensor]]:
    """Trace ``fused_step`` with the model as a pure function of its parameters and buffers
    (``make_fx``, row count symbolic); return the graph and the fake arguments it was traced
    with. ``categorical``: how many of ``constraints`` are bounds (the rest are the one-hot
    groups' tensors), the groups' ``CategoricalCode.layout()`` (None: no groups) and ``frozen``;
    ``per_row_energy``: the energy weight is ``(n, 1)`` rather than 0-d."""
    # Imported here: they add most of a second to importing cfbook, and only a compile needs them.
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch.fx.experimental.symbolic_shapes import (
        DimDynamic,
        ShapeEnv,
        StatelessSymbolicContext,
    )

    names = [name for name, _ in (*model.named_parameters(), *model.named_buffers())]
    # Which layers' products go to oneDNN (cfbook.search.onednn; None: none, autograd's graph)
    products = onednn.graph_products(model, x0) if PlainMLP.of(model) is not None else None

    def iteration(*args: Tensor) -> list[Tensor]:
        values = dict(zip(names, args, strict=False))
        x, x0, nascent, within, active, iterations, target, phi, scalars, *rest = args[len(names) :]
        n_constraints, layout, frozen = categorical
        rest, groups = rest[:n_constraints], rest[n_constraints:]
        bounds = (rest[0], rest[1]) if has_bounds else None
        step_bounds = (rest[-2], rest[-1]) if has_step_bounds else None
        code = None if layout is None else CategoricalCode.from_tensors(layout, groups)
        fused_step(
            lambda v: torch.func.functional_call(model, values, (v,)),
            x,
            x0,
            nascent,
            within,
            active,
            iterations,
            target,
            phi,
            scalars,
            bounds,
            step_bounds,
            with_cost,
            None if code is None else code.decode,
            frozen,
            None if products is None else onednn.vjp(model, values, products),
        )
        return []  # the results are the in-place updates

    fake_mode = FakeTensorMode(shape_env=ShapeEnv())
    dynamic_rows = StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DYNAMIC, DimDynamic.STATIC])
    rows_x0 = fake_mode.from_tensor(x0, symbolic_context=dynamic_rows)
    n, d, device, dtype = rows_x0.shape[0], x0.shape[1], x0.device, x0.dtype
    with fake_mode:  # the working set's buffers, all sharing the one row-count symbol
        rows = [
            torch.empty(n, d, dtype=dtype, device=device),
            rows_x0,
            torch.empty(n, d, dtype=dtype, device=device),
            *(
                torch.empty(n, dtype=flags, device=device)
                for flags in (torch.bool, torch.bool, torch.long)
            ),
            torch.empty(n, 1, dtype=torch.long, device=device),
        ]
        phi = torch.empty((n, 1) if per_row_energy else (), dtype=dtype, device=device)
    fixed = [fake_mode.from_tensor(t, static_shapes=True) for t in state]
    scalars = [
        phi,
        fake_mode.from_tensor(torch.empty(4, dtype=dtype, device=device), static_shapes=True),
    ]
    args = [
        *fixed,
        *rows,
        *scalars,
        *(fake_mode.from_tensor(t, static_shapes=True) for t in constraints),
    ]
    with torch.no_grad():
        graph = make_fx(iteration, tracing_mode="symbolic")(*args)
    if fake_mode.shape_env.guards:  # nothing would check them at a call: refuse the graph
        raise RuntimeError(
            "the graph holds only for some row counts: "
            + fake_mode.shape_env.format_guards().replace("\n", ";")
        )
    return graph, args
