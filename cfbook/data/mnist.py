"""MNIST as flat on-device tensors: the official files, verified, read offline unless asked."""

from __future__ import annotations

import gzip
import os
import shutil
import socket
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from cfbook.data.loader import DeviceLoader
from cfbook.data.paths import display_path, find_data_dir
from cfbook.errors import SetupError
from cfbook.models import IMAGE_SHAPE, INPUT_SHAPES, N_FEATURES

DOWNLOAD_TIMEOUT_S = 10.0

# (images file, labels file, number of samples) per split. The accepted MD5s of each .gz: the
# official file's (what download=True fetches) and, for the training split, the repository's copy,
# whose gzip header differs while its content is byte-identical (data/README.md).
_SPLITS = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", 60_000),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte", 10_000),
}
_MD5 = {
    "train-images-idx3-ubyte.gz": (
        "f68b3c2dcbeaaa9fbdd348bbdeb94873",
        "c7dfcf1bfd3481a40f7b3aedbdbd083c",
    ),
    "train-labels-idx1-ubyte.gz": (
        "d53e105ee54ea40749a09fcbcd1e9432",
        "d289298a347a2cc65765a3c81043ba88",
    ),
    "t10k-images-idx3-ubyte.gz": ("9fb629c4189551a2d022fa330f9573f3",),
    "t10k-labels-idx1-ubyte.gz": ("ec29112dd5afa0611ce80d1b7f02629c",),
}


@dataclass
class MNISTData:
    """Flat MNIST on one device: ``x`` is (n, 784) float32 in [-1, 1], ``y`` int64 labels 0-9.
    ``split`` names the official split the training samples come from (``"train"``, or
    ``"test"`` when only the test split is present and is split into both parts); the held-out
    samples always come from the test split. ``source`` says the same for people."""

    x: torch.Tensor
    y: torch.Tensor
    x_val: torch.Tensor
    y_val: torch.Tensor
    source: str
    split: str
    domain: list[tuple[float, float]] = field(default_factory=lambda: [(-1.0, 1.0)] * N_FEATURES)

    def loader(
        self,
        batch_size: int = 128,
        shuffle: bool = True,
        seed: int = 0,
        *,
        rank: int = 0,
        world_size: int = 1,
    ) -> DeviceLoader:
        """Training batches (shuffled on the device); ``rank``/``world_size`` shard them for DDP."""
        return DeviceLoader(
            self.x,
            self.y,
            batch_size,
            shuffle=shuffle,
            seed=seed,
            rank=rank,
            world_size=world_size,
        )

    def for_model(self, name: str) -> MNISTData:
        """The same data in the sample shape the model ``name`` takes (``INPUT_SHAPES``):
        images ``(n, 1, 28, 28)`` for the ResNet, flat rows for the MLP (views, no copies)."""
        shape = INPUT_SHAPES[name]
        return replace(
            self,
            x=self.x.reshape(self.x.shape[0], *shape),
            x_val=self.x_val.reshape(self.x_val.shape[0], *shape),
        )

    def val_loader(self, batch_size: int = 1024) -> DeviceLoader:
        """Held-out batches in a fixed order, for accuracy checks."""
        return DeviceLoader(self.x_val, self.y_val, batch_size, shuffle=False)


def _where_to_put(raw: Path, files: tuple[str, ...]) -> str:
    return (
        f"Put the official MNIST files {', '.join(files)} into {raw} (the repository ships the "
        "test split in data/MNIST/raw), set CFBOOK_DATA_DIR to a folder holding MNIST/raw, "
        "or pass download=True when online."
    )


def _decompress(gz_path: Path, target: Path) -> None:
    """gunzip next to the archive via a temporary file: concurrent readers never see half a file."""
    tmp: str | None = None
    try:
        with (
            gzip.open(gz_path, "rb") as src,
            tempfile.NamedTemporaryFile(
                dir=target.parent, prefix=target.name + ".", suffix=".tmp", delete=False
            ) as dst,
        ):
            tmp = dst.name
            shutil.copyfileobj(src, dst)
        os.replace(tmp, target)
    except (OSError, EOFError) as err:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        raise OSError(
            f"could not decompress {gz_path} into {target.parent}: {err}. Make that folder "
            "writable or set CFBOOK_DATA_DIR to a writable copy of the data folder."
        ) from err


def _prepare_file(raw: Path, name: str, n_samples: int, header: int, row: int) -> Path | None:
    """Return the uncompressed file, verified via its .gz checksum; None if neither form exists."""
    target, gz_path = raw / name, raw / f"{name}.gz"
    if gz_path.is_file():
        from torchvision.datasets.utils import check_integrity  # lazily: slow to import

        expected = _MD5[gz_path.name]
        if not any(check_integrity(str(gz_path), md5) for md5 in expected):
            raise ValueError(
                f"checksum mismatch for {gz_path} (expected MD5 {' or '.join(expected)}): the file "
                "is corrupt or not the official one. Delete it, then "
                + _where_to_put(raw, (gz_path.name,))
            )
        if not target.is_file() or target.stat().st_size != header + n_samples * row:
            _decompress(gz_path, target)
        return target
    return target if target.is_file() else None


def _locate_split(raw: Path, split: str) -> tuple[Path, Path] | None:
    """Verified (images, labels) files of a split, None if the split is absent altogether."""
    images_name, labels_name, n_samples = _SPLITS[split]
    images = _prepare_file(raw, images_name, n_samples, 16, N_FEATURES)
    labels = _prepare_file(raw, labels_name, n_samples, 8, 1)
    if images is None and labels is None:
        return None
    if images is None or labels is None:
        missing = images_name if images is None else labels_name
        raise FileNotFoundError(
            f"MNIST {split} split is incomplete: {missing}(.gz) is missing from {raw}. "
            + _where_to_put(raw, (f"{images_name}.gz", f"{labels_name}.gz"))
        )
    return images, labels


def _read_split(images_path: Path, labels_path: Path) -> tuple[torch.Tensor, torch.Tensor]:
    """Read an idx image/label pair and check it is MNIST-shaped (28x28 images, labels 0-9)."""
    from torchvision.datasets.mnist import read_image_file, read_label_file

    try:
        images = read_image_file(str(images_path))
        labels = read_label_file(str(labels_path))
    except (AssertionError, TypeError, ValueError, KeyError, IndexError, RuntimeError) as err:
        raise ValueError(
            f"could not read MNIST files {images_path} / {labels_path} ({err!r}); delete them and "
            "restore the official .gz files."
        ) from err
    if tuple(images.shape[1:]) != IMAGE_SHAPE[1:] or images.shape[0] != labels.shape[0]:
        raise ValueError(
            f"{images_path} holds images of shape {tuple(images.shape)} and {labels_path} "
            f"{labels.shape[0]} labels; expected N x 28 x 28 images with N labels."
        )
    if labels.numel() and (int(labels.min()) < 0 or int(labels.max()) > 9):
        raise ValueError(f"{labels_path} holds labels outside 0-9; restore the official file.")
    return images, labels


def _download_train(root: Path) -> None:
    """Fetch the training split with torchvision; a socket timeout makes offline fail fast."""
    from torchvision.datasets import MNIST

    previous = socket.getdefaulttimeout()
    socket.setdefaulttimeout(DOWNLOAD_TIMEOUT_S)
    try:
        MNIST(str(root), train=True, download=True)
    except (RuntimeError, OSError) as err:
        raise SetupError(
            f"could not download the MNIST training split into {root / 'MNIST' / 'raw'} "
            f"(offline?): {err}. Use download=False to train on the shipped test split, or copy "
            "train-images-idx3-ubyte.gz and train-labels-idx1-ubyte.gz there by hand."
        ) from err
    finally:
        socket.setdefaulttimeout(previous)


def load_mnist(
    n: int | None = None,
    *,
    device: str | torch.device = "cpu",
    seed: int = 42,
    root: str | Path | None = None,
    download: bool = False,
    val_fraction: float = 0.2,
    verbose: bool = True,
) -> MNISTData:
    """Load a seeded subset of ``n`` training samples plus a held-out set, already on ``device``.

    The full 60k training split is used if its files are under ``<root>/MNIST/raw`` or with
    ``download=True``; otherwise the official 10k test split shipped with the repository is split
    into disjoint training and held-out parts. The held-out set is always the first
    ``val_fraction`` of a seeded permutation of the test split, so it holds the same images
    whichever source supplies the training samples (``val_fraction=1`` holds out the whole test
    split, as the CT paper's evaluation does).
    """
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
        raise ValueError(f"n must be a positive integer or None (all samples), got {n!r}")
    if not 0.0 <= val_fraction <= 1.0:
        raise ValueError(f"val_fraction must be in [0, 1], got {val_fraction!r}")
    root = Path(root).expanduser() if root is not None else find_data_dir()
    raw = root / "MNIST" / "raw"
    device = torch.device(device)

    test_files = _locate_split(raw, "test")
    if test_files is None:
        names = tuple(f"{name}.gz" for name in _SPLITS["test"][:2])
        raise FileNotFoundError(
            f"MNIST test split not found in {raw}. " + _where_to_put(raw, names)
        )
    train_files = _locate_split(raw, "train")
    if train_files is None and download:
        _download_train(root)
        train_files = _locate_split(raw, "train")

    shown = display_path(raw, root)
    generator = torch.Generator().manual_seed(seed)
    test_images, test_labels = _read_split(*test_files)
    test_order = torch.randperm(test_images.shape[0], generator=generator)
    n_val = round(test_images.shape[0] * val_fraction)
    val_idx = test_order[:n_val]
    if train_files is not None:
        pool_images, pool_labels = _read_split(*train_files)
        pool_idx = torch.randperm(pool_images.shape[0], generator=generator)
        source = f"MNIST training split ({pool_images.shape[0]} images in {shown})"
    else:
        pool_images, pool_labels = test_images, test_labels
        pool_idx = test_order[n_val:]
        source = (
            f"MNIST official test split ({test_images.shape[0]} images in {shown}), "
            "seeded into training and held-out parts; the full training split is used when its "
            "files are present or with download=True"
        )
    available = pool_idx.shape[0]
    if available == 0:
        raise ValueError(
            f"no training samples left: val_fraction={val_fraction} holds out all of {source}"
        )
    if n is not None and n > available:
        raise ValueError(f"n={n} exceeds the {available} training samples available from {source}")
    train_idx = pool_idx[: available if n is None else n]

    # x/255*2-1 maps [0, 255] to [-1, 1]. The 256 values are computed once on the CPU and looked
    # up on the device: CUDA divides by a scalar through its reciprocal, which can move a pixel
    # by one float step from the CPU's value, so every device gets the same bits.
    levels = torch.arange(256, dtype=torch.float32).div_(255.0).mul_(2.0).sub_(1.0).to(device)

    def to_device(images: torch.Tensor) -> torch.Tensor:
        # Move uint8 (4x fewer bytes than floats) and look the values up there.
        flat = images.reshape(images.shape[0], N_FEATURES).to(device)
        return levels[flat.int()]

    data = MNISTData(
        x=to_device(pool_images[train_idx]),
        y=pool_labels[train_idx].to(device),
        x_val=to_device(test_images[val_idx]),
        y_val=test_labels[val_idx].to(device),
        source=source,
        split="train" if train_files is not None else "test",
    )
    if verbose:
        n_train = data.x.shape[0]
        print(f"Loaded {n_train} training / {n_val} held-out samples on {device}")
        print(f"from {source}")
    return data
