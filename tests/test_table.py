"""A DataFrame in and out: ``TableEncoder``'s tensor, groups, domain and mutability by column
name, CT trained with one-hot groups decoded in its search, and counterfactuals decoded back to
columns."""

import re
import warnings

import numpy as np
import pandas as pd
import pytest
import torch

from cfbook import DeviceLoader, FullObjective, NativeGenerator, counterfactual_training, mlp
from cfbook.data import TableEncoder

COLOURS = ["red", "green", "blue"]


def people(n: int = 400, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame(
        {
            "age": rng.integers(18, 70, n),
            "hours": rng.normal(40, 8, n),
            "colour": rng.choice(COLOURS, n),
            "sex": rng.choice(["f", "m"], n),
        }
    )
    score = (frame.age - 40) / 15 + (frame.hours - 40) / 8 + (frame.colour == "blue") * 1.5
    frame["label"] = (score > 0.5).astype(int)
    return frame


def encoder() -> TableEncoder:
    return TableEncoder(["age", "hours"], ["colour", "sex"], immutable=["sex"], increase=["age"])


def test_the_encoding_by_hand():
    frame = pd.DataFrame(
        {"age": [20, 40], "hours": [30.0, 50.0], "colour": ["red", "blue"], "sex": ["f", "m"]}
    )
    enc = encoder().fit(frame)
    assert enc.columns == ["age", "hours", "colour=blue", "colour=red", "sex=f", "sex=m"]
    assert enc.groups == [[2, 3], [4, 5]]
    assert enc.mutability == ["increase", "both", "both", "both", "none", "none"]
    # Standardised with the population sd (scikit-learn's): age (20, 40) -> (-1, 1).
    assert enc.transform(frame).tolist() == [
        [-1.0, -1.0, 0.0, 1.0, 1.0, 0.0],
        [1.0, 1.0, 1.0, 0.0, 0.0, 1.0],
    ]
    # CT.jl's domain on the encoded training rows: mean +- 2 corrected sd, and (0, 1) one-hot.
    sd = 2**0.5
    assert enc.domain[0].tolist() == pytest.approx([-2 * sd, 2 * sd])
    assert enc.domain[2:].tolist() == [[0.0, 1.0]] * 4
    decoded = enc.decode(enc.transform(frame))
    pd.testing.assert_frame_equal(decoded, frame[["age", "hours", "colour", "sex"]])
    # A mixture decodes to its largest entry; an integer column is rounded.
    mixed = torch.tensor([[0.1, 0.0, 0.26, 0.9, 0.6, 0.4]])
    assert enc.decode(mixed).iloc[0].tolist() == [31, 40.0, "red", "f"]


def test_bad_frames_and_names_are_refused_with_the_fix():
    frame = people(20)
    with pytest.raises(ValueError, match=re.escape("not among the encoded columns")):
        TableEncoder(["age"], immutable=["income"])
    with pytest.raises(ValueError, match="a category has no direction"):
        TableEncoder(["age"], ["colour"], increase=["colour"])
    with pytest.raises(ValueError, match=re.escape("list them as categorical")):
        TableEncoder(["colour"]).fit(frame)
    with pytest.raises(ValueError, match=re.escape("drop or impute them first")):
        TableEncoder(["hours"]).fit(frame.assign(hours=np.nan))
    with pytest.raises(ValueError, match="not fitted"):
        encoder().transform(frame)
    enc = encoder().fit(frame)
    with pytest.raises(ValueError, match="categories the encoder was not fitted on"):
        enc.transform(frame.assign(colour="purple"))
    with pytest.raises(TypeError, match="expected a pandas DataFrame"):
        enc.transform(frame.to_numpy())
    # A DataFrame given where a tensor goes names the encoder.
    with pytest.raises(TypeError, match="got a DataFrame: encode it with cfbook.data.TableEncoder"):
        NativeGenerator().generate(mlp(2, (4,), 2), frame[["age", "hours"]], torch.zeros(20))


def _train(enc: TableEncoder, x: torch.Tensor, y: torch.Tensor, **kwargs):
    torch.manual_seed(0)
    model = mlp(x.shape[1], (16,), 2)
    found = []
    model, log = counterfactual_training(
        FullObjective(),
        model,
        NativeGenerator(step_size=0.5, lambda_cost=0.001),
        DeviceLoader(x, y, batch_size=50),
        torch.optim.Adam(model.parameters(), lr=1e-2),
        device="cpu",
        nepochs=6,
        burnin=0.5,
        nce=60,
        domain=enc.domain,
        mutability=enc.mutability,
        verbose=0,
        callback=lambda record, m, cf: found.append(cf),
        **kwargs,
    )
    return model, log, found[-1].counterfactual


def test_ct_trains_on_a_dataframe_with_one_hot_groups_and_decodes_back_to_columns():
    frame = people()
    enc = encoder()
    x = enc.fit_transform(frame)
    y = torch.tensor(frame.label.to_numpy())
    model, log, training_cf = _train(enc, x, y, categorical=enc.groups)
    assert log.meta["nepochs"] == 6 and log[-1].percent_valid > 0.5
    # The training-time search decoded every group: each holds exactly one 1.
    for group in enc.groups:
        block = training_cf[:, group]
        assert bool(((block == 0) | (block == 1)).all()) and bool((block.sum(1) == 1).all())
    # Without the groups (the default, as CT.jl) the training counterfactuals mix categories.
    _, _, mixed = _train(enc, x, y)
    assert not bool(((mixed[:, 2:] == 0) | (mixed[:, 2:] == 1)).all())

    rows = (model(x).argmax(1) == 0).nonzero().flatten()[:8]
    result = NativeGenerator(step_size=0.5, lambda_cost=0.001).generate(
        model,
        x[rows],
        torch.ones(len(rows), dtype=torch.long),
        domain=enc.domain,
        mutability=enc.mutability,
        categorical=enc.groups,
    )
    table = enc.compare(x[rows], result.counterfactual)
    assert table.index.get_level_values("kind").tolist() == ["factual", "counterfactual"] * 8
    facts, cfs = table.xs("factual", level="kind"), table.xs("counterfactual", level="kind")
    assert set(cfs.colour) <= set(COLOURS) and (cfs.sex == facts.sex).all()  # immutable
    assert (cfs.age >= facts.age).all()  # may only increase
    valid = result.valid.numpy()
    assert valid.mean() > 0.5
    # The changed cells are those that differ, and a valid counterfactual changed something.
    for i, (before, after) in enumerate(zip(facts.itertuples(), cfs.itertuples(), strict=True)):
        differ = {c for c in ("colour", "sex") if getattr(before, c) != getattr(after, c)}
        assert differ <= set(filter(None, after.changed.split(", ")))
        assert not valid[i] or after.changed


def test_the_groups_are_part_of_a_runs_identity(tmp_path):
    frame = people(100)
    enc = encoder()
    x, y = enc.fit_transform(frame), torch.tensor(frame.label.to_numpy())

    def run(**kwargs):
        torch.manual_seed(0)
        model = mlp(x.shape[1], (8,), 2)
        counterfactual_training(
            FullObjective(),
            model,
            NativeGenerator(),
            DeviceLoader(x, y, batch_size=50),
            torch.optim.Adam(model.parameters()),
            device="cpu",
            nepochs=1,
            nce=10,
            verbose=0,
            checkpoint_dir=tmp_path,
            **kwargs,
        )

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # few valid counterfactuals in one short epoch
        run(categorical=enc.groups)
    with pytest.raises(ValueError, match=re.escape("categorical: [[2, 3, 4], [5, 6]] in the")):
        run()
