"""Benchmark 12 (cfbook against ReLax): it skips with the install line when the peers extra is
absent, and cfbook's side searches the problem it is given for exactly the given steps."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch

from benchmarks import peers
from benchmarks.common import Context, Skipped
from benchmarks.config import QUICK
from benchmarks.peer_side import cfbook_side, main, products


def test_without_the_peers_extra_the_benchmark_skips_naming_the_install(monkeypatch):
    # Everything present but ReLax itself.
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "relax" else 1
    )
    assert peers.missing_peers() == ["relax"]
    ctx = Context(torch.device("cpu"), True, QUICK)
    with pytest.raises(Skipped, match=r"pip install -e '\.\[peers\]' \(relax missing\)"):
        peers.run(ctx)


def _problem(n: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "w1": rng.normal(0, 0.05, (32, 784)).astype(np.float32),
        "b1": rng.normal(0, 0.05, 32).astype(np.float32),
        "w2": rng.normal(0, 0.3, (10, 32)).astype(np.float32),
        "b2": rng.normal(0, 0.05, 10).astype(np.float32),
        "x": rng.uniform(-1, 1, (n, 784)).astype(np.float32),
        "target": rng.integers(0, 10, n),
    }


def test_cfbooks_side_takes_every_step_on_every_row():
    result = cfbook_side(_problem(6), 5, 4, repeats=3, budget=0.0, compile="false", threads=1)
    assert result["mean_steps"] == 4.0  # tau = 1.0: no row stops early, as in ReLax
    assert len(result["times"]) >= 2 and result["first"] > 0


@pytest.mark.parametrize("library", ["blas", "onednn", "xla"])
def test_each_library_times_the_first_layer_s_two_products(library):
    """What benchmark 12's last table times is the product it names, in every library."""
    if library == "xla" and importlib.util.find_spec("jax") is None:
        pytest.skip("needs the peers extra")
    problem = _problem(300)
    forward, backward = products(problem, library, 200, threads=1)
    x, w1, b1 = problem["x"][:200].astype(np.float64), problem["w1"], problem["b1"]
    g = np.random.default_rng(0).standard_normal((200, 32), dtype=np.float32)
    np.testing.assert_allclose(np.asarray(forward()), x @ w1.T + b1, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.asarray(backward()), g @ w1, rtol=1e-4, atol=1e-5)


def test_the_blas_flag_turns_onednn_off_in_cfbooks_side(tmp_path, monkeypatch, capsys):
    np.savez(tmp_path / "problem.npz", **_problem(6))
    monkeypatch.setattr(torch.backends.mkldnn, "enabled", True)  # restored afterwards
    main(["cfbook", str(tmp_path / "problem.npz"), "--n", "5", "--steps", "2", "--blas"])
    assert not torch.backends.mkldnn.enabled
    assert '"mean_steps": 2.0' in capsys.readouterr().out


def test_a_side_s_rounds_combine_by_their_medians():
    rounds = [
        {"first": 3.0, "median": 5.0, "digest": "a", "mean_steps": 30.0},
        {"first": 1.0, "median": 4.0, "digest": "b", "mean_steps": 30.0},
        {"first": 2.0, "median": 9.0, "digest": "c", "mean_steps": 30.0},
    ]
    assert peers.combined(rounds) == {
        "first": 2.0,
        "median": 5.0,
        "digest": "a",
        "mean_steps": 30.0,
    }
