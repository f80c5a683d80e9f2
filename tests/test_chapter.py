"""cfbook.book.chapter.setup: the one call after every chapter's parameters cell."""

from __future__ import annotations

import dataclasses
import logging
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
    data_dir = find_data_dir().resolve()
    assert chapter == Chapter("plot", get_profile("smoke"), torch.device("cpu"), data_dir)
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


def test_the_default_profile_follows_the_chapters_own_device(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The profile is chosen for the device the chapter runs on, not detected a second time.
    import cfbook.book.chapter as chapter_module

    monkeypatch.setattr(chapter_module, "detect_device", lambda verbose: torch.device("mps"))
    monkeypatch.setattr(chapter_module, "describe_device", lambda device: "a test GPU")
    chapter = setup("plot")
    assert (chapter.device, chapter.profile.name) == (torch.device("mps"), "tutorial")
    assert capsys.readouterr().out == ("CT_MODE=plot, profile=tutorial, device mps (a test GPU)\n")


def test_off_cuda_the_no_cuda_runtime_line_of_inductor_is_silenced(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import cfbook.book.chapter as chapter_module

    logger = logging.getLogger("torch.utils.cpp_extension")
    monkeypatch.setattr(logger, "level", logging.NOTSET)  # restored after the test
    setup("plot", "smoke")
    assert logger.level == logging.ERROR
    # On a CUDA device the line cannot appear, and the logger is left alone.
    logger.setLevel(logging.NOTSET)
    monkeypatch.setattr(chapter_module, "detect_device", lambda verbose: torch.device("cuda"))
    monkeypatch.setattr(chapter_module, "describe_device", lambda device: "a test GPU")
    setup("plot", "smoke")
    assert logger.level == logging.NOTSET
