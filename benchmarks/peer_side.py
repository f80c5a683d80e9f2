"""One side of benchmark 12, in a process of its own: ReLax's ``VanillaCF`` or cfbook's search,
timed on the problem the parent wrote (MLP weights, digits, targets in one ``.npz``).

    python -m benchmarks.peer_side relax|cfbook PROBLEM --n N --steps S [--compile auto|true]
        [--batch ROWS] [--blas]
    python -m benchmarks.peer_side prepare PROBLEM
    python -m benchmarks.peer_side products PROBLEM --n N --library blas|onednn|xla

Prints one JSON line: the first call's seconds (tracing and compiling included), the seconds of
each later call, and the mean number of steps the rows took; ``prepare`` builds cfbook's
prepared step for the problem's layout (``NativeGenerator.prepare``) and prints its seconds;
``products`` times the first layer's two products alone in one library. ``--blas`` turns
oneDNN off in cfbook (``cfbook.search.onednn``): its products are then MKL's, as autograd's.
Each side runs alone in its process, so torch's and XLA's thread pools never meet and "first
call" means first in a process.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np

LOW, HIGH = -1.0, 1.0  # MNIST scaled to [-1, 1]; both sides clip every step to it


def _repeat(call: Callable[[], Any], repeats: int, budget: float) -> tuple[float, list[float], Any]:
    """The first call's seconds, then at least two and at most ``repeats`` more within
    ``budget`` seconds (the last result returned)."""
    start = time.perf_counter()
    out = call()
    first = time.perf_counter() - start
    times: list[float] = []
    began = time.perf_counter()
    while len(times) < repeats and (len(times) < 2 or time.perf_counter() - began < budget):
        start = time.perf_counter()
        out = call()
        times.append(time.perf_counter() - start)
    return first, times, out


def relax_side(problem: dict[str, np.ndarray], n: int, steps: int, repeats: int, budget: float):
    """ReLax 0.2.9's ``VanillaCF`` (RMSprop, lr 0.1, lambda 0.1), ``jax.jit`` around ``vmap``
    over the rows, as ReLax's own batch generation does, with the domain clipped every step."""
    os.environ.setdefault("KERAS_BACKEND", "jax")
    import jax
    import jax.numpy as jnp
    from relax.methods.vanilla import VanillaCF

    w1, b1, w2, b2 = (jnp.asarray(problem[k]) for k in ("w1", "b1", "w2", "b2"))

    def predict(x):
        return jax.nn.softmax(jax.nn.relu(x @ w1.T + b1) @ w2.T + b2)

    method = VanillaCF({"n_steps": steps, "lr": 0.1, "lambda_": 0.1})
    method.set_apply_constraints_fn(lambda x, cf, hard: jnp.clip(cf, LOW, HIGH))
    x = jnp.asarray(problem["x"][:n])
    target = jax.nn.one_hot(jnp.asarray(problem["target"][:n]), w2.shape[0])
    keys = jax.random.split(jax.random.PRNGKey(0), n)
    search = jax.jit(jax.vmap(lambda xi, yi, k: method.generate_cf(xi, predict, yi, rng_key=k)))
    first, times, _ = _repeat(lambda: search(x, target, keys).block_until_ready(), repeats, budget)
    return {"first": first, "times": times, "mean_steps": float(steps)}


def _model(problem: dict[str, np.ndarray]) -> Any:
    """The problem's 784-32-10 MLP as cfbook builds it."""
    import torch

    from cfbook.models import mlp

    model = mlp()
    state = {
        "0.weight": problem["w1"],
        "0.bias": problem["b1"],
        "2.weight": problem["w2"],
        "2.bias": problem["b2"],
    }
    model.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()})
    return model.eval()


def cfbook_side(
    problem: dict[str, np.ndarray],
    n: int,
    steps: int,
    repeats: int,
    budget: float,
    compile: str,
    threads: int,
    batch: int = 0,
):
    """cfbook's ``NativeGenerator`` with its defaults but ``maxiter``, ``compile`` and, where
    ``batch`` is not 0, ``cf_batchsize``, and tau 1.0 so that no row stops early: every row takes
    ``steps`` steps, as ReLax's do. ``digest`` fingerprints the results' bits."""
    import torch

    from cfbook.search.generators import NativeGenerator

    torch.set_num_threads(threads)
    model = _model(problem)
    x = torch.from_numpy(problem["x"][:n])
    target = torch.from_numpy(problem["target"][:n]).long()
    setting: bool | str = {"auto": "auto", "true": True, "false": False}[compile]
    search = NativeGenerator(maxiter=steps, tau=1.0, compile=setting, cf_batchsize=batch or None)
    first, times, out = _repeat(
        lambda: search.generate(model, x, target, domain=(LOW, HIGH)), repeats, budget
    )
    digest = hashlib.sha256(out.counterfactual.numpy().tobytes())
    digest.update(out.nascent.numpy().tobytes())
    return {
        "first": first,
        "times": times,
        "mean_steps": float(out.iterations.float().mean()),
        "digest": digest.hexdigest(),
    }


def products(
    problem: dict[str, np.ndarray], library: str, n: int, threads: int
) -> tuple[Callable[[], Any], Callable[[], Any]]:
    """The first layer's forward product (``x @ w1.T + b1``, n x 784 by 784 x 32) and its
    backward one (``g @ w1``, n x 32 by 32 x 784, g fixed random) as calls in torch's BLAS (MKL
    on x86), in oneDNN as cfbook calls it, or in XLA (jit); each returns its result, computed."""
    x, w1, b1 = problem["x"][:n], problem["w1"], problem["b1"]
    g = np.random.default_rng(0).standard_normal((n, w1.shape[0]), dtype=np.float32)
    if library == "xla":
        import jax
        import jax.numpy as jnp

        x, w1, b1, g = (jnp.asarray(a) for a in (x, w1, b1, g))
        forward_fn = jax.jit(lambda x, w, b: x @ w.T + b)
        backward_fn = jax.jit(lambda g, w: g @ w)
        return (
            lambda: forward_fn(x, w1, b1).block_until_ready(),
            lambda: backward_fn(g, w1).block_until_ready(),
        )
    import torch

    from cfbook.search import onednn

    torch.set_num_threads(threads)
    x, w1, b1, g = (torch.from_numpy(a) for a in (x, w1, b1, g))
    if library == "onednn":
        w1t = w1.t().contiguous()
        return lambda: onednn.linear(x, w1, b1), lambda: onednn.linear(g, w1t)
    return lambda: torch.addmm(b1, x, w1.t()), lambda: torch.mm(g, w1)


def products_side(
    problem: dict[str, np.ndarray], library: str, n: int, threads: int
) -> dict[str, float]:
    """Seconds per call of ``products``' two calls: the median of 7 timings of 50 calls."""

    def per_call(fn: Callable[[], Any]) -> float:
        for _ in range(20):
            fn()
        timings = []
        for _ in range(7):
            start = time.perf_counter()
            for _ in range(50):
                fn()
            timings.append((time.perf_counter() - start) / 50)
        return float(np.median(timings))

    forward, backward = products(problem, library, n, threads)
    return {"forward": per_call(forward), "backward": per_call(backward)}


def prepare_side(problem: dict[str, np.ndarray], threads: int) -> dict[str, Any]:
    """Build the prepared step that ``cfbook_side``'s searches take where
    ``CFBOOK_PREPARED_DIR`` names its folder: the same model, domain and thread count."""
    import torch

    from cfbook.search.generators import NativeGenerator

    torch.set_num_threads(threads)
    model = _model(problem)
    start = time.perf_counter()
    path = NativeGenerator().prepare(model, torch.from_numpy(problem["x"][:2]), domain=(LOW, HIGH))
    return {"seconds": time.perf_counter() - start, "path": str(path)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.peer_side")
    parser.add_argument("side", choices=("relax", "cfbook", "prepare", "products"))
    parser.add_argument("problem")
    parser.add_argument("--n", type=int, default=0)
    parser.add_argument("--steps", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--budget", type=float, default=10.0)
    parser.add_argument("--compile", choices=("auto", "true", "false"), default="auto")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--batch", type=int, default=0, help="cf_batchsize (0: the default)")
    parser.add_argument("--blas", action="store_true", help="cfbook without oneDNN")
    parser.add_argument("--library", choices=("blas", "onednn", "xla"), default="blas")
    args = parser.parse_args(argv)
    if args.blas:
        import torch

        torch.backends.mkldnn.enabled = False
    with np.load(args.problem) as stored:
        problem = {k: stored[k] for k in stored.files}
    if args.side == "prepare":
        result = prepare_side(problem, args.threads)
    elif args.side == "products":
        result = products_side(problem, args.library, args.n, args.threads)
    elif args.side == "relax":
        result = relax_side(problem, args.n, args.steps, args.repeats, args.budget)
    else:
        result = cfbook_side(
            problem,
            args.n,
            args.steps,
            args.repeats,
            args.budget,
            args.compile,
            args.threads,
            args.batch,
        )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
