"""Tests for the tabular and synthetic data sets: preprocessing by hand, the shipped files, and
the errors for a missing or altered file."""

from __future__ import annotations

import csv
import gzip
import io
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
from cfbook.data.loader import DeviceLoader
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


def test_a_narrow_column_is_scaled_up_and_a_constant_one_only_centred():
    # sd 0.1 on the training rows: divided by it, to sd 1; sd 0: centred, not divided by 0.
    table = {"narrow": ["0.0", "0.1", "0.2", "0.3", "0.4"], "flat": ["7", "7", "7", "7", "7"]}
    data = build("toy", table, LABELS, source="hand", shuffle=False)  # training rows 0-3
    narrow = (np.array([0.0, 0.1, 0.2, 0.3, 0.4]) - 0.15) / np.std([0, 0.1, 0.2, 0.3], ddof=1)
    assert torch.allclose(data.x[:, 0], torch.tensor(narrow[:4], dtype=torch.float32))
    assert torch.allclose(data.x_test[:, 0], torch.tensor(narrow[4:], dtype=torch.float32))
    assert data.x[:, 1].tolist() == [0.0] * 4 and data.x_test[:, 1].tolist() == [0.0]


def test_domain_is_two_standard_deviations_or_the_range_whichever_is_wider():
    x = np.array([[0.0, 0.0], [0.0, 1.0], [0.0, 2.0], [10.0, 3.0]])
    # Column 1: mean 2.5, sd 5 -> [-7.5, 12.5]; column 2: mean 1.5, sd 1.29 -> [-1.08, 4.08].
    (low1, high1), (low2, high2) = infer_domain(x)
    assert (low1, high1) == pytest.approx((-7.5, 12.5))
    sd2 = np.std([0, 1, 2, 3], ddof=1)
    assert (low2, high2) == pytest.approx((1.5 - 2 * sd2, 1.5 + 2 * sd2))
    outlier = np.array([[0.0]] * 20 + [[10.0]])  # mu + 2 sd is 4.84: the max is wider
    assert infer_domain(outlier)[0][1] == 10.0
    assert infer_domain(-outlier)[0][0] == -10.0  # and the min at the low end
    # Each column on its own: column 2 (mean 100.2, sd 0.447) ignores column 1's values.
    apart = np.array([[0.0, 100.0]] * 4 + [[10.0, 101.0]])
    assert infer_domain(apart)[1] == pytest.approx((100.2 - 2 * 0.2**0.5, 100.2 + 2 * 0.2**0.5))


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


@pytest.mark.parametrize(
    ("loader", "name", "file"),
    [
        (load_adult, "adult", "adult.data.gz"),
        (load_california_housing, "california_housing", "california_housing_balanced.csv.gz"),
        (load_credit_default, "credit_default", "credit_default_balanced.csv.gz"),
        (load_gmsc, "gmsc", "gmsc_balanced.csv.gz"),
    ],
)
def test_a_tabular_loader_cuts_its_own_file_in_row_order_by_default(
    loader, name, file, tmp_path: Path
):
    # The paper's split (TaijaData's apply_split): the file's first 80 % of rows train, in order.
    text = read_verified(file)
    if name == "adult":
        rows = csv.reader(io.StringIO(text), skipinitialspace=True)
        labels = [int(r[-1] == ">50K") for r in rows if r]
    else:
        labels = [round(float(r["target"])) for r in csv.DictReader(io.StringIO(text))]
    cut = round(0.8 * len(labels))
    data = loader()
    assert data.name == name
    assert data.y.tolist() == labels[:cut] and data.y_test.tolist() == labels[cut:]
    assert loader(shuffle=True).y.tolist() != labels[:cut]
    with pytest.raises(FileNotFoundError, match=f"elsewhere/tabular/{file} is missing"):
        loader(root=tmp_path / "elsewhere")


def test_a_data_sets_loader_shuffles_its_training_part_in_batches_of_1000_by_default():
    data = load_moons()  # 3,600 training rows
    batches = [yb for _, yb in data.loader()]
    assert [len(b) for b in batches] == [1000, 1000, 1000, 600]
    expected = [yb for _, yb in DeviceLoader(data.x, data.y, 1000, shuffle=True, seed=0)]
    assert all(torch.equal(a, b) for a, b in zip(batches, expected, strict=True))
    xb, yb = next(iter(data.loader(batch_size=5, shuffle=False, seed=3)))
    assert torch.equal(xb, data.x[:5]) and torch.equal(yb, data.y[:5])
    other = next(iter(data.loader(seed=1)))[1]
    assert not torch.equal(other, batches[0])


def test_a_missing_or_altered_file_is_named_with_its_checksum_and_the_fix(tmp_path: Path):
    name = "gmsc_balanced.csv.gz"
    (tmp_path / "tabular").mkdir()
    with pytest.raises(FileNotFoundError, match=f"tabular/{name} is missing.*{MD5[name]}") as err:
        read_verified(name, tmp_path)
    # From a wheel install: where the file goes, where to get it, how to point cfbook at it.
    assert str(tmp_path / "tabular" / name) in str(err.value)
    assert "TaijaData.jl's gmsc.csv" in str(err.value) and "root=" in str(err.value)
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
        load_gmsc(root=tmp_path / "elsewhere")
