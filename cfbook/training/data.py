"""The training set as CT uses it: gathered once from the user's loader into tensors (each
epoch's factuals and their neighbours are drawn from all of it) and checked once; and each
mini-batch's inputs and labels."""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import Tensor

from cfbook.inputs import check_features, check_finite, check_labels, check_not_empty

__all__ = ["batch_tensors", "check_training_data", "training_tensors"]


def training_tensors(loader: Iterable) -> tuple[Tensor, Tensor]:
    """The whole training set as tensors, gathered once: the epoch's factuals and their
    neighbours are drawn from all of it. A ``DeviceLoader`` holds them already; a torch
    ``DataLoader`` over any map-style ``Dataset`` (a ``TensorDataset``, a ``Subset`` of one, one
    of your own) gives them item by item, each item's first two entries being ``x`` and ``y``."""
    if isinstance(loader, torch.utils.data.Dataset):
        raise TypeError(
            f"train_loader is a {type(loader).__name__}, a data set, not a loader of mini-batches "
            "(iterated, it yields single rows): wrap it, DataLoader(dataset, batch_size=..., "
            "shuffle=True), or use cfbook.data.DeviceLoader(x, y, batch_size)"
        )
    if hasattr(loader, "tensors"):
        return loader.tensors
    dataset = getattr(loader, "dataset", None)
    if isinstance(dataset, torch.utils.data.TensorDataset) and len(dataset.tensors) >= 2:
        return dataset.tensors[0], dataset.tensors[1]
    if isinstance(dataset, torch.utils.data.IterableDataset) or not hasattr(dataset, "__len__"):
        raise ValueError(
            "train_loader must be a cfbook.data.DeviceLoader or a torch DataLoader over a "
            "map-style Dataset (with __len__ and __getitem__): CT draws each epoch's factuals "
            "from the whole training set, which a stream cannot give"
        )
    return _gathered(dataset)


def _gathered(dataset: torch.utils.data.Dataset) -> tuple[Tensor, Tensor]:
    """Every item of a map-style ``dataset`` stacked into ``(x, y)``."""
    xs, ys = [], []
    for i in range(len(dataset)):
        item = dataset[i]
        if not isinstance(item, (tuple, list)) or len(item) < 2:
            raise ValueError(
                f"item {i} of the training set is a {type(item).__name__}, not an (x, y, ...) "
                "pair: its Dataset must return the input first and the label second"
            )
        xs.append(torch.as_tensor(item[0]))
        ys.append(torch.as_tensor(item[1]))
    if not xs:
        return torch.empty(0), torch.empty(0, dtype=torch.long)
    return torch.stack(xs), torch.stack(ys)


def batch_tensors(batch: object, b: int) -> tuple[Tensor, Tensor]:
    """A mini-batch's inputs and labels: its first two entries (a third, such as a weight, is
    not used)."""
    if not isinstance(batch, (tuple, list)) or len(batch) < 2:
        raise ValueError(
            f"mini-batch {b} is a {type(batch).__name__}, not an (x, y, ...) pair: the loader's "
            "batches must hold the inputs first and the labels second"
        )
    return torch.as_tensor(batch[0]), torch.as_tensor(batch[1])


def check_training_data(x: Tensor, y: Tensor) -> None:
    """The training tensors checked once, before any work: float samples (flat rows or of any
    shape), at least one, all finite, with one integer label each."""
    check_features(x, "the training data")
    check_not_empty(
        x,
        "the training data",
        "train on a loader over at least one row (check the split or filter that made it)",
    )
    check_labels(y, x.shape[0], "the training labels", "y", "the training data")
    check_finite(x, "the training data")
