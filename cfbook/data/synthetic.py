"""The CT paper's four synthetic data sets in two dimensions.

By default (``generator="mlj"``) they are drawn from the distributions of MLJBase 0.21.14's
generators (``src/data/datasets_synthetic.jl``), which TaijaData.jl 1.1.7 calls with the paper's
arguments, and split as CTExperiments' ``get_data`` (``model_and_data.jl``) splits them: 100,000
points are drawn and permuted, the first 3,600 are the training part (training and validation) and
the last 900 the test part. Julia's random streams (Xoshiro256++, ``randn``, ``randperm``) cannot
be reproduced with numpy, so these are other draws from the same distributions, not the paper's
points; only the blob centres, which MLJBase draws from the RNG before anything else, are the
paper's (hard-coded below).

``generator="sklearn"`` gives the data cfbook used before: sklearn's ``make_blobs``,
``make_circles`` and ``make_moons`` with the same arguments, split 80/20 by a seeded shuffle. Three
of the four differ from MLJ's: sklearn draws its own blob centres (10 apart instead of 5.76), puts
its second moon at ``0.5 - sin t`` (MLJ: ``0.3 - sin t``) and labels the outer circle 0 (MLJ: the
inner one). Their features keep their scale, as in TaijaData. sklearn comes with the ``paper``
extra (the grid's ``sklearn_data`` variant), not with the library, and is imported only when asked
for: importing it would dominate ``import cfbook``.
"""

from __future__ import annotations

from types import ModuleType

import numpy as np
import torch

from cfbook.data.tabular import TRAIN_SHARE, TabularData, build

# CTExperiments: ntotal = round((n_train + n_validation) / train_test_ratio) = round(3600 / 0.8).
N_SAMPLES = 4500
N_DRAWN = 100_000  # get_data's ``navailable`` for the synthetic sets
DATA_SEED = 42  # TaijaData's ``data_seed``
SPLIT_SEED = 2025  # CTExperiments' global seed, ``get_rng(d) = Xoshiro(d.train_test_seed)``
GENERATORS = ("mlj", "sklearn")

# The two centres MLJBase.make_blobs(n, 2; centers=2, rng=Xoshiro(42)) draws for TaijaData's
# load_linearly_separable and load_overlapping (both ignore their seed argument and use data_seed
# 42): runif_ab(rng, 2, 2, -10, 10) = 20 .* rand(rng, 2, 2) .- 10, filled column-major, one centre
# per row. Values from shared/reference/tools/mlj_blob_centres.py, which re-derives Julia's
# Xoshiro256++ (SHA-256 seeding) in Python and checks it against the Julia manual's Xoshiro(1234)
# example; Julia itself was not run. They are 5.7617 apart: Bayes accuracy 0.9251 at std 2.0.
MLJ_BLOB_CENTRES = np.array(
    [[2.586902462852178, -0.4518571313436439], [-0.9932211880761272, 4.062596980064029]]
)


def _check(generator: str, n: int) -> None:
    if generator not in GENERATORS:
        raise ValueError(f"generator must be one of {', '.join(GENERATORS)}, got {generator!r}")
    # 80 % of the points train: fewer than 3 would leave the test part empty.
    if isinstance(n, bool) or not isinstance(n, int) or n < 3:
        raise ValueError(
            f"n must be an integer of at least 3 (80 % train, the rest test), got {n!r}"
        )


def _sklearn_datasets() -> ModuleType:
    """``sklearn.datasets``, or an error that names the extra that installs it."""
    try:
        import sklearn.datasets
    except ImportError as err:
        raise ImportError(
            'generator="sklearn" needs scikit-learn, which the library does not install: '
            "pip install 'cfbook[paper]' (or scikit-learn); the default generator=\"mlj\" "
            "needs nothing more"
        ) from err
    return sklearn.datasets


def _synthetic(
    name: str,
    x: np.ndarray,
    y: np.ndarray,
    device: torch.device | str,
    how: str,
    shuffle: bool = True,
) -> TabularData:
    table = {f"x{i + 1}": list(x[:, i]) for i in range(x.shape[1])}
    return build(name, table, y, source=how, device=device, standardise=False, shuffle=shuffle)


def _mlj_split(
    name: str, x: np.ndarray, y: np.ndarray, n: int, device: torch.device | str, how: str
) -> TabularData:
    """CTExperiments' ``get_data``: permute all drawn points (seeded), keep the first
    ``round(0.8 n)`` for training and the last ``n - round(0.8 n)`` for testing."""
    order = np.random.default_rng(SPLIT_SEED).permutation(len(y))
    n_train = round(TRAIN_SHARE * n)
    rows = np.concatenate([order[:n_train], order[len(y) - (n - n_train) :]])
    how = f"{how}, {len(y):,} drawn with numpy, permuted: first {n_train:,} train, last "
    how += f"{n - n_train:,} test (CTExperiments' get_data)"
    return _synthetic(name, x[rows], y[rows], device, how, shuffle=False)


def _finalize(
    x: np.ndarray, y: np.ndarray, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """MLJBase's ``finalize_Xy`` with its default ``shuffle=true``: the rows in random order."""
    order = rng.permutation(len(y))
    return x[order], y[order]


def mlj_blobs(
    n: int, cluster_std: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """MLJBase ``make_blobs(n, 2; centers=2, cluster_std)`` with the paper's centres: half the
    points per centre (the second takes an odd one), labels 0 and 1 for MLJ's 1 and 2. As in
    MLJBase, the ranges of rows of the two blobs share their boundary row (``nss[i]:nss[i+1]``),
    so that one point of the first blob is moved a second time, by the second blob's std and
    centre."""
    first = n // 2
    y = np.repeat([0, 1], [first, n - first])
    x = rng.standard_normal((n, 2))
    for rows, centre in zip((slice(0, first), slice(first - 1, n)), MLJ_BLOB_CENTRES, strict=True):
        x[rows] = x[rows] * cluster_std + centre
    return _finalize(x, y, rng)


def mlj_circles(
    n: int, noise: float, factor: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """MLJBase ``make_circles``: angles ~ U(0, 2 pi), the first ``n // 2`` points on the circle of
    radius ``factor`` (class 0, the inner one), the rest on the unit circle (class 1), then
    N(0, noise^2) noise on both coordinates."""
    theta = rng.uniform(0.0, 2 * np.pi, n)
    x = np.stack([np.cos(theta), np.sin(theta)], axis=1)
    inner = n // 2
    x[:inner] *= factor
    y = np.ones(n, dtype=np.int64)
    y[:inner] = 0
    return _finalize(x + noise * rng.standard_normal((n, 2)), y, rng)


def mlj_moons(
    n: int, noise: float, rng: np.random.Generator, xshift: float = 1.0, yshift: float = 0.3
) -> tuple[np.ndarray, np.ndarray]:
    """MLJBase ``make_moons`` (defaults ``xshift=1.0``, ``yshift=0.3``, which TaijaData keeps):
    angles t ~ U(0, pi); class 0 at (cos t, sin t), class 1 at (xshift + cos t, yshift - sin t);
    then N(0, noise^2) noise. As in MLJBase, an odd ``n`` puts its middle point on the first moon
    but labels it 1."""
    first = n // 2
    second = n - first
    theta = rng.uniform(0.0, np.pi, n)
    theta[second:] *= -1
    x = np.stack([np.cos(theta), np.sin(theta)], axis=1)
    x[second:] += (xshift, yshift)
    y = np.ones(n, dtype=np.int64)
    y[:first] = 0
    return _finalize(x + noise * rng.standard_normal((n, 2)), y, rng)


def _blobs(
    name: str, std: float, n: int, seed: int, device: torch.device | str, generator: str
) -> TabularData:
    _check(generator, n)
    if generator == "sklearn":
        x, y = _sklearn_datasets().make_blobs(n, centers=2, cluster_std=std, random_state=seed)
        return _synthetic(name, x, y, device, f"sklearn make_blobs(cluster_std={std})")
    x, y = mlj_blobs(max(N_DRAWN, n), std, np.random.default_rng(seed))
    how = f"MLJBase make_blobs(centers=2, cluster_std={std}), the paper's centres"
    return _mlj_split(name, x, y, n, device, how)


def load_linearly_separable(
    n: int = N_SAMPLES,
    seed: int = DATA_SEED,
    device: torch.device | str = "cpu",
    generator: str = "mlj",
) -> TabularData:
    """Two Gaussian blobs, cluster standard deviation 0.5: linearly separable. ``n`` points are
    kept (80 % training); ``seed`` seeds the draws (with ``"mlj"`` not the centres, which are the
    paper's whatever the seed, as TaijaData ignores its seed here)."""
    return _blobs("linearly_separable", 0.5, n, seed, device, generator)


def load_overlapping(
    n: int = N_SAMPLES,
    seed: int = DATA_SEED,
    device: torch.device | str = "cpu",
    generator: str = "mlj",
) -> TabularData:
    """Two Gaussian blobs, cluster standard deviation 2.0: they overlap (Bayes accuracy 0.925
    with the paper's centres, 0.994 with sklearn's)."""
    return _blobs("overlapping", 2.0, n, seed, device, generator)


def load_circles(
    n: int = N_SAMPLES,
    seed: int = DATA_SEED,
    device: torch.device | str = "cpu",
    generator: str = "mlj",
) -> TabularData:
    """A small disc inside a ring (noise 0.15, factor 0.01); with ``"mlj"`` class 0 is the inner
    disc, with ``"sklearn"`` the outer ring."""
    _check(generator, n)
    if generator == "sklearn":
        x, y = _sklearn_datasets().make_circles(n, noise=0.15, factor=0.01, random_state=seed)
        return _synthetic("circles", x, y, device, "sklearn make_circles(noise=0.15, factor=0.01)")
    x, y = mlj_circles(max(N_DRAWN, n), 0.15, 0.01, np.random.default_rng(seed))
    how = "MLJBase make_circles(noise=0.15, factor=0.01)"
    return _mlj_split("circles", x, y, n, device, how)


def load_moons(
    n: int = N_SAMPLES,
    seed: int = DATA_SEED,
    device: torch.device | str = "cpu",
    generator: str = "mlj",
) -> TabularData:
    """Two interleaved half-moons, noise 0.1 (MLJ's default); with ``"mlj"`` the second moon is
    centred at (1, 0.3), with ``"sklearn"`` at (1, 0.5)."""
    _check(generator, n)
    if generator == "sklearn":
        x, y = _sklearn_datasets().make_moons(n, noise=0.1, random_state=seed)
        return _synthetic("moons", x, y, device, "sklearn make_moons(noise=0.1)")
    x, y = mlj_moons(max(N_DRAWN, n), 0.1, np.random.default_rng(seed))
    how = "MLJBase make_moons(noise=0.1, xshift=1.0, yshift=0.3)"
    return _mlj_split("moons", x, y, n, device, how)
