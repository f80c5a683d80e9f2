"""Training progress as one plain line per epoch.

A progress bar drawn in place (tqdm's terminal bar or its Jupyter widget) shows nothing useful
once it is copied somewhere else: the pipeline's terminal only receives a notebook's text output,
and an executed notebook keeps a widget frozen at its first state. Whole lines read the same in a
terminal, in a log file and in an executed notebook, and the last one says how the run ended.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

__all__ = ["EpochProgress", "format_duration"]


def format_duration(seconds: float) -> str:
    """``42.0 s``, ``3 min 05 s`` or ``1 h 02 min``: short enough for a progress line."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


class EpochProgress:
    """Prints ``name: epoch k/n, s/epoch, time left`` after each epoch of a run.

    The time left is the last epoch's wall time (search, training, accuracy and checkpoint
    included) times the epochs to go: epochs after the burn-in all do the same work, so the
    latest one is the best guess for the next.
    """

    def __init__(
        self,
        name: str,
        nepochs: int,
        start: int = 1,
        *,
        enabled: bool = True,
        stream: TextIO | None = None,
    ):
        self.name, self.nepochs, self.enabled = name, nepochs, enabled
        self.stream = stream
        self._t_start = self._t_last = time.perf_counter()
        if start > nepochs:
            self._print(
                f"the checkpoint holds all {nepochs} epochs: returning its model and log (ask for "
                "more epochs to train further)"
            )
        elif start > 1:
            self._print(f"resuming from the checkpoint of epoch {start - 1}/{nepochs}")

    def _print(self, text: str) -> None:
        if self.enabled:
            # Looked up per call, so redirected or captured output (papermill, pytest) sees it.
            print(f"{self.name}: {text}", file=self.stream or sys.stdout, flush=True)

    def update(self, epoch: int, figures: dict[str, str] | None = None) -> None:
        """Report that ``epoch`` is complete; ``figures`` (name -> formatted value) follow."""
        now = time.perf_counter()
        per_epoch, self._t_last = now - self._t_last, now
        left = self.nepochs - epoch
        status = (
            f"{format_duration(left * per_epoch)} left"
            if left > 0
            else f"done in {format_duration(now - self._t_start)}"
        )
        text = f"epoch {epoch}/{self.nepochs}, {per_epoch:.1f} s/epoch, {status}"
        if figures:
            text += " (" + ", ".join(f"{k} {v}" for k, v in figures.items()) + ")"
        self._print(text)
