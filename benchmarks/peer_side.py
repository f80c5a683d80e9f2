"""One side of the peers benchmark, in a process of its own: ReLax's ``VanillaCF`` or cfbook's
search, timed on the problem the parent wrote (MLP weights, digits, targets in one ``.npz``).

    python -m benchmarks.peer_side relax|cfbook PROBLEM --n N --steps S [--compile]
    python -m benchmarks.peer_side relax|cfbook PROBLEM --n N --steps S --products

Prints one JSON line: the first call's seconds (tracing and compiling included), the seconds of
each later call, and the mean number of steps the rows took. With ``--products`` a call is
``steps`` steps of the first layer's two products alone (the forward ``x W1^T`` and the input
gradient ``g W1``, with an update that makes each step's input the last step's output), as each
library computes them. Each side runs alone in its
process, so torch's and XLA's thread pools never meet and "first call" means first in a process.
"""

from __future__ import annotations

import argparse
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


def relax_side(
    problem: dict[str, np.ndarray], n: int, steps: int, repeats: int, budget: float
) -> dict[str, Any]:
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


def relax_products(
    problem: dict[str, np.ndarray], n: int, steps: int, repeats: int, budget: float
) -> dict[str, Any]:
    """``steps`` steps' two products with the first layer's weights under ``jax.jit``, one
    step after another (each step's product feeds the next, as in a search)."""
    import jax
    import jax.numpy as jnp

    w1 = jnp.asarray(problem["w1"])
    x = jnp.asarray(problem["x"][:n])

    def products(x):
        def step(_, x):
            return (x @ w1.T) @ w1 * 1e-3 + x

        return jax.lax.fori_loop(0, steps, step, x)

    search = jax.jit(products)
    first, times, _ = _repeat(lambda: search(x).block_until_ready(), repeats, budget)
    return {"first": first, "times": times, "mean_steps": float(steps)}


def cfbook_products(
    problem: dict[str, np.ndarray], n: int, steps: int, repeats: int, budget: float, threads: int
) -> dict[str, Any]:
    """``steps`` steps' two products with the first layer's weights as torch computes them
    (both executors call the same matrix product), one step after another."""
    import torch

    torch.set_num_threads(threads)
    w1 = torch.from_numpy(problem["w1"])
    x0 = torch.from_numpy(problem["x"][:n])

    def products():
        x = x0
        for _ in range(steps):
            x = torch.addmm(x, x @ w1.T, w1, alpha=1e-3)
        return x

    first, times, _ = _repeat(products, repeats, budget)
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
    compile: bool,
    threads: int,
) -> dict[str, Any]:
    """cfbook's ``NativeGenerator`` with its defaults but ``maxiter``, ``compile`` and tau 1.0,
    so that no row stops early: every row takes ``steps`` steps, as ReLax's do."""
    import torch

    from cfbook.search.generators import NativeGenerator

    torch.set_num_threads(threads)
    model = _model(problem)
    x = torch.from_numpy(problem["x"][:n])
    target = torch.from_numpy(problem["target"][:n]).long()
    search = NativeGenerator(maxiter=steps, tau=1.0, compile=compile)
    first, times, out = _repeat(
        lambda: search.generate(model, x, target, domain=(LOW, HIGH)), repeats, budget
    )
    return {"first": first, "times": times, "mean_steps": float(out.iterations.float().mean())}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.peer_side")
    parser.add_argument("side", choices=("relax", "cfbook"))
    parser.add_argument("problem")
    parser.add_argument("--n", type=int, required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--budget", type=float, default=10.0)
    parser.add_argument("--compile", action="store_true", help="cfbook: compile=True")
    parser.add_argument(
        "--products", action="store_true", help="time the first layer's products alone"
    )
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args(argv)
    with np.load(args.problem) as stored:
        problem = {k: stored[k] for k in stored.files}
    if args.products and args.side == "relax":
        result = relax_products(problem, args.n, args.steps, args.repeats, args.budget)
    elif args.products:
        result = cfbook_products(
            problem, args.n, args.steps, args.repeats, args.budget, args.threads
        )
    elif args.side == "relax":
        result = relax_side(problem, args.n, args.steps, args.repeats, args.budget)
    else:
        result = cfbook_side(
            problem, args.n, args.steps, args.repeats, args.budget, args.compile, args.threads
        )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
