"""Prepared search steps: the compiled iteration built once per machine and kept on disk.

A compiled search takes 0.45-0.65x the eager one's time (benchmark 12, 2-core CPU), but building its
step costs 1.5-4 s in every new process (tracing, and importing inductor) and 8-16 s the first
time on a machine (benchmarks 9 and 12), far more than a lone search of a few hundred
milliseconds, so ``compile="auto"`` compiles only runs that plan millions of counterfactual-steps.
A prepared step moves that cost out of the searches. ``NativeGenerator.prepare`` builds the step
for a model's architecture and a constraint layout with AOTInductor (``torch.export`` of the
traced iteration, compiled to a shared library in a ``.pt2`` package) and writes it under
``prepared_dir()``; a later process loads it in milliseconds, without importing inductor, and
every search with that layout then takes the compiled path, whatever its size, as
``compile=True`` would, to the bit.

Only ``prepare`` writes a package: no search does, so what a search decides depends on the
machine (what was prepared on it) and on its own plan, never on what ran before in the process.
Plain MLPs on a CPU without one-hot groups are supported (the paper's models; the package's
key names the architecture by its layers' shapes, which for ``nn.Linear`` and ``nn.ReLU``
say all). The key also holds the torch version, the processor's vector instruction set, the
thread count and a hash of the step's source, so a package never serves a step it was not built
for. ``CFBOOK_PREPARED_DIR`` moves the folder; set to ``off`` it turns prepared steps off.
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
from collections.abc import Callable
from pathlib import Path

import torch
from torch import Tensor, nn

from cfbook.errors import warn
from cfbook.search import compiled, onednn, step
from cfbook.search.pullback import PlainMLP
from cfbook.search.step import WorkingSet

# Bumped when the package's calling convention changes.
FORMAT = 1
ENV = "CFBOOK_PREPARED_DIR"
OFF = "off"

Runner = Callable[[list[Tensor]], list[Tensor]]
_loaded: dict[tuple[Path, int], Runner] = {}


def prepared_dir() -> Path | None:
    """The folder of prepared steps: ``$CFBOOK_PREPARED_DIR``, else ``~/.cache/cfbook/prepared``
    (``$XDG_CACHE_HOME`` respected); None when the variable says ``off``."""
    configured = os.environ.get(ENV)
    if configured == OFF:
        return None
    if configured:
        return Path(configured)
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "cfbook" / "prepared"


@functools.cache
def _source_hash() -> str:
    """What the graph is made of: the step's and the tracer's source."""
    digest = hashlib.sha256()
    for module in (step, compiled, onednn):
        digest.update(Path(module.__file__).read_bytes())
    return digest.hexdigest()


def layout_key(
    model: nn.Module,
    x0: Tensor,
    has_bounds: bool,
    has_step_bounds: bool,
    with_cost: bool,
    per_row_energy: bool,
) -> str | None:
    """The name a prepared step for this search would have; None where no prepared step can
    serve it (a model that is not a plain MLP, a device other than the CPU, another dtype)."""
    if x0.device.type != "cpu" or x0.dtype != torch.float32 or x0.ndim != 2:
        return None
    if PlainMLP.of(model) is None:
        return None
    params = list(model.parameters())
    if any(p.dtype != torch.float32 or p.device.type != "cpu" for p in params):
        return None
    layers = tuple(
        (type(m).__name__, m.in_features, m.out_features, m.bias is not None)
        if isinstance(m, nn.Linear)
        else (type(m).__name__,)
        for m in model
    )
    material = (
        FORMAT,
        torch.__version__,
        torch.backends.cpu.get_cpu_capability(),
        platform.machine(),
        torch.get_num_threads(),
        onednn.graph_products(model, x0),
        _source_hash(),
        layers,
        x0.shape[1],
        has_bounds,
        has_step_bounds,
        with_cost,
        per_row_energy,
    )
    return "step-" + hashlib.sha256(repr(material).encode()).hexdigest()[:24]


def package_path(key: str) -> Path | None:
    """Where the package ``key`` lives (None: prepared steps are off)."""
    folder = prepared_dir()
    return None if folder is None else folder / f"{key}.pt2"


def load(key: str | None) -> Runner | None:
    """The prepared step ``key``, loaded once per process; None if there is none, or if its
    package cannot be loaded (with a warning: the search then goes on without it)."""
    path = None if key is None else package_path(key)
    if path is None or not path.is_file():
        return None
    stamp = (path, path.stat().st_mtime_ns)
    if stamp not in _loaded:
        try:
            _loaded[stamp] = _load_package(path)
        except Exception as err:  # noqa: BLE001 - any failure means: search without it
            warn(
                f"cfbook: the prepared search step {path} could not be loaded "
                f"({type(err).__name__}: {str(err).strip()[:200]}); searching without it. "
                "Delete the file, or prepare it again with NativeGenerator.prepare",
                RuntimeWarning,
            )
            return None
    return _loaded[stamp]


def step_for(
    model: nn.Module,
    x0: Tensor,
    bounds: tuple[Tensor, Tensor] | None,
    step_bounds: tuple[Tensor, Tensor] | None,
    with_cost: bool,
    per_row_energy: bool,
) -> compiled.Step | None:
    """The prepared step for this search as a ``compiled.Step``, or None if none was prepared.
    The package updates the working set's buffers in place, as the compiled step does, and
    returns them; the step keeps what it returns."""
    key = layout_key(
        model, x0, bounds is not None, step_bounds is not None, with_cost, per_row_energy
    )
    runner = load(key)
    if runner is None:
        return None
    state, constraints = compiled.graph_inputs(model, bounds, step_bounds)

    def run(ws: WorkingSet, phi: Tensor, scalars: Tensor) -> None:
        ws.x, ws.nascent, ws.within, ws.active, ws.iterations = runner(
            compiled.step_arguments(state, ws, phi, scalars, constraints)
        )

    return run


def _load_package(path: Path) -> Runner:
    """AOTInductor's C++ loader: no Python import of inductor (which costs about a second)."""
    loader = torch._C._aoti.AOTIModelPackageLoader(str(path), "model", False, 1, -1)
    return loader.run


def build(
    model: nn.Module,
    x0: Tensor,
    bounds: tuple[Tensor, Tensor] | None,
    step_bounds: tuple[Tensor, Tensor] | None,
    with_cost: bool,
    per_row_energy: bool,
) -> Path:
    """Compile the step for this layout and write its package (atomically: a search in another
    process never sees half a file). Returns the package's path."""
    key = layout_key(
        model, x0, bounds is not None, step_bounds is not None, with_cost, per_row_energy
    )
    if key is None:
        raise ValueError(
            "a prepared step needs a plain MLP (nn.Sequential of nn.Linear and nn.ReLU) with "
            "float32 parameters and float32 rows on the CPU; search this model with "
            "compile=True or 'auto' instead"
        )
    path = package_path(key)
    if path is None:
        raise ValueError(
            f"prepared steps are off (CFBOOK_PREPARED_DIR={OFF}); set CFBOOK_PREPARED_DIR to a "
            "folder, or unset it, to prepare one"
        )
    state, constraints = compiled.graph_inputs(model, bounds, step_bounds)
    graph, _ = compiled.trace_step(
        model,
        state,
        x0,
        constraints,
        bounds is not None,
        step_bounds is not None,
        with_cost,
        (len(constraints), None, True),
        per_row_energy,
    )
    examples = _example_inputs(state, x0.shape[1], constraints, per_row_energy)
    rows = torch.export.Dim("rows", min=2)
    per_row = {0: rows}
    dynamic = (
        *(None for _ in state),
        *(per_row for _ in range(7)),  # x, x0, nascent, within, active, iterations, target
        per_row if per_row_energy else None,
        None,  # scalars
        *(None for _ in constraints),
    )
    with torch.no_grad():
        program = torch.export.export(
            _Returning(graph, len(state)), tuple(examples), dynamic_shapes=(dynamic,)
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.stem}.{os.getpid()}.partial.pt2")
    try:
        torch._inductor.aoti_compile_and_package(program, package_path=str(partial))
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
    return path


class _Returning(nn.Module):
    """The traced step, which updates its arguments in place, as a module that returns the
    updated ones (x, nascent, within, active, iterations): what an exported program runs."""

    def __init__(self, graph: nn.Module, n_state: int) -> None:
        super().__init__()
        self.graph = graph
        self.n_state = n_state  # the model's tensors come first, then the working set's

    def forward(self, *args: Tensor) -> tuple[Tensor, ...]:
        self.graph(*args)
        x, _, nascent, within, active, iterations = args[self.n_state : self.n_state + 6]
        return x, nascent, within, active, iterations


def _example_inputs(
    state: list[Tensor], features: int, constraints: list[Tensor], per_row_energy: bool
) -> list[Tensor]:
    """Real arguments of the step's graph for two rows (export traces with them)."""
    n = 2
    rows = [
        *(torch.zeros(n, features) for _ in range(3)),  # x, x0, nascent
        torch.ones(n, dtype=torch.bool),
        torch.ones(n, dtype=torch.bool),
        torch.zeros(n, dtype=torch.long),
        torch.zeros(n, 1, dtype=torch.long),
    ]
    phi = torch.zeros((n, 1) if per_row_energy else ())
    return [*state, *rows, phi, torch.zeros(4), *constraints]
