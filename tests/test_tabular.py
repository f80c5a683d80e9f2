"""Tests for the tabular and synthetic data sets: preprocessing by hand, the shipped files, and
the errors for a missing or altered file."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import REPO

from cfbook.data import (
    load_adult,
    load_california_housing,
    load_circles,
    load_credit_default,
    load_gmsc,
    load_linearly_separable,
    load_moons,
    load_overlapping,
)
from cfbook.data.tabular import MD5, build, infer_domain, read_verified, split_rows

TABLE = {"size": ["1", "2", "3", "4", "10"], "colour": ["red", "blue", "red", "green", "blue"]}
LABELS = np.array([0, 1, 0, 1, 1])


def test_split_rows_is_a_seeded_disjoint_80_20_cut():
    train, test = split_rows(10, seed=3)
    assert len(train) == 8 and len(test) == 2
    assert sorted([*train, *test]) == list(range(10))
    again = split_rows(10, seed=3)
    assert (train == again[0]).all() and not (train == split_rows(10, seed=4)[0]).all()


def test_build_standardises_on_the_training_rows_and_one_hot_encodes_in_place():
    data = build("toy", TABLE, LABELS, ["colour"], source="hand", seed=3)
    train, test = split_rows(5, seed=3)
    sizes = np.array([1.0, 2, 3, 4, 10])
    mu, sd = sizes[train].mean(), sizes[train].std(ddof=1)  # the training rows only
    assert data.columns == ["size", "colour=blue", "colour=green", "colour=red"]
    assert data.features == {"size": [0], "colour": [1, 2, 3]}
    expected = np.stack(
        [(sizes - mu) / sd, [0, 1, 0, 0, 1], [0, 0, 0, 1, 0], [1, 0, 1, 0, 0]], axis=1
    )
    assert torch.allclose(data.x, torch.tensor(expected[train], dtype=torch.float32))
    assert torch.allclose(data.x_test, torch.tensor(expected[test], dtype=torch.float32))
    assert data.y.tolist() == LABELS[train].tolist() and data.y.dtype == torch.long
    assert data.x[:, 0].mean().abs() < 1e-6  # standardised where it was fitted


def test_domain_is_two_standard_deviations_or_the_range_whichever_is_wider():
    x = np.array([[0.0, 0.0], [0.0, 1.0], [0.0, 2.0], [10.0, 3.0]])
    # Column 1: mean 2.5, sd 5 -> [-7.5, 12.5]; column 2: mean 1.5, sd 1.29 -> [-1.08, 4.08].
    (low1, high1), (low2, high2) = infer_domain(x)
    assert (low1, high1) == pytest.approx((-7.5, 12.5))
    sd2 = np.std([0, 1, 2, 3], ddof=1)
    assert (low2, high2) == pytest.approx((1.5 - 2 * sd2, 1.5 + 2 * sd2))
    outlier = np.array([[0.0]] * 20 + [[10.0]])  # mu + 2 sd is 4.84: the max is wider
    assert infer_domain(outlier)[0][1] == 10.0


def test_mutability_by_feature_name_covers_a_categoricals_columns():
    data = build("toy", TABLE, LABELS, ["colour"], source="hand")
    assert data.mutability(["colour"]) == ["both", "none", "none", "none"]
    assert data.mutability(["size"]) == ["none", "both", "both", "both"]
    assert data.mutability() == ["both"] * 4
    with pytest.raises(ValueError, match="no feature 'age'.*size, colour"):
        data.mutability(["age"])


@pytest.mark.parametrize(
    ("loader", "n_rows", "n_columns", "n_features"),
    [
        (load_adult, 32_561, 108, 14),
        (load_california_housing, 20_630, 8, 8),
        (load_credit_default, 13_272, 33, 23),
        (load_gmsc, 16_714, 10, 10),
        (load_linearly_separable, 4_500, 2, 2),
        (load_overlapping, 4_500, 2, 2),
        (load_circles, 4_500, 2, 2),
        (load_moons, 4_500, 2, 2),
    ],
)
def test_each_data_set_has_its_size_columns_labels_and_a_domain_around_its_data(
    loader, n_rows, n_columns, n_features
):
    data = loader()
    assert data.x.shape == (round(0.8 * n_rows), n_columns)
    assert data.x_test.shape == (n_rows - round(0.8 * n_rows), n_columns)
    assert len(data.columns) == n_columns and len(data.features) == n_features
    assert set(data.y.unique().tolist()) == {0, 1} == set(data.y_test.unique().tolist())
    low = torch.tensor([d[0] for d in data.domain])
    high = torch.tensor([d[1] for d in data.domain])
    assert (data.x >= low - 1e-5).all() and (data.x <= high + 1e-5).all()
    # Only a level that no training row has (a one-hot column of zeros) has a point domain.
    point = (high - low == 0).nonzero().flatten().tolist()
    assert all("=" in data.columns[c] and not data.x[:, c].any() for c in point)


def test_the_papers_protected_features_sit_where_the_paper_says():
    # Credit default: AGE is column 15 (1-based) after the one-hot SEX, EDUCATION, MARRIAGE.
    credit = load_credit_default()
    assert credit.features["AGE"] == [14]
    assert credit.features["EDUCATION"] == list(range(3, 10))
    assert load_adult().features["age"] == [0]
    assert load_california_housing().features["HouseAge"] == [1]
    assert load_gmsc().features["age"] == [1]
    assert load_moons().features["x1"] == [0]


def test_a_missing_or_altered_file_is_named_with_its_checksum_and_the_fix(tmp_path: Path):
    name = "gmsc_balanced.csv.gz"
    (tmp_path / "tabular").mkdir()
    with pytest.raises(FileNotFoundError, match=f"tabular/{name} is missing.*{MD5[name]}"):
        read_verified(name, tmp_path)
    shutil.copy(REPO / "data" / "tabular" / name, tmp_path / "tabular" / name)
    assert read_verified(name, tmp_path).startswith("target,")
    text = gzip.decompress((tmp_path / "tabular" / name).read_bytes())
    (tmp_path / "tabular" / name).write_bytes(gzip.compress(text.replace(b"70", b"71", 1)))
    with pytest.raises(ValueError, match=f"expected {MD5[name]}.*git checkout -- data/tabular"):
        read_verified(name, tmp_path)
    (tmp_path / "tabular" / name).write_bytes(b"not gzip")
    with pytest.raises(ValueError, match="not a readable gzip file"):
        read_verified(name, tmp_path)
    with pytest.raises(FileNotFoundError):
        load_gmsc(data_dir=tmp_path / "elsewhere")
