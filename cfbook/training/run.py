"""A training run's identity: the settings that decide its results epoch by epoch, and a
fingerprint of its data. A checkpoint records it, and a run resumes a checkpoint only when its
identity is the same: otherwise epochs trained one way would be continued another way, under a
log that claims one set of settings for all of them."""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from cfbook.search.constraints import Domain, Mutability, Shape, domain_bounds, mutability_values
from cfbook.training.checkpoint import loader_generators


def data_fingerprint(x: Tensor, y: Tensor) -> dict[str, Any]:
    """Shapes, dtypes and a SHA-256 of the training inputs and labels (one host copy, once per
    run)."""
    digest = hashlib.sha256()
    for t in (x, y):
        digest.update(t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy())
    return {
        "x": [*x.shape, str(x.dtype).removeprefix("torch.")],
        "y": [*y.shape, str(y.dtype).removeprefix("torch.")],
        "sha256": digest.hexdigest(),
    }


def domain_identity(domain: Domain, shape: Shape) -> list[list[float]] | None:
    """The domain as per-feature (low, high) pairs, whatever form it was given in."""
    return None if domain is None else domain_bounds(domain, shape).tolist()


def mutability_identity(mutability: Mutability, shape: Shape) -> list[str] | None:
    """The mutability as a flat list of its values (``shape``: one sample's)."""
    return None if mutability is None else mutability_values(mutability, shape)


def _plain(value: Any) -> Any:
    """A setting as plain values, the same after a round trip through a checkpoint (tuples come
    back as lists, tensors as numbers)."""
    if isinstance(value, Tensor):
        return value.tolist()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)


def optimizer_identity(optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """The optimizer's class and each parameter group's hyper-parameters (the first group's
    under their own names, a later group's prefixed ``group <i>``), as given to it: a
    scheduler's later changes are the run's, not its identity."""
    out: dict[str, Any] = {"class": type(optimizer).__name__}
    for i, group in enumerate(optimizer.param_groups):
        prefix = "" if i == 0 else f"group {i} "
        for key, value in group.items():
            if key != "params":
                out[prefix + key] = _plain(value)
    return out


def model_identity(model: nn.Module) -> dict[str, Any]:
    """The model's class and the shape of each of its parameters and buffers."""
    shapes = {name: list(t.shape) for name, t in model.state_dict().items()}
    return {"class": type(model).__name__, **shapes}


def loader_identity(loader: object) -> dict[str, Any]:
    """How the loader batches: its batch size, whether it shuffles, whether it drops the last,
    short batch (a torch ``DataLoader`` shuffles with a ``RandomSampler``) and how many
    generators of its own a DataLoader draws from."""
    sampler = getattr(loader, "sampler", None)
    shuffle = getattr(loader, "shuffle", isinstance(sampler, torch.utils.data.RandomSampler))
    out = {
        "batch_size": getattr(loader, "batch_size", None),
        "shuffle": bool(shuffle),
        "drop_last": bool(getattr(loader, "drop_last", False)),
    }
    generators = len(loader_generators(loader))
    if generators:  # a DataLoader's own generators, whose states a checkpoint holds
        out["generators"] = generators
    return out


@dataclass(frozen=True)
class TrainingRun:
    """Everything that decides a run's results epoch by epoch (not ``nepochs``: a finished run
    may be extended): the objective and its search, the update rule, the constraints, the data
    and how they are batched, the optimizer and the model's architecture. The first seven fields
    are what the log's meta records of it."""

    objective: str
    lambdas: tuple[float, ...]
    nce: int | None
    burnin_epochs: int
    generator: dict[str, Any] | None
    amp: str | None
    mature: str | None
    accumulate: int
    fuse_cf_forwards: bool
    world_size: int
    domain: list[list[float]] | None
    mutability: list[str] | None
    data: dict[str, Any]
    loader: dict[str, Any]
    optimizer: dict[str, Any]
    model: dict[str, Any]
    # The one-hot groups the training-time search decodes (None: none, as before it existed).
    categorical: list[list[int]] | None = None

    def meta(self) -> dict[str, Any]:
        """The log's record of the run's settings."""
        keys = ("objective", "lambdas", "nce", "burnin_epochs", "generator", "amp", "mature")
        out = {k: getattr(self, k) for k in keys}
        out["lambdas"] = list(self.lambdas)
        return out

    def record(self) -> dict[str, Any]:
        """The identity as plain values, as a checkpoint stores it."""
        out = asdict(self)
        out["lambdas"] = list(self.lambdas)
        return out

    def differences(self, saved: dict[str, Any] | None) -> list[str]:
        """The fields in which a checkpoint's stored identity differs from this run's."""
        saved = saved or {}
        mine = self.record()
        return [f.name for f in fields(self) if saved.get(f.name) != mine[f.name]]

    def check_resumable(self, saved: dict[str, Any] | None, where: Path) -> None:
        """Refuse to resume a checkpoint written by another run, naming what differs and the
        fix."""
        saved = saved or {}
        if saved.get("world_size", self.world_size) != self.world_size:
            n = saved["world_size"]
            raise ValueError(
                f"checkpoint in {where} was written by {n} process(es), this run has "
                f"{self.world_size}: every process trains on its part of each global batch of "
                f"world_size x batch_size samples, so resume with {n} process(es) (torchrun "
                f"--nproc_per_node={n} ...), or use another checkpoint_dir or delete it to start "
                "afresh"
            )
        differ = self.differences(saved)
        if differ:
            mine = self.record()
            detail = "; ".join(_difference(name, saved.get(name), mine[name]) for name in differ)
            raise ValueError(
                f"checkpoint in {where} belongs to another run: {detail}. Use another "
                "checkpoint_dir, or delete it to train afresh (the command lines: --force)"
            )


def _difference(name: str, saved: Any, now: Any) -> str:
    """One differing field, briefly: for settings, the entries that differ (only the class,
    where that differs: another optimizer's settings are all other); long values (a domain, the
    data's hash) are not printed."""
    if isinstance(saved, dict) and isinstance(now, dict):
        keys = [k for k in {**saved, **now} if saved.get(k) != now.get(k)]
        if "class" in keys:
            keys = ["class"]
        parts = [f"{k!r}: {saved.get(k)!r} in the checkpoint, {now.get(k)!r} now" for k in keys]
        text = "; ".join(parts)
    else:
        text = f"{saved!r} in the checkpoint, {now!r} now"
    return f"{name}: {'not the same' if len(text) > 160 else text}"
