"""Tests for cfbook.data: MNIST loading (offline, verified), the on-device loader, the synthetic
sets' MLJ distributions and split, and the tabular sets' split."""

from __future__ import annotations

import hashlib
import io
import shutil
import socket
import struct
import sys
import tempfile
import urllib.error
import urllib.request
from pathlib import Path
from statistics import NormalDist

import numpy as np
import pytest
import torch
from sklearn.datasets import make_blobs, make_circles, make_moons

import cfbook.data.paths as paths_module
import cfbook.data.synthetic as synthetic
from cfbook.data import (
    DeviceLoader,
    MNISTData,
    find_data_dir,
    load_circles,
    load_gmsc,
    load_linearly_separable,
    load_mnist,
    load_moons,
    load_overlapping,
)
from cfbook.data.mnist import DOWNLOAD_TIMEOUT_S
from cfbook.data.tabular import _csv_table, read_verified, split_rows

REPO_DATA = Path(__file__).resolve().parents[1] / "data"
TEST_FILES = ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA/ROCm GPU")


def _copy_test_split(root: Path) -> Path:
    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for name in TEST_FILES:
        shutil.copy(REPO_DATA / "MNIST" / "raw" / name, raw / name)
    return raw


def _write_idx(raw: Path, prefix: str, images: torch.Tensor, labels: torch.Tensor) -> None:
    """Write an uncompressed idx pair the way the MNIST files are laid out (big-endian header)."""
    n = images.shape[0]
    header = struct.pack(">IIII", 0x00000803, n, 28, 28)
    (raw / f"{prefix}-images-idx3-ubyte").write_bytes(header + images.numpy().tobytes())
    label_header = struct.pack(">II", 0x00000801, n)
    (raw / f"{prefix}-labels-idx1-ubyte").write_bytes(label_header + labels.numpy().tobytes())


@pytest.fixture(scope="module")
def test_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data root holding only the shipped test split (as a fresh checkout has)."""
    root = tmp_path_factory.mktemp("mnist_test_split")
    _copy_test_split(root)
    return root


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("network access attempted")

    monkeypatch.setattr(urllib.request, "urlopen", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)


def _rows(x: torch.Tensor) -> set[bytes]:
    return {row.numpy().tobytes() for row in x}


def test_load_shapes_ranges_and_domain(test_root: Path, no_network: None) -> None:
    data = load_mnist(300, root=test_root, verbose=False)
    assert isinstance(data, MNISTData)
    assert data.x.shape == (300, 784) and data.x.dtype == torch.float32
    assert data.y.shape == (300,) and data.y.dtype == torch.int64
    assert data.x.min() == -1.0 and data.x.max() == 1.0
    assert data.y.min() >= 0 and data.y.max() <= 9
    assert data.x_val.shape == (2000, 784) and data.y_val.shape == (2000,)
    assert data.x_val.min() >= -1.0 and data.x_val.max() <= 1.0
    assert data.domain == [(-1.0, 1.0)] * 784
    assert data.split == "test"
    # The folder as seen from above the data folder: no machine-specific path in printed text.
    shown = f"{test_root.name}/MNIST/raw"
    assert data.source.startswith(f"MNIST official test split (10000 images in {shown}), seeded")


def test_scaling_matches_raw_pixels(test_root: Path) -> None:
    from torchvision.datasets.mnist import read_image_file

    data = load_mnist(None, root=test_root, verbose=False)
    pixels = read_image_file(str(test_root / "MNIST" / "raw" / "t10k-images-idx3-ubyte"))
    expected = _rows(pixels.reshape(-1, 784).float() / 255 * 2 - 1)
    assert _rows(data.x[:50]) <= expected


def test_train_and_heldout_are_disjoint_and_cover_the_split(test_root: Path) -> None:
    data = load_mnist(None, root=test_root, verbose=False)
    assert data.x.shape[0] == 8000 and data.x_val.shape[0] == 2000
    train, held_out = _rows(data.x), _rows(data.x_val)
    assert not train & held_out
    assert len(train | held_out) == 10_000


def test_seeds_are_deterministic_and_held_out_set_ignores_n(test_root: Path) -> None:
    a = load_mnist(200, root=test_root, seed=3, verbose=False)
    b = load_mnist(200, root=test_root, seed=3, verbose=False)
    c = load_mnist(200, root=test_root, seed=4, verbose=False)
    bigger = load_mnist(400, root=test_root, seed=3, verbose=False)
    assert torch.equal(a.x, b.x) and torch.equal(a.y, b.y) and torch.equal(a.x_val, b.x_val)
    assert not torch.equal(a.x, c.x)
    assert torch.equal(bigger.x[:200], a.x) and torch.equal(bigger.x_val, a.x_val)
    default = load_mnist(200, root=test_root, verbose=False)
    assert torch.equal(default.x, load_mnist(200, root=test_root, seed=42, verbose=False).x)


def test_val_fraction_sets_held_out_size(test_root: Path) -> None:
    data = load_mnist(100, root=test_root, val_fraction=0.0, verbose=False)
    assert data.x_val.shape == (0, 784)
    assert load_mnist(100, root=test_root, val_fraction=0.5, verbose=False).x_val.shape[0] == 5000


def test_verbose_reports_the_source(test_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    load_mnist(10, root=test_root)  # verbose by default
    out = capsys.readouterr().out
    assert "test split" in out and "10 training" in out
    load_mnist(10, root=test_root, verbose=False)
    assert capsys.readouterr().out == ""


def test_too_many_samples_names_n_and_available(test_root: Path) -> None:
    with pytest.raises(ValueError, match=r"n=8001.*8000"):
        load_mnist(8001, root=test_root, verbose=False)
    assert load_mnist(8000, root=test_root, verbose=False).x.shape[0] == 8000  # every one
    assert load_mnist(1, root=test_root, verbose=False).x.shape[0] == 1


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        ({"n": 0}, "n must"),
        ({"n": True}, "n must"),
        ({"n": 10, "val_fraction": 1.0}, "val_fraction"),
        ({"n": 10, "val_fraction": 1.5}, "val_fraction must be in"),
    ],
)
def test_bad_arguments(test_root: Path, kwargs: dict, pattern: str) -> None:
    with pytest.raises(ValueError, match=pattern):
        load_mnist(root=test_root, verbose=False, **kwargs)


def test_corrupt_archive_fails_checksum_with_a_hint(tmp_path: Path) -> None:
    raw = _copy_test_split(tmp_path)
    archive = raw / TEST_FILES[0]
    blob = bytearray(archive.read_bytes())
    blob[len(blob) // 2] ^= 0xFF
    archive.write_bytes(bytes(blob))
    with pytest.raises(ValueError, match="checksum") as err:
        load_mnist(10, root=tmp_path, verbose=False)
    assert str(raw) in str(err.value) and "t10k-images-idx3-ubyte.gz" in str(err.value)
    assert f"t10k-images-idx3-ubyte.gz into {raw} (the repository" in str(err.value)


def test_missing_files_say_where_to_put_them(tmp_path: Path) -> None:
    raw = tmp_path / "MNIST" / "raw"
    with pytest.raises(FileNotFoundError, match="t10k-images-idx3-ubyte.gz") as err:
        load_mnist(10, root=tmp_path, verbose=False)
    files = "t10k-images-idx3-ubyte.gz, t10k-labels-idx1-ubyte.gz"
    assert f"Put the official MNIST files {files} into {raw} (the" in str(err.value)
    # Half a split: the missing file is named, whichever it is.
    for present, missing in ((0, 1), (1, 0)):
        shutil.rmtree(tmp_path / "MNIST", ignore_errors=True)
        raw.mkdir(parents=True)
        shutil.copy(REPO_DATA / "MNIST" / "raw" / TEST_FILES[present], raw)
        with pytest.raises(FileNotFoundError, match="split is incomplete") as err:
            load_mnist(10, root=tmp_path, verbose=False)
        assert f"{TEST_FILES[missing].removesuffix('.gz')}(.gz) is missing" in str(err.value)
        assert f"files {files} into {raw} (the" in str(err.value)


def test_truncated_extracted_file_is_rebuilt_from_the_archive(tmp_path: Path) -> None:
    raw = _copy_test_split(tmp_path)
    reference = load_mnist(50, root=tmp_path, verbose=False)
    extracted = raw / "t10k-images-idx3-ubyte"
    extracted.write_bytes(extracted.read_bytes()[:1000])
    again = load_mnist(50, root=tmp_path, verbose=False)
    assert torch.equal(reference.x, again.x)
    assert not list(raw.glob("*.tmp"))
    # Intact extracted files are read as they are, not decompressed again at every load.
    extracted = [raw / name.removesuffix(".gz") for name in TEST_FILES]
    before = [(p.stat().st_ino, p.stat().st_mtime_ns) for p in extracted]
    load_mnist(50, root=tmp_path, verbose=False)
    assert [(p.stat().st_ino, p.stat().st_mtime_ns) for p in extracted] == before


def test_download_false_never_touches_the_network(tmp_path: Path, no_network: None) -> None:
    _copy_test_split(tmp_path)
    assert load_mnist(20, root=tmp_path, download=False, verbose=False).x.shape == (20, 784)


def test_download_offline_raises_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _copy_test_split(tmp_path)

    def offline(*args, **kwargs):
        raise urllib.error.URLError("no network in this test")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    before = socket.getdefaulttimeout()
    with pytest.raises(RuntimeError, match="could not download") as err:
        load_mnist(20, root=tmp_path, download=True, verbose=False)
    assert "download=False" in str(err.value)
    assert socket.getdefaulttimeout() == before


class _FakeDownload:
    """torchvision's MNIST in place of the network: it records what it was asked, and the
    socket timeout it ran under, and writes a small training split where torchvision puts it
    (or fails as an offline machine would)."""

    calls: list[tuple] = []
    fail = False

    def __init__(self, root: str, train: bool = True, download: bool = False) -> None:
        type(self).calls.append((root, train, download, socket.getdefaulttimeout()))
        if type(self).fail:
            raise OSError("no route to host")
        rng = torch.Generator().manual_seed(0)
        images = torch.randint(0, 256, (30, 28, 28), dtype=torch.uint8, generator=rng)
        labels = (torch.arange(30) % 10).to(torch.uint8)
        _write_idx(Path(root) / "MNIST" / "raw", "train", images, labels)


@pytest.mark.parametrize("fail", [False, True])
def test_download_asks_torchvision_for_the_training_split_under_a_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fail: bool
) -> None:
    import torchvision.datasets

    _copy_test_split(tmp_path)
    monkeypatch.setattr(torchvision.datasets, "MNIST", _FakeDownload)
    monkeypatch.setattr(_FakeDownload, "calls", [])
    monkeypatch.setattr(_FakeDownload, "fail", fail)
    before = socket.getdefaulttimeout()
    socket.setdefaulttimeout(3.5)  # the caller's own, restored afterwards
    try:
        if fail:
            with pytest.raises(RuntimeError, match="could not download") as err:
                load_mnist(20, root=tmp_path, download=True, verbose=False)
            assert f"into {tmp_path / 'MNIST' / 'raw'} (offline?): no route" in str(err.value)
        else:
            data = load_mnist(20, root=tmp_path, download=True, verbose=False)
            assert data.split == "train" and "training split (30 images" in data.source
        after = socket.getdefaulttimeout()
    finally:
        socket.setdefaulttimeout(before)
    assert _FakeDownload.calls == [(str(tmp_path), True, True, DOWNLOAD_TIMEOUT_S)]
    assert after == 3.5


def test_a_failed_decompression_leaves_no_partial_file_and_names_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The archive is decompressed into <name>.<random>.tmp beside its target (the .gitignore
    # covers *.tmp) and renamed into place: a reader never sees half a file, and a failure
    # removes it. A temporary file that cannot even be made reports the same advice.
    raw = _copy_test_split(tmp_path)
    partial: list[Path] = []

    def disk_full(src, dst) -> None:
        partial.append(Path(dst.name))
        dst.write(b"half a file")
        raise OSError("disk full")

    monkeypatch.setattr(shutil, "copyfileobj", disk_full)
    fix = "Make that folder writable or set CFBOOK_DATA_DIR"
    with pytest.raises(OSError, match=f"into {raw}: disk full. {fix}"):
        load_mnist(10, root=tmp_path, verbose=False)
    (made,) = partial
    assert made.parent == raw and made.name.startswith("t10k-images-idx3-ubyte.")
    assert made.suffix == ".tmp" and not made.exists()
    assert sorted(p.name for p in raw.iterdir()) == sorted(TEST_FILES)

    def read_only(*args, **kwargs):
        raise PermissionError("read-only folder")

    monkeypatch.setattr(tempfile, "NamedTemporaryFile", read_only)
    with pytest.raises(OSError, match=f"into {raw}: read-only folder. {fix}"):
        load_mnist(10, root=tmp_path, verbose=False)


def test_training_split_is_used_when_present(tmp_path: Path, no_network: None) -> None:
    raw = _copy_test_split(tmp_path)
    generator = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (40, 28, 28), generator=generator, dtype=torch.uint8)
    labels = torch.arange(40, dtype=torch.uint8) % 10
    _write_idx(raw, "train", images, labels)
    data = load_mnist(30, root=tmp_path, verbose=False)
    assert "training split" in data.source and data.split == "train"
    # Its own seeded draw, whatever the global generator's state.
    torch.manual_seed(0)
    assert torch.equal(data.x, load_mnist(30, root=tmp_path, verbose=False).x)
    assert not torch.equal(data.x, load_mnist(30, root=tmp_path, seed=1, verbose=False).x)
    assert _rows(data.x) <= _rows(images.reshape(40, 784).float() / 255 * 2 - 1)
    assert data.x_val.shape == (2000, 784)
    test_only = tmp_path / "test_only"
    _copy_test_split(test_only)
    assert torch.equal(data.x_val, load_mnist(30, root=test_only, verbose=False).x_val)
    with pytest.raises(ValueError, match=r"n=41.*40"):
        load_mnist(41, root=tmp_path, verbose=False)


def test_incomplete_or_broken_training_split_is_reported(tmp_path: Path) -> None:
    raw = _copy_test_split(tmp_path)
    (raw / "train-images-idx3-ubyte").write_bytes(b"\x00\x00\x08\x03garbage")
    with pytest.raises(FileNotFoundError, match="train-labels-idx1-ubyte"):
        load_mnist(10, root=tmp_path, verbose=False)
    (raw / "train-labels-idx1-ubyte").write_bytes(struct.pack(">II", 0x00000801, 0))
    with pytest.raises(ValueError, match="could not read MNIST files"):
        load_mnist(10, root=tmp_path, verbose=False)
    # Readable files that are not MNIST: other image sizes, a count mismatch, a label of 10.
    rng = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (4, 28, 28), generator=rng, dtype=torch.uint8)
    labels = torch.tensor([0, 1, 2, 3], dtype=torch.uint8)
    header = struct.pack(">IIII", 0x00000803, 4, 27, 27)
    (raw / "train-images-idx3-ubyte").write_bytes(header + images[:, :27, :27].numpy().tobytes())
    (raw / "train-labels-idx1-ubyte").write_bytes(struct.pack(">II", 0x801, 4) + bytes(labels))
    with pytest.raises(ValueError, match=r"shape \(4, 27, 27\).*expected N x 28 x 28"):
        load_mnist(2, root=tmp_path, verbose=False)
    _write_idx(raw, "train", images[:3], labels[:3])
    (raw / "train-labels-idx1-ubyte").write_bytes(struct.pack(">II", 0x801, 4) + bytes(labels))
    with pytest.raises(ValueError, match=r"shape \(3, 28, 28\) and .* 4 labels"):
        load_mnist(2, root=tmp_path, verbose=False)
    _write_idx(raw, "train", images, torch.tensor([0, 10, 2, 3], dtype=torch.uint8))
    with pytest.raises(ValueError, match="labels outside 0-9"):
        load_mnist(2, root=tmp_path, verbose=False)


def test_find_data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CFBOOK_DATA_DIR", str(tmp_path / "elsewhere"))
    assert find_data_dir() == tmp_path / "elsewhere"
    monkeypatch.delenv("CFBOOK_DATA_DIR")
    (tmp_path / "project" / "data" / "MNIST" / "raw").mkdir(parents=True)
    (tmp_path / "project" / "book").mkdir()
    monkeypatch.chdir(tmp_path / "project" / "book")
    assert find_data_dir() == (tmp_path / "project" / "data").resolve()
    (tmp_path / "empty").mkdir()
    monkeypatch.chdir(tmp_path / "empty")
    assert find_data_dir() == Path(paths_module.__file__).resolve().parents[2] / "data"


def test_display_path_is_relative_to_the_folder_above_the_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "project" / "data"
    log = data / "cpu" / "full.json"
    assert paths_module.display_path(log, data) == "data/cpu/full.json"
    # Without a data folder given, the one find_data_dir finds.
    monkeypatch.setenv("CFBOOK_DATA_DIR", str(data))
    assert paths_module.display_path(log) == "data/cpu/full.json"
    # A path elsewhere is shown whole, resolved.
    elsewhere = tmp_path / "other" / ".." / "x.json"
    assert paths_module.display_path(elsewhere) == str((tmp_path / "x.json").resolve())


# --- DeviceLoader ---------------------------------------------------------------------------


def _indexed(n: int, device: str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """Tensors whose labels are their row numbers, so batches reveal the order."""
    y = torch.arange(n, device=device)
    return y.float().unsqueeze(1).repeat(1, 3), y


def _epoch(loader: DeviceLoader) -> list[int]:
    return torch.cat([yb for _, yb in loader]).tolist()


def test_loader_length_and_batch_sizes() -> None:
    loader = DeviceLoader(*_indexed(10), batch_size=3)
    sizes = [xb.shape[0] for xb, _ in loader]
    assert len(loader) == 4 and sizes == [3, 3, 3, 1]


def test_shuffled_epochs_cover_every_sample_once_and_keep_pairs() -> None:
    loader = DeviceLoader(*_indexed(50), batch_size=8, seed=1)
    orders = []
    for _ in range(3):
        order = []
        for xb, yb in loader:
            assert torch.equal(xb[:, 0].long(), yb)
            order += yb.tolist()
        assert sorted(order) == list(range(50))
        orders.append(order)
    assert orders[0] != orders[1] != orders[2]
    assert orders[0] != list(range(50))


def test_unshuffled_loader_keeps_order() -> None:
    loader = DeviceLoader(*_indexed(7), batch_size=3, shuffle=False)
    assert _epoch(loader) == list(range(7)) == _epoch(loader)


def test_loader_seed_determinism() -> None:
    a, b, c = (DeviceLoader(*_indexed(40), batch_size=6, seed=s) for s in (5, 5, 6))
    assert _epoch(a) == _epoch(b) and _epoch(a) == _epoch(b)
    assert _epoch(DeviceLoader(*_indexed(40), batch_size=6, seed=5)) != _epoch(c)


def test_state_dict_resumes_between_epochs() -> None:
    reference = DeviceLoader(*_indexed(30), batch_size=4, seed=2)
    _epoch(reference)
    state = reference.state_dict()
    expected = [_epoch(reference), _epoch(reference)]
    resumed = DeviceLoader(*_indexed(30), batch_size=4, seed=99)
    resumed.load_state_dict(state)
    assert [_epoch(resumed), _epoch(resumed)] == expected


def test_state_dict_resumes_mid_epoch_after_torch_save() -> None:
    reference = DeviceLoader(*_indexed(30), batch_size=4, seed=2)
    _epoch(reference)
    iterator = iter(reference)
    head = [next(iterator)[1].tolist() for _ in range(3)]
    buffer = io.BytesIO()
    torch.save(reference.state_dict(), buffer)
    tail = torch.cat([yb for _, yb in iterator]).tolist()
    expected_next_epoch = _epoch(reference)
    assert sorted(sum(head, []) + tail) == list(range(30))

    resumed = DeviceLoader(*_indexed(30), batch_size=4, seed=7)
    buffer.seek(0)
    resumed.load_state_dict(torch.load(buffer))
    assert len(resumed.state_dict()["generator"]) > 0
    assert _epoch(resumed) == tail
    assert _epoch(resumed) == expected_next_epoch


def test_checkpoint_at_last_batch_resumes_with_next_epoch() -> None:
    reference = DeviceLoader(*_indexed(9), batch_size=3, seed=0)
    for _ in reference:
        state = reference.state_dict()
    assert state["batches_served"] == 0
    resumed = DeviceLoader(*_indexed(9), batch_size=3, seed=1)
    resumed.load_state_dict(state)
    assert _epoch(resumed) == _epoch(reference)


def test_abandoned_iteration_counts_as_an_epoch() -> None:
    loader = DeviceLoader(*_indexed(20), batch_size=5, seed=0)
    next(iter(loader))
    assert loader.state_dict()["batches_served"] == 0
    assert sorted(_epoch(loader)) == list(range(20))


def test_loader_rejects_bad_inputs_and_foreign_state() -> None:
    x, y = _indexed(10)
    with pytest.raises(ValueError, match="differ in length"):
        DeviceLoader(x, y[:5], batch_size=2)
    with pytest.raises(ValueError, match="batch_size"):
        DeviceLoader(x, y, batch_size=0)
    with pytest.raises(
        TypeError, match=r"batch_size must be a positive integer, got 2.0 \(float\)"
    ):
        DeviceLoader(x, y, batch_size=2.0)
    with pytest.raises(TypeError, match="world_size must be a positive integer"):
        DeviceLoader(x, y, batch_size=2, world_size="2")
    with pytest.raises(ValueError, match="need 0 <= rank < world_size"):
        DeviceLoader(x, y, batch_size=2, rank=2, world_size=2)
    state = DeviceLoader(x, y, batch_size=2).state_dict()
    with pytest.raises(ValueError, match="batch_size=2 in the saved state, 3 here"):
        DeviceLoader(x, y, batch_size=3).load_state_dict(state)


@pytest.mark.parametrize(
    ("n", "rank0", "rank1"),
    [
        # Global batches of 6 rows; the short last one split as evenly as possible, the first
        # process taking the extra row.
        (10, [[0, 1, 2], [6, 7]], [[3, 4, 5], [8, 9]]),
        (11, [[0, 1, 2], [6, 7, 8]], [[3, 4, 5], [9, 10]]),
    ],
)
def test_two_processes_share_each_global_batch_in_contiguous_parts(n, rank0, rank1) -> None:
    for rank, expected in ((0, rank0), (1, rank1)):
        loader = DeviceLoader(*_indexed(n), 3, shuffle=False, rank=rank, world_size=2)
        assert [yb.tolist() for _, yb in loader] == expected
    # A last global batch of one row cannot be shared by two processes.
    with pytest.raises(ValueError, match="the last global batch holds 1 sample"):
        DeviceLoader(*_indexed(13), 3, rank=0, world_size=2)


def test_a_state_saved_before_sharding_resumes_one_process() -> None:
    # Loader states saved before DDP sharding have no world_size: they resume one process's
    # loader, mid-epoch included, and are refused by a process of two.
    reference = DeviceLoader(*_indexed(12), batch_size=2, seed=3)
    iterator = iter(reference)
    next(iterator)
    state = reference.state_dict()
    del state["world_size"]
    tail = torch.cat([yb for _, yb in iterator]).tolist()
    resumed = DeviceLoader(*_indexed(12), batch_size=2, seed=0)
    resumed.load_state_dict(state)
    assert _epoch(resumed) == tail
    shard = DeviceLoader(*_indexed(12), batch_size=2, seed=3, rank=0, world_size=2)
    with pytest.raises(ValueError, match="world_size=1 in the saved state, 2 here"):
        shard.load_state_dict(state)


def _same_batches(a: DeviceLoader, b: DeviceLoader) -> bool:
    return all(torch.equal(ya, yb) for (_, ya), (_, yb) in zip(a, b, strict=True))


def test_mnist_loaders_wrap_the_device_tensors(test_root: Path) -> None:
    data = load_mnist(300, root=test_root, verbose=False)
    train = data.loader(batch_size=32, seed=1)
    assert train.tensors[0] is data.x and train.tensors[1] is data.y
    assert len(train) == 10 and train.shuffle
    val = data.val_loader(batch_size=500)
    assert val.shuffle is False and len(val) == 4
    assert torch.equal(torch.cat([yb for _, yb in val]), data.y_val)
    # The defaults: shuffled batches of 128 drawn with seed 0, held-out batches of 1,024 in
    # order; a process's shard of each global batch is the loader's own.
    assert [len(yb) for _, yb in data.loader()] == [128, 128, 44]
    same = DeviceLoader(data.x, data.y, 128, shuffle=True, seed=0)
    assert _same_batches(data.loader(), same)
    unshuffled = data.loader(64, shuffle=False)
    assert torch.equal(torch.cat([yb for _, yb in unshuffled]), data.y)
    seeded = DeviceLoader(data.x, data.y, 64, shuffle=True, seed=3)
    assert _same_batches(data.loader(64, seed=3), seeded)
    assert not torch.equal(next(iter(seeded))[1], next(iter(data.loader(64)))[1])
    shard = DeviceLoader(data.x, data.y, 64, shuffle=True, seed=0, rank=1, world_size=2)
    mine = data.loader(64, rank=1, world_size=2)
    assert (mine.rank, mine.world_size) == (1, 2)
    assert _same_batches(mine, shard)
    assert [len(yb) for _, yb in data.val_loader()] == [1024, 976]


@needs_cuda
def test_cuda_loading_and_loader_stay_on_the_gpu(test_root: Path) -> None:
    data = load_mnist(256, device="cuda", root=test_root, verbose=False)
    assert data.x.is_cuda and data.y.is_cuda and data.x_val.is_cuda
    cpu = load_mnist(256, root=test_root, verbose=False)
    assert torch.equal(data.x.cpu(), cpu.x)
    loader = data.loader(batch_size=64, seed=3)
    for xb, yb in loader:
        assert xb.is_cuda and yb.is_cuda
    state = loader.state_dict()
    expected = _epoch(loader)
    resumed = data.loader(batch_size=64, seed=4)
    resumed.load_state_dict(state)
    assert _epoch(resumed) == expected
    x, y = _indexed(100, device="cuda")
    assert sorted(_epoch(DeviceLoader(x, y, batch_size=16))) == list(range(100))


# --- Training batch order: CTExperiments' Flux.DataLoader has shuffle=false ----------------------


def test_unshuffled_loader_gives_the_same_row_order_batches_every_epoch_and_resumes() -> None:
    loader = DeviceLoader(*_indexed(10), batch_size=4, shuffle=False, seed=3)
    epochs = [[yb.tolist() for _, yb in loader] for _ in range(3)]
    assert epochs[0] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]] == epochs[1] == epochs[2]
    iterator = iter(loader)
    next(iterator)
    state = loader.state_dict()
    resumed = DeviceLoader(*_indexed(10), batch_size=4, shuffle=False, seed=9)
    resumed.load_state_dict(state)
    assert [yb.tolist() for _, yb in resumed] == epochs[0][1:]
    assert [yb.tolist() for _, yb in resumed] == epochs[0]
    # Sharded: each process takes its contiguous part of every global batch, still in row order.
    ranks = [DeviceLoader(*_indexed(10), 2, shuffle=False, rank=r, world_size=2) for r in (0, 1)]
    for _ in range(2):
        merged = [a.tolist() + b.tolist() for (_, a), (_, b) in zip(*ranks, strict=True)]
        assert merged == epochs[0]


# --- The synthetic sets: MLJBase's distributions, CTExperiments' get_data split ------------------


def _synthetic_points(data) -> tuple[np.ndarray, np.ndarray]:
    return torch.cat([data.x, data.x_test]).double().numpy(), torch.cat(
        [data.y, data.y_test]
    ).numpy()


def _lda_accuracy(x: np.ndarray, y: np.ndarray, x_eval: np.ndarray, y_eval: np.ndarray) -> float:
    """Fisher's linear discriminant with a pooled covariance, cut half-way between the means."""
    m0, m1 = x[y == 0].mean(0), x[y == 1].mean(0)
    pooled = np.cov(x[y == 0].T) * (y == 0).sum() + np.cov(x[y == 1].T) * (y == 1).sum()
    w = np.linalg.solve(pooled / len(y), m1 - m0)
    predicted = (x_eval - (m0 + m1) / 2) @ w > 0
    return float((predicted == y_eval).mean())


def test_the_blob_centres_are_mljs_for_seed_42() -> None:
    centres = synthetic.MLJ_BLOB_CENTRES
    assert centres[0] == pytest.approx([2.5869024629, -0.4518571313], abs=1e-9)
    assert centres[1] == pytest.approx([-0.9932211881, 4.0625969801], abs=1e-9)
    assert np.linalg.norm(centres[0] - centres[1]) == pytest.approx(5.7617, abs=1e-4)
    for std, load in ((0.5, load_linearly_separable), (2.0, load_overlapping)):
        x, y = _synthetic_points(load())
        for c in (0, 1):  # class c sits at centre c with the cluster's standard deviation
            assert x[y == c].mean(0) == pytest.approx(centres[c], abs=5 * std / np.sqrt(2000))
            assert x[y == c].std(0) == pytest.approx([std, std], rel=0.1)


def test_overlapping_is_as_hard_as_the_papers_bayes_accuracy() -> None:
    d = np.linalg.norm(synthetic.MLJ_BLOB_CENTRES[0] - synthetic.MLJ_BLOB_CENTRES[1])
    bayes = NormalDist().cdf(d / (2 * 2.0))
    assert bayes == pytest.approx(0.925, abs=1e-3)
    data = load_overlapping()
    x, y = _synthetic_points(data)
    accuracy = _lda_accuracy(data.x.double().numpy(), data.y.numpy(), x, y)
    assert accuracy == pytest.approx(bayes, abs=0.02)  # sklearn's blobs: 0.994
    separable = _synthetic_points(load_linearly_separable())
    assert _lda_accuracy(*separable, *separable) > 0.999


def test_moons_second_moon_is_mljs_unit_half_circle_below_0_3() -> None:
    x, y = _synthetic_points(load_moons())
    first, second = x[y == 0], x[y == 1]
    radius = np.linalg.norm(second - [1.0, 0.3], axis=1)
    assert radius.mean() == pytest.approx(1.0, abs=0.02) and radius.std() < 0.12
    assert second[:, 1].mean() == pytest.approx(0.3 - 2 / np.pi, abs=0.02)  # t ~ U(0, pi)
    assert (second[:, 1] > 0.3 + 0.3).mean() < 0.01  # below y = 0.3 up to three sds of noise
    assert np.linalg.norm(first, axis=1).mean() == pytest.approx(1.0, abs=0.02)
    assert first[:, 1].mean() == pytest.approx(2 / np.pi, abs=0.02)
    assert (first[:, 1] < -0.3).mean() < 0.01


def test_circles_class_0_is_the_inner_disc_and_class_1_the_unit_ring() -> None:
    x, y = _synthetic_points(load_circles())
    inner, outer = np.linalg.norm(x[y == 0], axis=1), np.linalg.norm(x[y == 1], axis=1)
    # Radius 0.01 plus N(0, 0.15^2) noise per coordinate: a Rayleigh radius of mean 0.15 sqrt(pi/2).
    assert inner.mean() == pytest.approx(0.15 * np.sqrt(np.pi / 2), abs=0.02)
    assert outer.mean() == pytest.approx(1.0, abs=0.03) and outer.std() < 0.2
    assert x[y == 1].mean(0) == pytest.approx([0.0, 0.0], abs=0.05)  # angles all round


def test_mlj_generators_split_the_classes_equally() -> None:
    rng = np.random.default_rng(0)
    for _, y in (
        synthetic.mlj_blobs(1000, 0.5, rng),
        synthetic.mlj_circles(1000, 0.15, 0.01, rng),
        synthetic.mlj_moons(1000, 0.1, rng),
    ):
        assert np.bincount(y).tolist() == [500, 500]
    assert np.bincount(synthetic.mlj_blobs(7, 0.5, rng)[1]).tolist() == [3, 4]
    for load in (load_linearly_separable, load_overlapping, load_circles, load_moons):
        _, y = _synthetic_points(load())
        assert 0.45 < y.mean() < 0.55


def test_mlj_generators_without_noise_put_each_point_where_mljbase_does() -> None:
    rng = np.random.default_rng(0)
    c0, c1 = synthetic.MLJ_BLOB_CENTRES
    # Blobs: rows 0-4 are class 0, rows 4-9 get class 1's centre, so row 4 is moved twice and a
    # point of class 0 sits at class 1's centre (MLJBase's shared boundary row).
    x, y = synthetic.mlj_blobs(10, 0.0, rng)
    at_c0, at_c1 = np.all(x == c0, axis=1), np.all(x == c1, axis=1)
    assert (at_c0 | at_c1).all()
    assert [at_c0[y == 0].sum(), at_c1[y == 0].sum(), at_c1[y == 1].sum()] == [4, 1, 5]
    # Circles: class 0 on the circle of radius ``factor``, class 1 on the unit circle.
    x, y = synthetic.mlj_circles(9, 0.0, 0.3, rng)
    radius = np.linalg.norm(x, axis=1)
    assert np.bincount(y).tolist() == [4, 5]
    assert np.allclose(radius[y == 0], 0.3) and np.allclose(radius[y == 1], 1.0)
    # Moons, odd n: 4 points of class 0 on the upper unit half circle, 4 of class 1 on the lower
    # half circle around (1, 0.3), and the middle point on the first moon but labelled 1.
    x, y = synthetic.mlj_moons(9, 0.0, rng)
    first = np.isclose(np.linalg.norm(x, axis=1), 1.0) & (x[:, 1] >= 0)
    second = np.isclose(np.linalg.norm(x - [1.0, 0.3], axis=1), 1.0) & (x[:, 1] <= 0.3)
    assert (first ^ second).all()
    assert [first[y == 0].sum(), first[y == 1].sum(), second[y == 1].sum()] == [4, 1, 4]


# The points every shipped result under data/reproduction was computed from (made at b48b984,
# whose loaders give these same points): a change to a generator, its seed or its split that moves
# any point means those results no longer regenerate from the code. The float32 cast hides the
# last bits of numpy's sin and cos, which differ between vector instruction sets.
SHIPPED_POINTS = {
    load_linearly_separable: "e5076a276dee2b3e",
    load_overlapping: "bbc4a23338c85df5",
    load_circles: "08762f914cd4436a",
    load_moons: "db3b5410bdbb325a",
}


@pytest.mark.parametrize("load", list(SHIPPED_POINTS), ids=lambda load: load.__name__)
def test_synthetic_sets_are_the_points_of_the_shipped_results(load) -> None:
    data = load()
    digest = hashlib.sha256()
    for t in (data.x, data.y, data.x_test, data.y_test):
        digest.update(t.contiguous().numpy().tobytes())
    assert digest.hexdigest()[:16] == SHIPPED_POINTS[load]
    assert data.name == load.__name__.removeprefix("load_")
    assert load(generator="sklearn").name == data.name


@pytest.mark.parametrize("generator", synthetic.GENERATORS)
def test_synthetic_sets_need_a_whole_number_of_points_that_leaves_a_test_part(generator) -> None:
    smallest = load_moons(n=3, generator=generator)
    assert (len(smallest.y), len(smallest.y_test)) == (2, 1)
    for n in (2, 2.5, True, "5"):
        with pytest.raises(ValueError, match="n must be an integer of at least 3"):
            load_moons(n=n, generator=generator)


def test_synthetic_split_is_get_datas_first_3600_and_last_900_of_a_permutation() -> None:
    data = load_moons()
    assert data.x.shape == (3600, 2) and data.x_test.shape == (900, 2)
    x, y = synthetic.mlj_moons(synthetic.N_DRAWN, 0.1, np.random.default_rng(synthetic.DATA_SEED))
    order = np.random.default_rng(synthetic.SPLIT_SEED).permutation(synthetic.N_DRAWN)
    assert np.array_equal(data.x.numpy(), x[order[:3600]].astype(np.float32))
    assert np.array_equal(data.x_test.numpy(), x[order[-900:]].astype(np.float32))
    assert np.array_equal(data.y_test.numpy(), y[order[-900:]])
    assert "MLJBase make_moons" in data.source and "first 3,600 train, last 900 test" in data.source
    assert not np.array_equal(load_moons(seed=1).x.numpy(), data.x.numpy())


def test_sklearn_generator_gives_the_previous_data_and_says_so() -> None:
    train, test = split_rows(4500)
    for load, make, settings in (
        (load_overlapping, make_blobs, {"centers": 2, "cluster_std": 2.0}),
        (load_circles, make_circles, {"noise": 0.15, "factor": 0.01}),
        (load_moons, make_moons, {"noise": 0.1}),
    ):
        x, y = make(4500, random_state=42, **settings)
        data = load(generator="sklearn")
        assert np.array_equal(data.x.numpy(), x[train].astype(np.float32))
        assert np.array_equal(data.y_test.numpy(), y[test])
        assert data.source.startswith(f"sklearn {make.__name__}")
    assert load_linearly_separable().source.startswith("MLJBase make_blobs")
    with pytest.raises(ValueError, match="generator must be one of mlj, sklearn"):
        load_moons(generator="julia")


@pytest.mark.parametrize("load", [load_overlapping, load_circles, load_moons])
def test_sklearn_generator_without_sklearn_names_the_extra(monkeypatch, load) -> None:
    # The library installs without scikit-learn (the paper extra brings it); None in sys.modules
    # makes its import fail as if it were absent.
    for name in ("sklearn", "sklearn.datasets"):
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(ImportError, match=r"pip install 'cfbook\[paper\]'"):
        load(generator="sklearn")
    assert load().source.startswith("MLJBase")  # the default needs nothing more


# --- The tabular split: TaijaData's apply_split, the first 80 % of the rows ----------------------


def test_tabular_sets_train_on_the_first_80_percent_of_the_rows_unless_shuffled() -> None:
    train, test = split_rows(10, shuffle=False)
    assert train.tolist() == list(range(8)) and test.tolist() == [8, 9]
    _, labels = _csv_table(read_verified("gmsc_balanced.csv.gz"), "target")
    cut = round(0.8 * len(labels))
    paper = load_gmsc()
    assert paper.y.tolist() == labels[:cut].tolist()
    assert paper.y_test.tolist() == labels[cut:].tolist()
    shuffled = load_gmsc(shuffle=True)
    rows, _ = split_rows(len(labels))
    assert shuffled.y.tolist() == labels[rows].tolist() != paper.y.tolist()
