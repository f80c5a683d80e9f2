"""cfbook.progress: one readable line per epoch, in a terminal as in an executed notebook."""

from __future__ import annotations

import io
import re

import pytest

import cfbook.progress as progress_module
from cfbook.progress import EpochProgress, format_duration


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0.04, "0.0 s"),
        (42.25, "42.2 s"),
        (59.94, "59.9 s"),
        (60, "1 min 00 s"),  # each unit ends where the next begins
        (65, "1 min 05 s"),
        (3599, "59 min 59 s"),
        (3600, "1 h 00 min"),
        (3725, "1 h 02 min"),
    ],
)
def test_durations_are_short(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


def _clock(monkeypatch: pytest.MonkeyPatch, times: list[float]) -> None:
    ticks = iter(times)
    monkeypatch.setattr(progress_module.time, "perf_counter", lambda: next(ticks))


def test_each_epoch_gives_its_time_and_what_is_left(monkeypatch: pytest.MonkeyPatch) -> None:
    _clock(monkeypatch, [0.0, 10.0, 30.0, 50.0])
    out = io.StringIO()
    bar = EpochProgress("FullObjective", 3, stream=out)
    bar.update(1, {"loss": "0.500"})
    bar.update(2)
    bar.update(3, {"loss": "0.300", "acc": "0.910"})
    assert out.getvalue().splitlines() == [
        "FullObjective: epoch 1/3, 10.0 s/epoch, 20.0 s left (loss 0.500)",
        # The estimate follows the latest epoch: after burn-in, epochs get slower.
        "FullObjective: epoch 2/3, 20.0 s/epoch, 20.0 s left",
        "FullObjective: epoch 3/3, 20.0 s/epoch, done in 50.0 s (loss 0.300, acc 0.910)",
    ]


def test_a_resumed_run_says_where_it_continues(monkeypatch: pytest.MonkeyPatch) -> None:
    _clock(monkeypatch, [0.0, 5.0])
    out = io.StringIO()
    bar = EpochProgress("VanillaObjective", 20, start=16, stream=out)
    bar.update(16)
    assert out.getvalue().splitlines() == [
        "VanillaObjective: resuming from the checkpoint of epoch 15/20",
        "VanillaObjective: epoch 16/20, 5.0 s/epoch, 20.0 s left",
    ]


def test_a_run_resumed_after_its_first_epoch_says_so_too() -> None:
    out = io.StringIO()
    EpochProgress("VanillaObjective", 20, start=2, stream=out)
    EpochProgress("VanillaObjective", 20, start=1, stream=out)  # a fresh run: nothing to say
    assert out.getvalue() == "VanillaObjective: resuming from the checkpoint of epoch 1/20\n"


class _Buffered(io.StringIO):
    """A stream that shows only what was flushed, as a pipe to papermill or a log file does."""

    shown = ""

    def flush(self) -> None:
        self.shown = self.getvalue()


def test_each_line_is_flushed_as_it_is_printed() -> None:
    out = _Buffered()
    EpochProgress("FullObjective", 2, stream=out).update(1)
    assert out.shown.startswith("FullObjective: epoch 1/2, ")


def test_disabled_progress_prints_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    bar = EpochProgress("FullObjective", 2, start=2, enabled=False)
    bar.update(2)
    assert capsys.readouterr().out == ""


def test_lines_go_to_the_current_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    bar = EpochProgress("FullObjective", 1)  # created before the output is captured elsewhere
    bar.update(1)
    assert re.fullmatch(
        r"FullObjective: epoch 1/1, [\d.]+ s/epoch, done in [\d.]+ s\n", capsys.readouterr().out
    )
