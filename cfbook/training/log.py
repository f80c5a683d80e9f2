"""The per-epoch training log, and its JSON form on disk."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from cfbook.atomic import atomic_write_text

# Version 2 added implaus_valid and skipped_batches, and averages the terms over all batches.
LOG_FORMAT_VERSION = 2


@dataclass
class EpochRecord:
    """One epoch's figures; ``None`` marks a figure that was not computed that epoch.

    ``implaus``, ``reg_loss`` and ``adv_loss`` are means over all mini-batches (as in CT.jl) and
    are logged whenever counterfactuals exist, whatever the objective's weights. ``implaus``
    counts an invalid counterfactual (replaced by its neighbour) as 0; ``implaus_valid`` is the
    energy differential over the valid counterfactuals alone (``None`` when none was valid).
    ``percent_valid`` and ``avg_iter`` (the share of the epoch's counterfactuals that reached
    their target, and their mean search steps) are ``None`` in an epoch without a search (a
    burn-in epoch, a baseline), as CT.jl logs ``nothing``. ``skipped_batches`` counts
    mini-batches whose non-finite loss skipped the update.
    """

    epoch: int
    acc: float | None
    acc_val: float | None
    train_loss: float
    implaus: float | None
    reg_loss: float | None
    adv_loss: float | None
    time_taken: float
    percent_valid: float | None
    avg_iter: float | None
    implaus_valid: float | None = None
    skipped_batches: int = 0


class TrainingLog(list):
    """A list of ``EpochRecord`` plus ``meta`` describing the run that produced it."""

    def __init__(self, records: list[EpochRecord] | None = None, meta: dict | None = None):
        super().__init__(records or [])
        self.meta: dict[str, Any] = dict(meta or {})

    def column(self, name: str) -> list:
        """One field across epochs, e.g. ``log.column("time_taken")``."""
        return [getattr(record, name) for record in self]


_FIELDS = [f.name for f in fields(EpochRecord)]


def _json_value(value: Any) -> Any:
    # JSON has no NaN/inf: store them as strings so a diverged run still round-trips.
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def _from_json_value(value: Any) -> Any:
    return float(value) if value in ("nan", "inf", "-inf") else value


def save_log(log: TrainingLog, path: str | Path) -> None:
    """Write ``log`` as JSON, atomically."""
    payload = {
        "format": "cfbook-training-log",
        "version": LOG_FORMAT_VERSION,
        "meta": getattr(log, "meta", {}),
        "records": [{k: _json_value(v) for k, v in asdict(r).items()} for r in log],
    }
    atomic_write_text(path, json.dumps(payload, indent=1))


def load_log(path: str | Path) -> TrainingLog:
    """Read a log written by ``save_log``; a damaged file is an error naming the file."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"training log not found: {path}")
    try:
        payload = json.loads(path.read_text(encoding="utf-8"))
        if payload.get("format") != "cfbook-training-log":
            raise ValueError("not a cfbook training log")
        if payload.get("version") != LOG_FORMAT_VERSION:
            raise ValueError(
                f"log format version {payload.get('version')!r}, this cfbook reads version "
                f"{LOG_FORMAT_VERSION}; run the training again to write a current log"
            )
        records = []
        for raw in payload["records"]:
            if set(raw) != set(_FIELDS):
                raise ValueError(f"record fields {sorted(raw)} differ from {sorted(_FIELDS)}")
            records.append(EpochRecord(**{k: _from_json_value(raw[k]) for k in _FIELDS}))
        return TrainingLog(records, payload.get("meta") or {})
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        raise ValueError(f"corrupt training log {path}: {err}") from err
