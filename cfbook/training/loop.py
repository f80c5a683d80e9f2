"""Counterfactual training (Algorithm 1 of the CT paper): each epoch after burn-in, search
counterfactuals for a sample of the training data and add their loss terms to every mini-batch.

``counterfactual_training`` is four steps, each its own function: set up the run (its identity,
the search, the log), resume it from a checkpoint, train one epoch, and record the epoch.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import Tensor, nn

from cfbook.amp import autocast, check_amp
from cfbook.device import synchronize
from cfbook.errors import warn
from cfbook.inputs import (
    check_features,
    check_finite,
    check_label_range,
    check_labels,
    check_not_empty,
    require_int,
    require_number,
)
from cfbook.objectives import Objective
from cfbook.profiling import EpochProfiler
from cfbook.progress import EpochProgress
from cfbook.search.constraints import Domain, Mutability
from cfbook.search.generators import count_classes
from cfbook.search.interface import Generator, check_generator
from cfbook.training import distributed
from cfbook.training.checkpoint import (
    load_checkpoint,
    restore_rng_states,
    rng_states,
    save_checkpoint,
)
from cfbook.training.counterfactuals import (
    CounterfactualBatch,
    EpochSearch,
    check_mature,
    epoch_counterfactuals,
    epoch_search,
)
from cfbook.training.log import EpochRecord, TrainingLog
from cfbook.training.loss import TERM_WEIGHTS, batch_loss
from cfbook.training.run import (
    TrainingRun,
    data_fingerprint,
    domain_identity,
    loader_identity,
    model_identity,
    mutability_identity,
    optimizer_identity,
)

__all__ = ["LOW_VALIDITY", "LowValidityWarning", "counterfactual_training", "training_tensors"]


def training_tensors(loader: Iterable) -> tuple[Tensor, Tensor]:
    """The whole training set as tensors, gathered once: the epoch's factuals and their
    neighbours are drawn from all of it. A ``DeviceLoader`` holds them already; a torch
    ``DataLoader`` over any map-style ``Dataset`` (a ``TensorDataset``, a ``Subset`` of one, one
    of your own) gives them item by item, each item's first two entries being ``x`` and ``y``."""
    if isinstance(loader, torch.utils.data.Dataset):
        raise TypeError(
            f"train_loader is a {type(loader).__name__}, a data set, not a loader of mini-batches "
            "(iterated, it yields single rows): wrap it, DataLoader(dataset, batch_size=..., "
            "shuffle=True), or use cfbook.data.DeviceLoader(x, y, batch_size)"
        )
    if hasattr(loader, "tensors"):
        return loader.tensors
    dataset = getattr(loader, "dataset", None)
    if isinstance(dataset, torch.utils.data.TensorDataset) and len(dataset.tensors) >= 2:
        return dataset.tensors[0], dataset.tensors[1]
    if isinstance(dataset, torch.utils.data.IterableDataset) or not hasattr(dataset, "__len__"):
        raise ValueError(
            "train_loader must be a cfbook.data.DeviceLoader or a torch DataLoader over a "
            "map-style Dataset (with __len__ and __getitem__): CT draws each epoch's factuals "
            "from the whole training set, which a stream cannot give"
        )
    return _gathered(dataset)


def _gathered(dataset: torch.utils.data.Dataset) -> tuple[Tensor, Tensor]:
    """Every item of a map-style ``dataset`` stacked into ``(x, y)``."""
    xs, ys = [], []
    for i in range(len(dataset)):
        item = dataset[i]
        if not isinstance(item, (tuple, list)) or len(item) < 2:
            raise ValueError(
                f"item {i} of the training set is a {type(item).__name__}, not an (x, y, ...) "
                "pair: its Dataset must return the input first and the label second"
            )
        xs.append(torch.as_tensor(item[0]))
        ys.append(torch.as_tensor(item[1]))
    if not xs:
        return torch.empty(0), torch.empty(0, dtype=torch.long)
    return torch.stack(xs), torch.stack(ys)


def _batch(batch: object, b: int) -> tuple[Tensor, Tensor]:
    """A mini-batch's inputs and labels: its first two entries (a third, such as a weight, is
    not used)."""
    if not isinstance(batch, (tuple, list)) or len(batch) < 2:
        raise ValueError(
            f"mini-batch {b} is a {type(batch).__name__}, not an (x, y, ...) pair: the loader's "
            "batches must hold the inputs first and the labels second"
        )
    return torch.as_tensor(batch[0]), torch.as_tensor(batch[1])


def _check_arguments(
    objective: Objective,
    nepochs: int,
    burnin: float,
    accuracy_every: int,
    verbose: int,
    accumulate: int,
) -> None:
    if not isinstance(objective, Objective):
        raise TypeError(f"objective must be a cfbook Objective, got {type(objective).__name__}")
    require_int("nepochs", nepochs)
    require_number(
        "burnin", burnin, "a fraction of the epochs in [0, 1]", lambda v: 0.0 <= v <= 1.0
    )
    require_int("accuracy_every", accuracy_every)
    if verbose not in (0, 1, 2):
        raise ValueError(f"verbose must be 0, 1 or 2, got {verbose!r}")
    require_int("accumulate", accumulate)


def _check_training_data(x: Tensor, y: Tensor) -> None:
    """The training tensors checked once, before any work: float samples (flat rows or of any
    shape), at least one, all finite, with one integer label each."""
    check_features(x, "the training data")
    check_not_empty(
        x,
        "the training data",
        "train on a loader over at least one row (check the split or filter that made it)",
    )
    check_labels(y, x.shape[0], "the training labels", "y", "the training data")
    check_finite(x, "the training data")


#: Below this share of the training rows searched per epoch, ``nce`` warns (CT.jl's
#: ``_min_nce_ratio``).
MIN_NCE_RATIO = 0.1


def _resolve_nce(nce: int | None, n: int, n_batches: int) -> int:
    """``nce`` checked; CT.jl's default is one counterfactual per mini-batch. Fewer than
    ``MIN_NCE_RATIO`` of the training rows an epoch warns, as CT.jl does."""
    resolved = n_batches if nce is None else _checked_nce(nce, n, n_batches)
    if resolved < MIN_NCE_RATIO * n:
        how = "the default, one per mini-batch" if nce is None else f"nce={nce}"
        warn(
            f"{resolved} counterfactuals an epoch ({how}) are {resolved / n:.1%} of the {n} "
            f"training rows, below the {MIN_NCE_RATIO:.0%} under which CT.jl warns: CT learns "
            f"from few counterfactuals each epoch. Pass nce={math.ceil(MIN_NCE_RATIO * n)} or "
            "more"
        )
    return resolved


def _checked_nce(nce: int, n: int, n_batches: int) -> int:
    require_int("nce", nce)
    if nce > n:
        raise ValueError(f"nce={nce} is larger than the training set ({n} samples)")
    if nce < n_batches:
        warn(
            f"nce={nce} is below the number of mini-batches; raised to {n_batches} so every "
            "batch gets at least one counterfactual"
        )
        nce = n_batches
    return nce


class _EpochSums:
    """Per-epoch sums kept on the device, read once when the epoch ends."""

    def __init__(self, device: torch.device):
        zero = torch.zeros((), device=device)
        self.loss = zero.clone()
        self.terms = {name: zero.clone() for name in (*TERM_WEIGHTS, "implaus_valid_sum")}
        self.batches = 0
        self.skipped = 0

    def add(self, loss: Tensor, terms: dict[str, Tensor]) -> None:
        self.loss += loss.detach()
        for name, value in terms.items():
            self.terms[name] += value.detach()
        self.batches += 1

    def totals(self, cf: CounterfactualBatch | None) -> dict[str, float]:
        """The sums over all processes (one all-reduce, one host read): batches, loss, the CT
        terms and, with counterfactuals, how many there were, how many valid, their iterations."""
        values = {"batches": float(self.batches), "loss": self.loss, **self.terms}
        if cf is not None:
            values.update(
                n_cf=float(cf.valid.shape[0]),
                n_valid=cf.valid.sum(),
                iterations=cf.iterations.sum(),
            )
        device = self.loss.device
        stacked = torch.stack(
            [torch.as_tensor(v, device=device).to(torch.float64) for v in values.values()]
        )
        return dict(zip(values, distributed.sum_over_ranks(stacked).tolist(), strict=True))


@dataclass
class _Options:
    """How the epochs run, beside what decides their results."""

    fuse: bool
    amp: str | None
    scaler: torch.amp.GradScaler | None
    accumulate: int
    profiler: EpochProfiler


@dataclass
class _Training:
    """What every epoch of one run works with."""

    model: nn.Module
    train_model: nn.Module  # the model as the mini-batches see it (DDP-wrapped under DDP)
    objective: Objective
    loader: Iterable
    optimizer: torch.optim.Optimizer
    device: torch.device
    x_all: Tensor
    y_all: Tensor
    rng: torch.Generator
    opts: _Options


def _train_epoch(
    model: nn.Module,
    objective: Objective,
    loader: Iterable,
    optimizer: torch.optim.Optimizer,
    device: torch.device,
    epoch: int,
    cf: CounterfactualBatch | None,
    chunks: list[slice] | None,
    opts: _Options,
) -> _EpochSums:
    """One pass over the mini-batches, each with its chunk of counterfactual terms.

    Every batch counts in the sums, as in CT.jl. The optimiser steps once per ``accumulate``
    batches, on their mean gradient; under DDP only the backward pass before a step all-reduces
    gradients. A batch whose loss is not finite on some process (the one host sync per batch) is
    counted as skipped, and the update it belongs to is skipped on every process.
    """
    sums = _EpochSums(device)
    n_batches, accumulate, scaler = len(loader), opts.accumulate, opts.scaler
    optimizer.zero_grad(set_to_none=True)
    update_ok = True
    for b, batch in enumerate(loader):
        xb, yb = _batch(batch, b)
        first = b - b % accumulate
        group = min(accumulate, n_batches - first)  # batches in this update
        last = b + 1 == first + group  # the batch whose backward pass precedes the update
        # Under DDP the forward pass already decides whether the backward pass all-reduces.
        with distributed.no_sync(model, last):
            xb, yb = xb.to(device, non_blocking=True), yb.to(device, non_blocking=True)
            with opts.profiler.region("forward"), autocast(opts.amp, device):
                rows = None if cf is None else chunks[b]
                loss, terms = batch_loss(model, objective, xb, yb, cf, rows, opts.fuse)
            sums.add(loss, terms)
            if not distributed.all_finite(loss):
                warn(f"non-finite loss in epoch {epoch}, batch {b}: update skipped")
                sums.skipped += 1
                update_ok = False
            if update_ok:
                part = loss / group if group > 1 else loss
                with opts.profiler.region("backward"):
                    (part if scaler is None else scaler.scale(part)).backward()
        if last:
            if update_ok:
                with opts.profiler.region("optimizer"):
                    if scaler is None:
                        optimizer.step()
                    else:
                        scaler.step(optimizer)
                        scaler.update()
            optimizer.zero_grad(set_to_none=True)
            update_ok = True
    return sums


def _resume(
    checkpoint_dir: str | Path,
    run: TrainingRun,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scaler: torch.amp.GradScaler | None,
    rng: torch.Generator,
    loader: object,
    nepochs: int,
) -> tuple[int, list[EpochRecord]]:
    """Restore the last completed epoch's state, if the checkpoint belongs to this very run and
    has not finished more than ``nepochs`` epochs; returns the epoch to start from and the
    finished epochs' records."""
    state = load_checkpoint(checkpoint_dir)
    if state is None:
        return 1, []
    run.check_resumable(state.get("run"), Path(checkpoint_dir))
    if state["epoch"] > nepochs:
        raise ValueError(
            f"the run in {checkpoint_dir} has finished {state['epoch']} epochs, more than "
            f"nepochs={nepochs}: ask for nepochs={state['epoch']} (or more) to get its model, or "
            "use another checkpoint_dir to train a shorter run afresh"
        )
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    if scaler is not None:
        scaler.load_state_dict(state["scaler"])
    restore_rng_states(state["rng"], rng, loader)
    records = [EpochRecord(**r) for r in state["log"]]
    return state["epoch"] + 1, records


def counterfactual_training(
    objective: Objective,
    model: nn.Module,
    generator: Generator,
    train_loader: Iterable,
    optimizer: torch.optim.Optimizer,
    *,
    device: torch.device | str,
    nepochs: int,
    domain: Domain = None,
    mutability: Mutability = None,
    burnin: float = 0.0,
    nce: int | None = None,
    accuracy_every: int = 1,
    val_loader: Iterable | None = None,
    verbose: int = 1,
    checkpoint_dir: str | Path | None = None,
    fuse_cf_forwards: bool = False,
    callback: Callable[[EpochRecord], None] | None = None,
    amp: str | None = None,
    accumulate: int = 1,
    profile_epoch: int | None = None,
    mature: str = "neighbour",
) -> tuple[nn.Module, TrainingLog]:
    """Train ``model`` with ``objective``; returns the model and its per-epoch log.

    ``nce`` counterfactuals (default: one per mini-batch, as in CT.jl) are searched per epoch
    after ``round(burnin * nepochs)`` burn-in epochs by ``generator`` (any
    ``cfbook.search.Generator``; ``NativeGenerator(cf_batchsize=...)`` bounds the rows searched
    at once) within ``domain`` and ``mutability`` (``None``: unconstrained, every feature free).
    With ``checkpoint_dir`` every epoch is saved and a repeated call resumes after the last
    completed one if it is the same run: the same objective, search, ``nce``, burn-in, ``amp``,
    ``mature``, ``accumulate``, processes, domain, mutability, training data (a fingerprint),
    batching (batch size, shuffling, ``drop_last``), optimizer (its class and hyper-parameters)
    and model (its class and parameter shapes); otherwise it is refused, naming what differs. A
    finished run called again returns its saved model and log, or trains on when ``nepochs``
    grew; a ``nepochs`` below the finished epochs is refused. ``amp`` ("bf16", or "fp16" on
    CUDA) runs the training forward passes under autocast. One host synchronisation per
    mini-batch remains: the finiteness check of the loss, which skips the update of a non-finite
    loss with a warning. ``accumulate=k`` updates once every k mini-batches, on their mean gradient.
    ``profile_epoch`` runs ``torch.profiler`` over that epoch; the breakdown of its time lands in
    ``log.meta["epoch_profile"]``. The training data are checked once, before any work
    (``cfbook.inputs``): float samples of the model's dtype, flat rows of its number of
    features or samples of any shape it takes (images ``(N, C, H, W)`` as they are; ``domain``
    and ``mutability`` then per number of a sample, see ``cfbook.search.constraints``), at
    least one, none of them NaN or infinite, with integer labels among the model's outputs.

    ``mature`` chooses what a counterfactual whose search did not converge contributes:
    ``"neighbour"`` (the CT paper's rule, the default) replaces it by its neighbour, so its
    energy differential is exactly zero; ``"raw"`` (CT.jl's Native branch, which its GPU tutorial
    runs) keeps the search's last iterate, valid or not. The log's meta records it as
    ``"mature"``. Under ``"neighbour"``, an epoch in which fewer than half of the counterfactuals
    are valid warns once (``LowValidityWarning``): the energy term is then mostly zero.

    Under DDP (``cfbook.training.distributed.init_distributed`` has run, each process passing
    its own sharded ``DeviceLoader``), gradients are averaged across processes, each process
    searches its share of the ``nce`` counterfactuals, the log holds figures over all processes
    (the epoch time is the slowest process's), and only rank 0 writes checkpoints. ``callback``
    runs on every process.
    """
    _check_arguments(objective, nepochs, burnin, accuracy_every, verbose, accumulate)
    check_mature(mature)
    device = torch.device(device)
    check_amp(amp, device)
    model.to(device)
    x_all, y_all = (t.to(device) for t in training_tensors(train_loader))
    _check_training_data(x_all, y_all)
    distributed.check_sharded(train_loader)
    n_classes = count_classes(model, x_all, "the training data")
    check_label_range(y_all, n_classes)
    burnin_epochs = round(burnin * nepochs)
    run = _identity(
        objective,
        generator,
        x_all,
        y_all,
        train_loader,
        optimizer,
        model,
        nce=nce,
        n_batches=len(train_loader),
        burnin_epochs=burnin_epochs,
        amp=amp,
        mature=mature,
        accumulate=accumulate,
        fuse=fuse_cf_forwards,
        domain=domain,
        mutability=mutability,
    )
    opts = _Options(
        fuse=fuse_cf_forwards,
        amp=amp,
        scaler=torch.amp.GradScaler(device.type) if amp == "fp16" else None,
        accumulate=accumulate,
        profiler=EpochProfiler(profile_epoch, nepochs, device),
    )
    t = _set_up(model, objective, train_loader, optimizer, device, x_all, y_all, opts)
    start, records = 1, []
    if checkpoint_dir is not None:
        start, records = _resume(
            checkpoint_dir, run, model, optimizer, opts.scaler, t.rng, train_loader, nepochs
        )
    # DDP broadcasts rank 0's weights when it wraps the model: after the resume, as before it.
    t.train_model = distributed.wrap_model(model, device)
    search = None
    if run.nce is not None:
        search = epoch_search(
            run, generator, x_all, y_all, n_batches=len(train_loader), n_classes=n_classes
        )
    log = _new_log(run, nepochs, x_all.shape[0], device)
    log.extend(records)
    verbose = verbose if distributed.is_main() else 0
    progress = EpochProgress(objective.name, nepochs, start, enabled=verbose > 0)
    warned_validity = False
    for epoch in range(start, nepochs + 1):
        cf, sums, seconds = _epoch(t, epoch, search if epoch > burnin_epochs else None)
        if epoch == profile_epoch:
            log.meta["epoch_profile"] = opts.profiler.report
        record = _record(
            epoch, _accuracies(t, epoch, accuracy_every, val_loader), seconds, sums, cf
        )
        log.append(record)
        if cf is not None and mature == "neighbour" and not warned_validity:
            warned_validity = _warn_low_validity(record)
        if checkpoint_dir is not None and distributed.is_main():
            _save(t, checkpoint_dir, epoch, run, log)
        _report(progress, record, verbose)
        if callback is not None:
            callback(record)
    return model, log


def _set_up(
    model: nn.Module,
    objective: Objective,
    loader: Iterable,
    optimizer: torch.optim.Optimizer,
    device: torch.device,
    x_all: Tensor,
    y_all: Tensor,
    opts: _Options,
) -> _Training:
    """What the epochs work with, the search's generator seeded from torch's global one: the
    same seed on every process (they draw the same factuals and keep disjoint shares of them)."""
    rng = torch.Generator(device=device)
    rng.manual_seed(distributed.broadcast_int(int(torch.randint(0, 2**62, (1,))), device))
    return _Training(
        model=model,
        train_model=model,
        objective=objective,
        loader=loader,
        optimizer=optimizer,
        device=device,
        x_all=x_all,
        y_all=y_all,
        rng=rng,
        opts=opts,
    )


def _identity(
    objective: Objective,
    generator: Generator,
    x_all: Tensor,
    y_all: Tensor,
    loader: Iterable,
    optimizer: torch.optim.Optimizer,
    model: nn.Module,
    *,
    nce: int | None,
    n_batches: int,
    burnin_epochs: int,
    amp: str | None,
    mature: str,
    accumulate: int,
    fuse: bool,
    domain: Domain,
    mutability: Mutability,
) -> TrainingRun:
    """The run's identity; the search's part only when the objective searches."""
    searches = objective.needs_counterfactuals
    if searches:
        check_generator(generator)
    world = distributed.world_size()
    return TrainingRun(
        objective=objective.name,
        lambdas=tuple(objective.lambdas),
        nce=_resolve_nce(nce, x_all.shape[0], n_batches * world) if searches else None,
        burnin_epochs=burnin_epochs,
        generator=generator.settings() if searches else None,
        amp=amp,
        mature=mature if searches else None,
        accumulate=accumulate,
        fuse_cf_forwards=fuse,
        world_size=world,
        domain=domain_identity(domain, x_all.shape[1:]) if searches else None,
        mutability=mutability_identity(mutability, x_all.shape[1:]) if searches else None,
        data=data_fingerprint(x_all, y_all),
        loader=loader_identity(loader),
        optimizer=optimizer_identity(optimizer),
        model=model_identity(model),
    )


def _new_log(run: TrainingRun, nepochs: int, n_train: int, device: torch.device) -> TrainingLog:
    """The log, its meta recording the run's settings."""
    meta = {**run.meta(), "nepochs": nepochs, "n_train": n_train, "device": str(device)}
    log = TrainingLog(meta=meta)
    if run.world_size > 1:
        log.meta["world_size"] = run.world_size
    if run.accumulate > 1:
        log.meta["accumulate"] = run.accumulate
    return log


def _epoch(
    t: _Training, epoch: int, search: EpochSearch | None
) -> tuple[CounterfactualBatch | None, _EpochSums, float]:
    """One epoch: its counterfactuals (with ``search``), searched with the model as it stands at
    the epoch's start, then a pass over the mini-batches; returns them, the sums and the
    epoch's seconds (the slowest process's)."""
    with t.opts.profiler.over(epoch):
        t0 = time.perf_counter()
        cf = None
        if search is not None:
            with t.opts.profiler.region("search"):
                cf = epoch_counterfactuals(t.model, t.x_all, t.y_all, search, t.rng)
        t.model.train()
        chunks = None if search is None else search.chunks
        sums = _train_epoch(
            t.train_model, t.objective, t.loader, t.optimizer, t.device, epoch, cf, chunks, t.opts
        )
        distributed.sync_buffers(t.model)
        synchronize(t.device)
        seconds = distributed.max_over_ranks(time.perf_counter() - t0, t.device)
    return cf, sums, seconds


def _accuracies(
    t: _Training, epoch: int, every: int, val_loader: Iterable | None
) -> tuple[float | None, float | None]:
    """Training and held-out accuracy every ``every`` epochs (None otherwise)."""
    if epoch % every:
        return None, None
    acc = distributed.global_accuracy(t.model, t.x_all, t.y_all)
    acc_val = None
    if val_loader is not None:
        x_val, y_val = (v.to(t.device) for v in training_tensors(val_loader))
        acc_val = distributed.global_accuracy(t.model, x_val, y_val)
    return acc, acc_val


def _save(
    t: _Training,
    checkpoint_dir: str | Path,
    epoch: int,
    run: TrainingRun,
    log: TrainingLog,
) -> None:
    """The epoch's checkpoint: the run's identity and every state a resumed run needs."""
    save_checkpoint(
        {
            "epoch": epoch,
            "run": run.record(),
            "model": t.model.state_dict(),
            "optimizer": t.optimizer.state_dict(),
            "scaler": None if t.opts.scaler is None else t.opts.scaler.state_dict(),
            "rng": rng_states(t.rng, t.loader),
            "log": [asdict(r) for r in log],
        },
        checkpoint_dir,
    )


#: Below this share of valid counterfactuals, an epoch under mature="neighbour" warns.
LOW_VALIDITY = 0.5


class LowValidityWarning(UserWarning):
    """Most of an epoch's counterfactuals were invalid, so CT's energy term was mostly zero."""


def _warn_low_validity(record: EpochRecord) -> bool:
    """Warn if ``record``'s counterfactuals were mostly invalid; True if it warned."""
    if record.percent_valid >= LOW_VALIDITY:
        return False
    warn(
        f"epoch {record.epoch}: only {record.percent_valid:.0%} of the counterfactuals were "
        f"valid. Under mature='neighbour' (the CT paper's rule) an invalid counterfactual is "
        f"replaced by its neighbour, so the energy differential was exactly zero for "
        f"{1 - record.percent_valid:.0%} of them and CT trained mostly on its ridge and "
        "adversarial terms. Let the search converge (a larger step_size or maxiter, a lower "
        "tau or lambda_cost), or train with mature='raw' (CT.jl's Native branch). Warned once "
        "per run.",
        LowValidityWarning,
    )
    return True


def _record(
    epoch: int,
    accuracies: tuple[float | None, float | None],
    time_taken: float,
    sums: _EpochSums,
    cf: CounterfactualBatch | None,
) -> EpochRecord:
    """The epoch's log entry: means over all batches of all processes; CT terms only when
    counterfactuals exist."""
    total = sums.totals(cf)
    batches = total["batches"]
    record = EpochRecord(
        epoch=epoch,
        acc=accuracies[0],
        acc_val=accuracies[1],
        train_loss=total["loss"] / batches if batches else float("nan"),
        implaus=None,
        reg_loss=None,
        adv_loss=None,
        time_taken=time_taken,
        percent_valid=None,
        avg_iter=None,
        skipped_batches=sums.skipped,
    )
    if cf is not None:
        n_valid = total["n_valid"]
        record.implaus = total["implaus"] / batches
        record.reg_loss = total["reg_loss"] / batches
        record.adv_loss = total["adv_loss"] / batches
        record.implaus_valid = total["implaus_valid_sum"] / n_valid if n_valid else None
        record.percent_valid = n_valid / total["n_cf"]
        record.avg_iter = total["iterations"] / total["n_cf"]
    return record


def _report(progress: EpochProgress, record: EpochRecord, verbose: int) -> None:
    figures = {"loss": f"{record.train_loss:.3f}"}
    if record.acc is not None:
        figures["acc"] = f"{record.acc:.3f}"
    if record.implaus is not None:
        figures["implaus"] = f"{record.implaus:.3f}"
    progress.update(record.epoch, figures)
    if verbose == 2:
        fields = ", ".join(
            f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
            for k, v in asdict(record).items()
        )
        print(fields, flush=True)
