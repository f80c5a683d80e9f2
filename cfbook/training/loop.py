"""Counterfactual training (Algorithm 1 of the CT paper): each epoch after burn-in, search
counterfactuals for a sample of the training data and add their loss terms to every mini-batch.

``counterfactual_training`` is four steps, each its own function: set up the run (its identity,
the search, the log), resume it from a checkpoint, train one epoch, and record the epoch.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import Tensor, nn

from cfbook.amp import autocast, check_amp
from cfbook.device import synchronize
from cfbook.errors import warn
from cfbook.inputs import require_int, require_number
from cfbook.objectives import Objective
from cfbook.profiling import EpochProfiler
from cfbook.progress import EpochProgress
from cfbook.search.constraints import Categorical, Domain, Mutability
from cfbook.search.interface import Generator
from cfbook.training import distributed
from cfbook.training.checkpoint import (
    check_resumable_loader,
    load_checkpoint,
    restore_rng_states,
    rng_states,
    save_checkpoint,
)
from cfbook.training.counterfactuals import CounterfactualBatch
from cfbook.training.data import batch_tensors, training_tensors
from cfbook.training.log import EpochRecord, TrainingLog
from cfbook.training.loss import (
    LOW_VALIDITY,
    TERM_WEIGHTS,
    CounterfactualLoss,
    LowValidityWarning,
    SearchProbeWarning,
)
from cfbook.training.run import (
    TrainingRun,
    data_fingerprint,
    domain_identity,
    loader_identity,
    model_identity,
    mutability_identity,
    optimizer_identity,
)

__all__ = ["LOW_VALIDITY", "LowValidityWarning", "SearchProbeWarning", "counterfactual_training"]


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

    amp: str | None
    scaler: torch.amp.GradScaler | None
    accumulate: int
    profiler: EpochProfiler


@dataclass
class _Training:
    """What every epoch of one run works with."""

    model: nn.Module
    train_model: nn.Module  # the model as the mini-batches see it (DDP-wrapped under DDP)
    ct: CounterfactualLoss
    loader: Iterable
    optimizer: torch.optim.Optimizer
    device: torch.device
    opts: _Options


def _train_epoch(
    model: nn.Module,
    ct: CounterfactualLoss,
    loader: Iterable,
    optimizer: torch.optim.Optimizer,
    device: torch.device,
    epoch: int,
    opts: _Options,
) -> _EpochSums:
    """One pass over the mini-batches, each with its loss from ``ct`` (its chunk of the epoch's
    counterfactual terms).

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
        xb, yb = batch_tensors(batch, b)
        first = b - b % accumulate
        group = min(accumulate, n_batches - first)  # batches in this update
        last = b + 1 == first + group  # the batch whose backward pass precedes the update
        # Under DDP the forward pass already decides whether the backward pass all-reduces.
        with distributed.no_sync(model, last):
            xb, yb = xb.to(device, non_blocking=True), yb.to(device, non_blocking=True)
            with opts.profiler.region("forward"), autocast(opts.amp, device):
                loss, terms = ct.loss(model, xb, yb, b)
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


#: ``callback(record, model, counterfactuals)`` after every epoch.
EpochCallback = Callable[[EpochRecord, nn.Module, CounterfactualBatch | None], None]


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
    callback: EpochCallback | None = None,
    amp: str | None = None,
    accumulate: int = 1,
    profile_epoch: int | None = None,
    mature: str = "neighbour",
    categorical: Categorical = None,
) -> tuple[nn.Module, TrainingLog]:
    """Train ``model`` with ``objective``; returns the model and its per-epoch log.

    ``nce`` counterfactuals (default: one per mini-batch, as in CT.jl) are searched per epoch
    after ``round(burnin * nepochs)`` burn-in epochs (default none, as in CT.jl) by
    ``generator`` (any ``cfbook.search.Generator``; ``NativeGenerator(cf_batchsize=...)`` bounds
    the rows searched at once) within ``domain`` and ``mutability`` (``None``: unconstrained,
    every feature free).
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
    are valid warns once (``LowValidityWarning``): the energy term is then mostly zero. Before
    the first search epoch, a probe search of 64 training rows with cfbook's generator measures
    the validity to expect (printed with ``verbose``); under ``"neighbour"`` below half it warns
    (``SearchProbeWarning``), naming a larger step size that reached half on the same rows, if
    one does. ``cfbook.search.calibrate_search`` picks the step before training. The probe draws
    its rows with its own generator: the run's results do not depend on it.

    ``categorical`` lists one-hot groups (sequences of column indices) that the training-time
    search decodes at every step, as at test time (``NativeGenerator.generate``), so that the
    counterfactuals CT trains on are rows of real categories. None (the default) follows CT.jl,
    whose training-time search does not decode them: one-hot columns then move freely and a
    counterfactual may hold a mixture such as ``[0.26, 0.0, 0.9]``. The groups are part of the
    run's identity.

    Under DDP (``cfbook.training.distributed.init_distributed`` has run, each process passing
    its own sharded ``DeviceLoader``), gradients are averaged across processes, each process
    searches its share of the ``nce`` counterfactuals, the log holds figures over all processes
    (the epoch time is the slowest process's), and only rank 0 writes checkpoints.

    ``callback(record, model, counterfactuals)``, as CT.jl's, runs after every epoch (on every
    process) with the epoch's ``EpochRecord``, the model and the epoch's counterfactuals
    (``CounterfactualBatch``; None in burn-in epochs and without a search). The loop is
    ``CounterfactualLoss``'s: for a loop of one's own (a scheduler, early stopping, Lightning),
    use that object directly.
    """
    _check_arguments(objective, nepochs, burnin, accuracy_every, verbose, accumulate)
    _check_callback(callback)
    device = torch.device(device)
    check_amp(amp, device)
    model.to(device)
    ct = CounterfactualLoss(
        objective,
        generator,
        model,
        train_loader,
        nce=nce,
        burnin_epochs=round(burnin * nepochs),
        domain=domain,
        mutability=mutability,
        mature=mature,
        categorical=categorical,
        fuse_cf_forwards=fuse_cf_forwards,
    )
    distributed.check_sharded(train_loader)
    if checkpoint_dir is not None:
        check_resumable_loader(train_loader)
    run = _identity(
        ct,
        train_loader,
        optimizer,
        model,
        amp=amp,
        accumulate=accumulate,
        domain=domain,
        mutability=mutability,
    )
    opts = _Options(
        amp=amp,
        scaler=torch.amp.GradScaler(device.type) if amp == "fp16" else None,
        accumulate=accumulate,
        profiler=EpochProfiler(profile_epoch, nepochs, device),
    )
    t = _Training(model, model, ct, train_loader, optimizer, device, opts)
    start, records = 1, []
    if checkpoint_dir is not None:
        start, records = _resume(
            checkpoint_dir, run, model, optimizer, opts.scaler, ct.rng, train_loader, nepochs
        )
    # DDP broadcasts rank 0's weights when it wraps the model: after the resume, as before it.
    t.train_model = distributed.wrap_model(model, device)
    log = _new_log(run, nepochs, ct.x.shape[0], device)
    log.extend(records)
    verbose = verbose if distributed.is_main() else 0
    progress = EpochProgress(objective.name, nepochs, start, enabled=verbose > 0)
    warned_validity = False
    for epoch in range(start, nepochs + 1):
        cf, sums, seconds = _epoch(t, epoch)
        if verbose and ct.probed_at == epoch:
            print(
                f"epoch {epoch}: a probe search of {ct.probe_rows} training rows found "
                f"{ct.probe_validity:.0%} valid before the epoch's search",
                flush=True,
            )
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
            callback(record, model, cf)
    return model, log


def _check_callback(callback: Callable | None) -> None:
    """A callback takes the epoch's record, the model and the epoch's counterfactuals."""
    if callback is None:
        return
    if not callable(callback):
        raise TypeError(f"callback must be callable, got {type(callback).__name__}")
    try:
        signature = inspect.signature(callback)
    except ValueError:  # a builtin without a signature: called as documented
        return
    try:
        signature.bind(None, None, None)
    except TypeError as err:
        raise TypeError(
            "callback must take three arguments, (record, model, counterfactuals): the epoch's "
            "EpochRecord, the model and the epoch's CounterfactualBatch (None without a "
            "search); def callback(record, model, counterfactuals): ..."
        ) from err


def _identity(
    ct: CounterfactualLoss,
    loader: Iterable,
    optimizer: torch.optim.Optimizer,
    model: nn.Module,
    *,
    amp: str | None,
    accumulate: int,
    domain: Domain,
    mutability: Mutability,
) -> TrainingRun:
    """The run's identity; the search's part only when the objective searches."""
    searches = ct.search is not None
    shape = ct.x.shape[1:]
    return TrainingRun(
        objective=ct.objective.name,
        lambdas=tuple(ct.objective.lambdas),
        nce=ct.nce,
        burnin_epochs=ct.burnin_epochs,
        generator=ct.generator.settings() if searches else None,
        amp=amp,
        mature=ct.mature if searches else None,
        accumulate=accumulate,
        fuse_cf_forwards=ct.fuse,
        world_size=distributed.world_size(),
        domain=domain_identity(domain, shape) if searches else None,
        mutability=mutability_identity(mutability, shape) if searches else None,
        data=data_fingerprint(ct.x, ct.y),
        loader=loader_identity(loader),
        optimizer=optimizer_identity(optimizer),
        model=model_identity(model),
        categorical=ct.search.categorical if searches else None,
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


def _epoch(t: _Training, epoch: int) -> tuple[CounterfactualBatch | None, _EpochSums, float]:
    """One epoch: its counterfactuals (after burn-in, for objectives that search), searched with
    the model as it stands at the epoch's start, then a pass over the mini-batches; returns them,
    the sums and the epoch's seconds (the slowest process's)."""
    with t.opts.profiler.over(epoch):
        t0 = time.perf_counter()
        if t.ct.searches_in(epoch):
            with t.opts.profiler.region("search"):
                cf = t.ct.start_epoch(t.model, epoch)
        else:
            cf = t.ct.start_epoch(t.model, epoch)
        t.model.train()
        sums = _train_epoch(t.train_model, t.ct, t.loader, t.optimizer, t.device, epoch, t.opts)
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
    acc = distributed.global_accuracy(t.model, t.ct.x, t.ct.y)
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
            "rng": rng_states(t.ct.rng, t.loader),
            "log": [asdict(r) for r in log],
        },
        checkpoint_dir,
    )


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
