"""Data sets as tensors on the device, and the loader that batches them there: MNIST
(``mnist``), the paper's tabular sets (``tabular``) and synthetic ones (``synthetic``), the
on-device loader (``loader``), a DataFrame as tensors and back (``table``: ``TableEncoder``)
and where the data folder is (``paths``).

May import ``cfbook.models`` (the input shapes) and, when asked for, sklearn's generators;
nothing of search, training, evaluation or the book.
"""

from cfbook.data.loader import DeviceLoader
from cfbook.data.mnist import MNISTData, load_mnist
from cfbook.data.paths import display_path, find_data_dir
from cfbook.data.synthetic import (
    load_circles,
    load_linearly_separable,
    load_moons,
    load_overlapping,
)
from cfbook.data.table import TableEncoder
from cfbook.data.tabular import (
    TabularData,
    load_adult,
    load_california_housing,
    load_credit_default,
    load_gmsc,
)

__all__ = [
    "DeviceLoader",
    "MNISTData",
    "TableEncoder",
    "TabularData",
    "display_path",
    "find_data_dir",
    "load_adult",
    "load_california_housing",
    "load_circles",
    "load_credit_default",
    "load_gmsc",
    "load_linearly_separable",
    "load_mnist",
    "load_moons",
    "load_overlapping",
]
