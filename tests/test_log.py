import json
import os

import pytest
import torch

from cfbook import EpochRecord, TrainingLog, atomic, load_log, save_log
from cfbook.atomic import atomic_torch_save, atomic_write_text


def sample_log() -> TrainingLog:
    return TrainingLog(
        [
            EpochRecord(1, None, None, 2.3, None, None, None, 0.5, 1.0, 0.0),
            EpochRecord(2, 0.8, 0.75, 1.2, -0.3, 1.1, 0.9, 1.5, 0.4, 22.5, implaus_valid=-0.75),
            EpochRecord(
                3,
                0.9,
                None,
                float("nan"),
                float("inf"),
                float("-inf"),
                0.8,
                1.4,
                0.5,
                20.0,
                skipped_batches=2,
            ),
        ],
        meta={"objective": "FullObjective", "burnin_epochs": 1},
    )


def test_log_round_trips_with_none_and_non_finite_values(tmp_path):
    log = sample_log()
    save_log(log, tmp_path / "full.json")
    back = load_log(tmp_path / "full.json")
    assert back.meta == log.meta
    assert back[:2] == log[:2]
    assert back[2].train_loss != back[2].train_loss and back[2].implaus == float("inf")
    assert back[2].reg_loss == float("-inf")
    assert back.column("acc") == [None, 0.8, 0.9]
    assert back.column("implaus_valid") == [None, -0.75, None]
    assert back.column("skipped_batches") == [0, 0, 2]


@pytest.mark.parametrize(
    "content",
    [
        "{not json",
        json.dumps({"format": "other"}),
        json.dumps({"format": "cfbook-training-log", "records": [{"epoch": 1}]}),
    ],
)
def test_corrupt_log_is_named(tmp_path, content):
    path = tmp_path / "full.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=f"corrupt training log {path}"):
        load_log(path)


def test_a_json_file_of_another_kind_is_named_as_such(tmp_path):
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"format": "other"}))
    message = f"corrupt training log {path}: not a cfbook training log$"
    with pytest.raises(ValueError, match=message):
        load_log(path)


def test_a_log_file_holds_one_field_per_line(tmp_path):
    """Shipped logs are read and diffed by people: one space of indentation per level."""
    save_log(sample_log(), tmp_path / "full.json")
    lines = (tmp_path / "full.json").read_text().splitlines()
    assert lines[:3] == ["{", ' "format": "cfbook-training-log",', ' "version": 2,']
    assert '  "epoch": 1,' not in lines and '   "epoch": 1,' in lines


def test_a_log_of_another_format_version_says_to_retrain(tmp_path):
    path = tmp_path / "full.json"
    save_log(sample_log(), path)
    payload = json.loads(path.read_text())
    payload["version"] = 1
    path.write_text(json.dumps(payload))
    with pytest.raises(ValueError, match="format version 1.*run the training again"):
        load_log(path)


def test_missing_log_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="training log not found"):
        load_log(tmp_path / "nope.json")


def test_a_partial_file_is_hidden_beside_its_target(tmp_path, monkeypatch):
    """The temporary file lies in the target's folder (a rename across file systems is not
    atomic) and is named so that no glob for the target's kind (``*.json``) picks it up."""
    seen: list[list[str]] = []

    def write(handle):
        seen.append(sorted(os.listdir(tmp_path / "logs")))
        handle.write(b"{}")

    folder, elsewhere = tmp_path / "logs", tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.setattr(atomic.tempfile, "tempdir", str(elsewhere))
    atomic._atomic_write(folder / "log.json", write)
    assert len(seen[0]) == 1
    assert seen[0][0].startswith(".log.json.") and seen[0][0].endswith(".tmp")
    assert sorted(os.listdir(folder)) == ["log.json"] and not os.listdir(elsewhere)


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_an_atomic_write_gets_the_permissions_of_a_plain_write(tmp_path, umask):
    old = os.umask(umask)
    try:
        atomic_write_text(tmp_path / "atomic.txt", "x")
        (tmp_path / "plain.txt").write_text("x")
    finally:
        os.umask(old)
    modes = [(tmp_path / name).stat().st_mode & 0o777 for name in ("atomic.txt", "plain.txt")]
    assert modes == [0o666 & ~umask] * 2


def test_atomic_writes_leave_no_temp_files_and_keep_old_file_on_failure(tmp_path):
    target = tmp_path / "sub" / "file.txt"
    atomic_write_text(target, "first")
    assert target.read_text() == "first"
    assert target.stat().st_mode & 0o044  # readable by others, as a plain write would be

    class Unpicklable:
        def __reduce__(self):
            raise RuntimeError("boom")

    ckpt = tmp_path / "ckpt.pt"
    atomic_torch_save({"a": torch.ones(2)}, ckpt)
    with pytest.raises(RuntimeError, match="boom"):
        atomic_torch_save({"a": Unpicklable()}, ckpt)
    assert torch.equal(torch.load(ckpt, weights_only=True)["a"], torch.ones(2))
    assert sorted(os.listdir(tmp_path)) == ["ckpt.pt", "sub"]
    assert os.listdir(tmp_path / "sub") == ["file.txt"]
