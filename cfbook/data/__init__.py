"""Data sets as tensors on the device, and the loader that batches them there: MNIST
(``mnist``), the on-device loader (``loader``) and where the data folder is (``paths``).

May import ``cfbook.models`` (the input shapes); nothing of search, training, evaluation or the
book.
"""

from cfbook.data.loader import DeviceLoader
from cfbook.data.mnist import MNISTData, load_mnist
from cfbook.data.paths import display_path, find_data_dir

__all__ = ["DeviceLoader", "MNISTData", "display_path", "find_data_dir", "load_mnist"]
