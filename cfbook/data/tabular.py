"""Tabular data sets as on-device tensors, preprocessed as the CT paper's experiments do.

Every loader returns a :class:`TabularData`: the paper's train/test split (the first 80 % of
the file's rows train, the rest test, unshuffled, as TaijaData.jl's ``apply_split`` cuts them for
the CT experiments; ``shuffle=True`` shuffles them first, seeded), numeric features standardised
with the training part's mean and standard deviation, categorical
features one-hot encoded in place (their columns where the feature stood), the domain inferred per
column from the training part as CT.jl's ``infer_domain_constraints`` does, and mutability by
feature name, a protected categorical covering all of its columns.

The real-world files are those the paper's Julia packages serve (``data/tabular/``, verified by
MD5 before use); ``synthetic`` makes the paper's four two-dimensional sets.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from cfbook.data.loader import DeviceLoader
from cfbook.data.paths import display_path, find_data_dir

TRAIN_SHARE = 0.8
SPLIT_SEED = 2025  # CT.jl's global seed for the train/test split

# MD5 of the uncompressed content (data/README.md lists the sources and licences).
MD5 = {
    "adult.data.gz": "5d7c39d7b8804f071cdd1f2a7c460872",
    "california_housing_balanced.csv.gz": "98fa6bee562d147159e779fe8ea4c850",
    "credit_default_balanced.csv.gz": "7a6ad52a89d7db6f69fff2a41ddadaea",
    "gmsc_balanced.csv.gz": "7f5c4d6a796ab440a1ffb940a99c97ea",
}

# Where each file comes from, for a user without the repository's copy (data/README.md).
SOURCES = {
    "adult.data.gz": "UCI's adult.data (https://archive.ics.uci.edu/dataset/2/adult)",
    "california_housing_balanced.csv.gz": (
        "TaijaData.jl's california_housing.csv (https://github.com/JuliaTrustworthyAI/TaijaData.jl)"
    ),
    "credit_default_balanced.csv.gz": (
        "TaijaData.jl's credit_default.csv (https://github.com/JuliaTrustworthyAI/TaijaData.jl)"
    ),
    "gmsc_balanced.csv.gz": (
        "TaijaData.jl's gmsc.csv (https://github.com/JuliaTrustworthyAI/TaijaData.jl)"
    ),
}

ADULT_COLUMNS = (
    "age",
    "workclass",
    "fnlwgt",
    "education",
    "education_num",
    "marital_status",
    "occupation",
    "relationship",
    "race",
    "sex",
    "capital_gain",
    "capital_loss",
    "hours_per_week",
    "country",
)
ADULT_CATEGORICAL = (
    "workclass",
    "education",
    "marital_status",
    "occupation",
    "relationship",
    "race",
    "sex",
    "country",
)


@dataclass
class TabularData:
    """A tabular data set on one device: ``x`` (n, d) float32 and ``y`` int64 labels for
    training, ``x_test`` / ``y_test`` held out. ``features`` maps each original feature to its
    columns (one for a numeric feature, one per level for a categorical one); ``columns`` names
    every column; ``domain`` bounds each column; ``one_hot`` maps each categorical feature to
    its one-hot columns (see ``categorical_groups``)."""

    name: str
    x: torch.Tensor
    y: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    columns: list[str]
    features: dict[str, list[int]]
    domain: list[tuple[float, float]]
    source: str
    one_hot: dict[str, list[int]] = field(default_factory=dict)

    def categorical_groups(self, substring_match: bool = True) -> list[list[int]]:
        """The one-hot groups for the search (``generate(..., categorical=...)``), one list of
        column indices per categorical feature; [] when there are none.

        ``substring_match=True`` (default) gives the groups that the CT paper's experiments pass
        to the test-time search: CTExperiments' ``get_cats`` (``tabular.jl``) takes them from
        TaijaData.jl, whose ``get_categorical_indices`` (``src/utils.jl``) puts into a feature's
        group every column whose name contains the feature's name, so that Adult's
        ``education`` group also takes the numeric ``education_num`` column: the decoding then
        sets it to 0 or 1, and where its standardised value exceeds 1 (a quarter of Adult's
        rows) picks it over every education level, leaving none. ``False``: each categorical
        feature's own one-hot columns only. The two differ only where a column name contains a
        categorical feature's name (of the shipped data sets, only in Adult). A group must be
        wholly mutable or wholly immutable: with the default, protect ``education`` and
        ``education_num`` together."""
        if not substring_match:
            return [list(cols) for cols in self.one_hot.values()]
        return [
            [c for c, name in enumerate(self.columns) if feature in name]
            for feature in self.one_hot
        ]

    def mutability(self, immutable: Sequence[str] = ()) -> list[str]:
        """Per-column mutability for the search: ``"none"`` for every column of the features
        named in ``immutable`` (a categorical's whole one-hot group), ``"both"`` elsewhere."""
        unknown = [f for f in immutable if f not in self.features]
        if unknown:
            raise ValueError(
                f"{self.name} has no feature {', '.join(map(repr, unknown))}; its features are "
                f"{', '.join(self.features)}"
            )
        protected = {c for f in immutable for c in self.features[f]}
        return ["none" if c in protected else "both" for c in range(len(self.columns))]

    def loader(self, batch_size: int = 1000, shuffle: bool = True, seed: int = 0) -> DeviceLoader:
        """Training batches, shuffled on the device."""
        return DeviceLoader(self.x, self.y, batch_size, shuffle=shuffle, seed=seed)


def read_verified(name: str, root: str | Path | None = None) -> str:
    """The text of ``<root>/tabular/<name>`` (``root``: the data folder, by default
    ``find_data_dir()``) after checking its MD5; a clear error if the file is missing, saying
    where it goes and where to get it, or if it is not the expected one."""
    root = Path(root).expanduser() if root is not None else find_data_dir()
    path = root / "tabular" / name
    expected = MD5[name]
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} is missing (expected MD5 {expected} of its uncompressed content). A clone "
            "of cfbook's repository ships it: `git checkout -- data/tabular` restores it. "
            f"Installed from a wheel, get {SOURCES[name]}, gzip it to {path} and pass "
            "root=<that data folder> or set CFBOOK_DATA_DIR"
        )
    try:
        raw = gzip.decompress(path.read_bytes())
    except (OSError, EOFError) as err:
        raise ValueError(f"{display_path(path, root)} is not a readable gzip file ({err})") from err
    got = hashlib.md5(raw).hexdigest()
    if got != expected:
        raise ValueError(
            f"{display_path(path, root)} has MD5 {got}, expected {expected}: the file is "
            "corrupt or another version; restore it with `git checkout -- data/tabular`"
        )
    return raw.decode("utf-8")


def infer_domain(x: np.ndarray) -> list[tuple[float, float]]:
    """Per column [min(mu - 2 sd, min), max(mu + 2 sd, max)], as CT.jl infers domains."""
    mu, sd = x.mean(0), x.std(0, ddof=1)
    low, high = np.minimum(mu - 2 * sd, x.min(0)), np.maximum(mu + 2 * sd, x.max(0))
    return [(float(a), float(b)) for a, b in zip(low, high, strict=True)]


def split_rows(
    n: int, seed: int = SPLIT_SEED, shuffle: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """``n`` rows cut into the training and the test rows (80/20): a seeded shuffle first,
    or with ``shuffle=False`` the first ``round(0.8 n)`` rows in order (TaijaData's
    ``apply_split``, which the CT experiments use)."""
    if not shuffle:
        order = np.arange(n)
    else:
        order = torch.randperm(n, generator=torch.Generator().manual_seed(seed)).numpy()
    cut = round(TRAIN_SHARE * n)
    return order[:cut], order[cut:]


def build(
    name: str,
    table: dict[str, list[str]],
    labels: np.ndarray,
    categorical: Sequence[str] = (),
    *,
    source: str,
    device: torch.device | str = "cpu",
    seed: int = SPLIT_SEED,
    standardise: bool = True,
    shuffle: bool = True,
) -> TabularData:
    """Split (see :func:`split_rows`: seeded, or in row order with ``shuffle=False``),
    standardise the numeric features on the training rows (unless ``standardise`` is False),
    one-hot encode the categorical ones in place, infer the domain, and move it all to
    ``device``."""
    train, test = split_rows(len(labels), seed, shuffle)
    blocks, columns, features = [], [], {}
    one_hot: dict[str, list[int]] = {}  # the categorical features' one-hot columns
    for feature, values in table.items():
        start = len(columns)
        if feature in categorical:
            levels = sorted(set(values))
            code = {level: i for i, level in enumerate(levels)}
            codes = np.array([code[v] for v in values])
            blocks.append(np.eye(len(levels), dtype=np.float64)[codes])
            columns += [f"{feature}={level}" for level in levels]
        else:
            col = np.asarray(values, dtype=np.float64)
            if standardise:
                mu, sd = col[train].mean(), col[train].std(ddof=1)
                col = (col - mu) / (sd if sd > 0 else 1.0)
            blocks.append(col[:, None])
            columns.append(feature)
        features[feature] = list(range(start, len(columns)))
        if feature in categorical:
            one_hot[feature] = features[feature]
    x = torch.as_tensor(np.concatenate(blocks, axis=1), dtype=torch.float32)
    y = torch.as_tensor(labels, dtype=torch.long)
    train_rows, test_rows = torch.as_tensor(train), torch.as_tensor(test)
    return TabularData(
        name=name,
        x=x[train_rows].to(device),
        y=y[train_rows].to(device),
        x_test=x[test_rows].to(device),
        y_test=y[test_rows].to(device),
        columns=columns,
        features=features,
        one_hot=one_hot,
        domain=infer_domain(x[train_rows].double().numpy()),
        source=source,
    )


def _csv_table(text: str, target: str) -> tuple[dict[str, list[str]], np.ndarray]:
    rows = list(csv.DictReader(io.StringIO(text)))
    names = [c for c in rows[0] if c != target]
    labels = np.array([round(float(r[target])) for r in rows])
    return {c: [r[c] for r in rows] for c in names}, labels


def load_california_housing(
    root: str | Path | None = None,
    device: torch.device | str = "cpu",
    shuffle: bool = False,
) -> TabularData:
    """California housing (Pace and Barry, 1997): 8 numeric features; 1 = median house value
    at or above the median; 20,630 rows, balanced."""
    table, y = _csv_table(read_verified("california_housing_balanced.csv.gz", root), "target")
    return build(
        "california_housing",
        table,
        y,
        source="CT.jl's balanced CSV",
        device=device,
        shuffle=shuffle,
    )


def load_credit_default(
    root: str | Path | None = None,
    device: torch.device | str = "cpu",
    shuffle: bool = False,
) -> TabularData:
    """Default of credit card clients (Yeh, 2009): 23 features, SEX, EDUCATION and MARRIAGE
    categorical (AGE is then column 15, as in the paper); 1 = no default; 13,272 rows."""
    table, y = _csv_table(read_verified("credit_default_balanced.csv.gz", root), "target")
    cats = ("SEX", "EDUCATION", "MARRIAGE")
    return build(
        "credit_default",
        table,
        y,
        cats,
        source="CT.jl's balanced CSV",
        device=device,
        shuffle=shuffle,
    )


def load_gmsc(
    root: str | Path | None = None,
    device: torch.device | str = "cpu",
    shuffle: bool = False,
) -> TabularData:
    """Give Me Some Credit (Kaggle, 2011): 10 numeric features; 1 = no serious delinquency;
    16,714 rows, balanced, rows with missing values dropped."""
    table, y = _csv_table(read_verified("gmsc_balanced.csv.gz", root), "target")
    return build("gmsc", table, y, source="CT.jl's balanced CSV", device=device, shuffle=shuffle)


def load_adult(
    root: str | Path | None = None,
    device: torch.device | str = "cpu",
    shuffle: bool = False,
) -> TabularData:
    """UCI Adult (Becker and Kohavi, 1996), its training file (32,561 rows) as the paper uses
    it: 6 numeric and 8 categorical features ("?" is a level of its own); 1 = income > 50K.

    TaijaData serves a processed copy of this file; we read UCI's own, so its columns may differ
    from the paper's in details we could not check (such as ``fnlwgt``)."""
    text = read_verified("adult.data.gz", root)
    rows = [r for r in csv.reader(io.StringIO(text), skipinitialspace=True) if r]
    table = {c: [r[i] for r in rows] for i, c in enumerate(ADULT_COLUMNS)}
    y = np.array([int(r[-1] == ">50K") for r in rows])
    return build(
        "adult",
        table,
        y,
        ADULT_CATEGORICAL,
        source="UCI adult.data",
        device=device,
        shuffle=shuffle,
    )
