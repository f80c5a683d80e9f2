"""cfbook.book.chapter.setup: the one call after every chapter's parameters cell."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from cfbook.book.chapter import Chapter, setup
from cfbook.book.profiles import get_profile
from cfbook.data import find_data_dir


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("CT_MODE", "CFBOOK_PROFILE", "CFBOOK_DATA_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CFBOOK_DEVICE", "cpu")


def test_defaults_come_from_the_environment_and_print_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CFBOOK_PROFILE", "smoke")
    chapter = setup()
    assert chapter == Chapter("plot", get_profile("smoke"), torch.device("cpu"), find_data_dir())
    (line,) = capsys.readouterr().out.splitlines()
    assert line.startswith("CT_MODE=plot, profile=smoke, device cpu (CPU: ")
    assert line.endswith(" cores)")


def test_parameters_beat_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CT_MODE", "vanilla")
    monkeypatch.setenv("CFBOOK_PROFILE", "smoke")
    chapter = setup("full", "tutorial", data_dir=tmp_path / "logs" / "..")
    assert (chapter.mode, chapter.profile.name) == ("full", "tutorial")
    assert chapter.data_dir == tmp_path.resolve()  # resolved: no ".." in printed paths
    assert "CT_MODE=full, profile=tutorial, device cpu" in capsys.readouterr().out


def test_the_data_folder_follows_cfbook_data_dir(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("CFBOOK_DATA_DIR", str(tmp_path))
    assert setup("plot", "cpu").data_dir == tmp_path.resolve()


def test_bad_parameters_are_errors_naming_the_valid_ones() -> None:
    with pytest.raises(ValueError, match="full, vanilla, plot"):
        setup("train", "cpu")
    with pytest.raises(ValueError, match="tutorial, cpu, smoke"):
        setup("plot", "huge")


def test_a_chapter_is_frozen() -> None:
    chapter = setup("plot", "smoke")
    with pytest.raises(dataclasses.FrozenInstanceError):
        chapter.mode = "full"  # type: ignore[misc]
