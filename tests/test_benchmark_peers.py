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
from benchmarks.peer_side import cfbook_side


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
