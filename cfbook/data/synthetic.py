"""The CT paper's four synthetic data sets in two dimensions, made with sklearn's seeded
generators (the Python equivalents of the MLJ generators TaijaData uses), split 80/20 like the
tabular sets. Their features keep their scale, as in TaijaData."""

from __future__ import annotations

import numpy as np
import torch
from sklearn.datasets import make_blobs, make_circles, make_moons

from cfbook.data.tabular import TabularData, build

# 3,000 training and 600 validation samples are 80 % of the whole, as in CT.jl.
N_SAMPLES = 4500
DATA_SEED = 42


def _synthetic(
    name: str, x: np.ndarray, y: np.ndarray, device: torch.device | str, how: str
) -> TabularData:
    table = {f"x{i + 1}": list(x[:, i]) for i in range(x.shape[1])}
    return build(name, table, y, source=how, device=device, standardise=False)


def load_linearly_separable(
    n: int = N_SAMPLES, seed: int = DATA_SEED, device: torch.device | str = "cpu"
) -> TabularData:
    """Two Gaussian blobs, cluster standard deviation 0.5: linearly separable."""
    x, y = make_blobs(n, centers=2, cluster_std=0.5, random_state=seed)
    return _synthetic("linearly_separable", x, y, device, "make_blobs(cluster_std=0.5)")


def load_overlapping(
    n: int = N_SAMPLES, seed: int = DATA_SEED, device: torch.device | str = "cpu"
) -> TabularData:
    """Two Gaussian blobs, cluster standard deviation 2.0: they overlap."""
    x, y = make_blobs(n, centers=2, cluster_std=2.0, random_state=seed)
    return _synthetic("overlapping", x, y, device, "make_blobs(cluster_std=2.0)")


def load_circles(
    n: int = N_SAMPLES, seed: int = DATA_SEED, device: torch.device | str = "cpu"
) -> TabularData:
    """A small disc inside a ring (noise 0.15, factor 0.01)."""
    x, y = make_circles(n, noise=0.15, factor=0.01, random_state=seed)
    return _synthetic("circles", x, y, device, "make_circles(noise=0.15, factor=0.01)")


def load_moons(
    n: int = N_SAMPLES, seed: int = DATA_SEED, device: torch.device | str = "cpu"
) -> TabularData:
    """Two interleaved half-moons, noise 0.1 (MLJ's default)."""
    x, y = make_moons(n, noise=0.1, random_state=seed)
    return _synthetic("moons", x, y, device, "make_moons(noise=0.1)")
