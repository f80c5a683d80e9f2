"""cfbook.training.run: a run's identity, which decides whether a checkpoint may be resumed, and
the message that says why not."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import torch

from cfbook.training.run import TrainingRun, _difference, data_fingerprint


def _run(**changes: object) -> TrainingRun:
    settings: dict[str, object] = {
        "objective": "FullObjective",
        "lambdas": (1.0, 0.5, 0.1, 0.25),
        "nce": 30,
        "burnin_epochs": 1,
        "generator": {"tau": 0.75, "maxiter": 10},
        "amp": None,
        "mature": None,
        "accumulate": 1,
        "fuse_cf_forwards": False,
        "world_size": 1,
        "domain": None,
        "mutability": None,
        "data": {"sha256": "ab"},
        "loader": {"batch_size": 30, "shuffle": True, "drop_last": False},
        "optimizer": {"class": "Adam", "lr": 0.01, "betas": [0.9, 0.999]},
        "model": {"class": "Sequential", "0.weight": [16, 4], "0.bias": [16]},
    }
    return TrainingRun(**{**settings, **changes})  # type: ignore[arg-type]


def test_the_data_fingerprint_holds_shapes_dtypes_and_a_hash_of_the_bytes() -> None:
    """The form checkpoints store: a checkpoint written by one cfbook must still match the same
    data under the next."""
    x, y = torch.tensor([[1.0, 2.0], [3.0, 4.0]]), torch.tensor([0, 1])
    digest = hashlib.sha256(x.numpy().tobytes() + y.numpy().tobytes()).hexdigest()
    assert data_fingerprint(x, y) == {"x": [2, 2, "float32"], "y": [2, "int64"], "sha256": digest}


def test_the_same_bytes_read_as_another_dtype_are_other_data() -> None:
    x, y = torch.tensor([[1.0, 2.0]]), torch.tensor([0])
    assert data_fingerprint(x.view(torch.int32), y) != data_fingerprint(x, y)


def test_a_checkpoint_of_more_processes_says_how_to_resume_it() -> None:
    saved = _run(world_size=2).record()
    with pytest.raises(ValueError, match=r"written by 2 process\(es\), this run has 1") as info:
        _run().check_resumable(saved, Path("ckpt"))
    assert "torchrun --nproc_per_node=2" in str(info.value)


def test_a_checkpoint_that_does_not_say_its_processes_is_another_run() -> None:
    """A record without ``world_size`` (written before cfbook trained on several processes)
    is refused as another run, not with a ``KeyError``."""
    saved = _run().record()
    del saved["world_size"]
    with pytest.raises(ValueError, match="another run: world_size: None in the checkpoint, 1 now"):
        _run().check_resumable(saved, Path("ckpt"))


def test_each_difference_is_named_in_the_order_of_the_fields() -> None:
    saved = _run(nce=60, amp="bf16", generator={"tau": 0.9, "maxiter": 20}).record()
    with pytest.raises(ValueError) as info:
        _run().check_resumable(saved, Path("ckpt"))
    assert str(info.value) == (
        "checkpoint in ckpt belongs to another run: nce: 60 in the checkpoint, 30 now; "
        "generator: 'tau': 0.9 in the checkpoint, 0.75 now; 'maxiter': 20 in the checkpoint, "
        "10 now; amp: 'bf16' in the checkpoint, None now. Use another checkpoint_dir, or delete "
        "it to train afresh (the command lines: --force)"
    )


def test_the_same_run_resumes() -> None:
    _run().check_resumable(_run().record(), Path("ckpt"))  # raises nothing


def test_settings_present_on_one_side_only_are_shown_whole() -> None:
    now = {"tau": 0.9}
    assert _difference("generator", None, now) == (
        "generator: None in the checkpoint, {'tau': 0.9} now"
    )
    assert _difference("generator", now, None) == (
        "generator: {'tau': 0.9} in the checkpoint, None now"
    )


def test_a_difference_is_summarised_from_161_characters() -> None:
    def text(k: int) -> str:
        return f"{'a' * k!r} in the checkpoint, '' now"

    k = 160 - len(text(0))
    assert _difference("data", "a" * k, "") == f"data: {text(k)}"
    assert _difference("data", "a" * (k + 1), "") == "data: not the same"
