"""Counterfactual training (Algorithm 1 of the CT paper): each epoch after burn-in, search
counterfactuals for a sample of the training data and add their loss terms to every mini-batch."""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Iterable
from dataclasses import asdict
from pathlib import Path

import torch
from torch import Tensor, nn

from cfbook import distributed
from cfbook.amp import autocast, check_amp
from cfbook.checkpoint import (
    check_same_run,
    load_checkpoint,
    restore_rng_states,
    rng_states,
    save_checkpoint,
)
from cfbook.counterfactuals import (
    CounterfactualBatch,
    Generator,
    NeighbourSampler,
    check_mature,
    epoch_counterfactuals,
)
from cfbook.device import synchronize
from cfbook.log import EpochRecord, TrainingLog
from cfbook.objectives import Objective
from cfbook.profiling import EpochProfiler
from cfbook.progress import EpochProgress
from cfbook.search.constraints import Domain, Mutability, infer_domain, make_constraints
from cfbook.search.generators import NativeGenerator, count_classes
from cfbook.search.targets import label_levels


def training_tensors(loader: Iterable) -> tuple[Tensor, Tensor]:
    """The whole training set as tensors; factuals and neighbours are drawn from all of it."""
    if hasattr(loader, "tensors"):
        return loader.tensors
    dataset = getattr(loader, "dataset", None)
    if isinstance(dataset, torch.utils.data.TensorDataset) and len(dataset.tensors) >= 2:
        return dataset.tensors[0], dataset.tensors[1]
    raise ValueError(
        "train_loader must expose its data as tensors: use cfbook.data.DeviceLoader or a "
        "torch DataLoader over a TensorDataset"
    )


def _target_logit(logits: Tensor, target: Tensor) -> Tensor:
    return logits.gather(1, target[:, None]).squeeze(1)


def _counterfactual_terms(
    model: nn.Module, objective: Objective, cf: CounterfactualBatch, rows: slice, fuse: bool
) -> dict[str, Tensor]:
    """The three CT terms on one chunk (unweighted), plus the valid rows' energy differential
    summed (``implaus_valid_sum``). Terms whose weight is 0 are computed without gradient: they
    are logged, not trained on."""
    grad_energy = objective.lambda_div > 0 or objective.lambda_reg > 0
    grad_adv = objective.lambda_adv > 0
    inputs = [cf.counterfactual[rows], cf.neighbour[rows], cf.nascent[rows]]
    if fuse:
        with torch.set_grad_enabled(grad_energy or grad_adv):
            outputs = list(model(torch.cat(inputs)).float().split(inputs[0].shape[0]))
    else:
        with torch.set_grad_enabled(grad_energy):
            outputs = [model(x).float() for x in inputs[:2]]
        with torch.set_grad_enabled(grad_adv):
            outputs.append(model(inputs[2]).float())
    target = cf.target[rows]
    z_cf, z_nb = _target_logit(outputs[0], target), _target_logit(outputs[1], target)
    differential = z_cf - z_nb
    terms = {
        "implaus": differential.mean(),
        "reg_loss": (z_nb.square() + z_cf.square()).mean(),
        "adv_loss": nn.functional.cross_entropy(outputs[2], cf.label[rows]),
    }
    if not grad_energy:
        terms["implaus"], terms["reg_loss"] = terms["implaus"].detach(), terms["reg_loss"].detach()
    if not grad_adv:
        terms["adv_loss"] = terms["adv_loss"].detach()
    terms["implaus_valid_sum"] = (differential.detach() * cf.valid[rows]).sum()
    return terms


# Loss terms and the objective's weight for each.
_WEIGHT = {"implaus": "lambda_div", "reg_loss": "lambda_reg", "adv_loss": "lambda_adv"}


def _chunk_bounds(nce: int, n_batches: int) -> list[slice]:
    """Contiguous chunks of the nce counterfactuals, one per mini-batch, sizes differing by <= 1."""
    base, extra = divmod(nce, n_batches)
    bounds, start = [], 0
    for b in range(n_batches):
        stop = start + base + (b < extra)
        bounds.append(slice(start, stop))
        start = stop
    return bounds


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
    if not isinstance(nepochs, int) or nepochs < 1:
        raise ValueError(f"nepochs must be a positive integer, got {nepochs!r}")
    if not 0.0 <= burnin <= 1.0:
        raise ValueError(f"burnin must be a fraction of the epochs in [0, 1], got {burnin!r}")
    if not isinstance(accuracy_every, int) or accuracy_every < 1:
        raise ValueError(f"accuracy_every must be a positive integer, got {accuracy_every!r}")
    if verbose not in (0, 1, 2):
        raise ValueError(f"verbose must be 0, 1 or 2, got {verbose!r}")
    if isinstance(accumulate, bool) or not isinstance(accumulate, int) or accumulate < 1:
        raise ValueError(f"accumulate must be a positive integer, got {accumulate!r}")


def _resolve_nce(nce: int | None, n: int, n_batches: int) -> int:
    """``nce`` checked; CT.jl's default is one counterfactual per mini-batch."""
    if nce is None:
        return n_batches
    if isinstance(nce, bool) or not isinstance(nce, int) or nce < 1:
        raise ValueError(f"nce must be a positive integer, got {nce!r}")
    if nce > n:
        raise ValueError(f"nce={nce} is larger than the training set ({n} samples)")
    if nce < n_batches:
        warnings.warn(
            f"nce={nce} is below the number of mini-batches; raised to {n_batches} so every "
            "batch gets at least one counterfactual",
            stacklevel=3,
        )
        nce = n_batches
    return nce


def _resume(
    checkpoint_dir: str | Path,
    run: dict,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scaler: torch.amp.GradScaler | None,
    rng: torch.Generator,
    loader: object,
    log: TrainingLog,
) -> tuple[int, dict | None]:
    """Restore the last completed epoch's state, if any; returns the epoch to start from and
    the interrupted run's compile decision (see ``_settle_compile``)."""
    state = load_checkpoint(checkpoint_dir)
    if state is None:
        return 1, None
    saved, world = state.get("world_size", 1), distributed.world_size()
    if saved != world:
        raise ValueError(
            f"checkpoint in {checkpoint_dir} was written by {saved} process(es), this run has "
            f"{world}: every process trains on its part of each global batch of world_size x "
            f"batch_size samples, so resume with {saved} process(es) (torchrun "
            f"--nproc_per_node={saved} ...), or use another checkpoint_dir or delete it to start "
            "afresh"
        )
    check_same_run(state.get("run"), run, Path(checkpoint_dir))
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    if scaler is not None:
        scaler.load_state_dict(state["scaler"])
    restore_rng_states(state["rng"], rng, loader)
    log.extend(EpochRecord(**r) for r in state["log"])
    return state["epoch"] + 1, state.get("search_compile")


def _settle_compile(
    generator: Generator,
    model: nn.Module,
    x_all: Tensor,
    nce: int,
    world: int,
    cf_batchsize: int | None,
    search_epochs: int,
) -> dict | None:
    """``compile="auto"`` decided once for the whole run, from its planned counterfactual-steps
    (search epochs x ``nce`` x ``maxiter``) and the model's cost, as the log's meta and the
    checkpoint record it. The same on every process (they plan the same run) and for a resumed
    run, whatever ran before in the process."""
    if not isinstance(generator, NativeGenerator):
        return None
    planned = search_epochs * nce * generator.maxiter
    share = x_all[: -(-nce // world)]  # the rows one process searches per epoch, at most
    compiled = generator.settle_compile(model, share, planned, cf_batchsize)
    return {"compile": generator.compile, "compiled": compiled, "planned_steps": planned}


class _EpochSums:
    """Per-epoch sums kept on the device, read once when the epoch ends."""

    def __init__(self, device: torch.device):
        zero = torch.zeros((), device=device)
        self.loss = zero.clone()
        self.terms = {name: zero.clone() for name in (*_WEIGHT, "implaus_valid_sum")}
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


def _train_epoch(
    model: nn.Module,
    objective: Objective,
    loader: Iterable,
    optimizer: torch.optim.Optimizer,
    device: torch.device,
    epoch: int,
    *,
    cf: CounterfactualBatch | None,
    chunks: list[slice] | None,
    fuse: bool,
    amp: str | None,
    scaler: torch.amp.GradScaler | None,
    accumulate: int,
    profiler: EpochProfiler,
) -> _EpochSums:
    """One pass over the mini-batches, each with its chunk of counterfactual terms.

    Every batch counts in the sums, as in CT.jl. The optimiser steps once per ``accumulate``
    batches, on their mean gradient; under DDP only the backward pass before a step all-reduces
    gradients. A batch whose loss is not finite on some process (the one host sync per batch) is
    counted as skipped, and the update it belongs to is skipped on every process.
    """
    sums = _EpochSums(device)
    n_batches = len(loader)
    optimizer.zero_grad(set_to_none=True)
    update_ok = True
    for b, (xb, yb) in enumerate(loader):
        first = b - b % accumulate
        group = min(accumulate, n_batches - first)  # batches in this update
        last = b + 1 == first + group  # the batch whose backward pass precedes the update
        # Under DDP the forward pass already decides whether the backward pass all-reduces.
        with distributed.no_sync(model, last):
            xb, yb = xb.to(device, non_blocking=True), yb.to(device, non_blocking=True)
            with profiler.region("forward"), autocast(amp, device):
                loss = objective.lambda_clf * nn.functional.cross_entropy(model(xb).float(), yb)
                terms = {}
                if cf is not None:
                    terms = _counterfactual_terms(model, objective, cf, chunks[b], fuse)
                    for name, weight in _WEIGHT.items():
                        if getattr(objective, weight):
                            loss = loss + getattr(objective, weight) * terms[name]
            sums.add(loss, terms)
            if not distributed.all_finite(loss):
                warnings.warn(
                    f"non-finite loss in epoch {epoch}, batch {b}: update skipped", stacklevel=3
                )
                sums.skipped += 1
                update_ok = False
            if update_ok:
                part = loss / group if group > 1 else loss
                with profiler.region("backward"):
                    (part if scaler is None else scaler.scale(part)).backward()
        if last:
            if update_ok:
                with profiler.region("optimizer"):
                    if scaler is None:
                        optimizer.step()
                    else:
                        scaler.step(optimizer)
                        scaler.update()
            optimizer.zero_grad(set_to_none=True)
            update_ok = True
    return sums


def counterfactual_training(
    objective: Objective,
    model: nn.Module,
    generator: Generator,
    train_loader: Iterable,
    optimizer: torch.optim.Optimizer,
    *,
    device: torch.device | str,
    nepochs: int,
    domain: Domain,
    mutability: Mutability = None,
    burnin: float = 0.0,
    nce: int | None = None,
    cf_batchsize: int | None = None,
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
    after ``round(burnin * nepochs)`` burn-in epochs. With ``checkpoint_dir`` every epoch is
    saved and a repeated call resumes after the last completed one, if it is the same run
    (objective, ``nce``, burn-in, search settings, ``amp``). ``amp`` ("bf16", or "fp16" on CUDA)
    runs the training forward passes under autocast. One host synchronisation per mini-batch
    remains: the finiteness check of the loss, which skips the update of a non-finite loss with
    a warning. ``accumulate=k`` updates once every k mini-batches, on their mean gradient.
    ``profile_epoch`` runs ``torch.profiler`` over that epoch; the breakdown of its time lands in
    ``log.meta["epoch_profile"]``.

    ``mature`` chooses what a counterfactual whose search did not converge contributes:
    ``"neighbour"`` (the CT paper's rule, the default) replaces it by its neighbour, so its
    energy differential is exactly zero; ``"raw"`` (CT.jl's Native branch, which its GPU tutorial
    runs) keeps the search's last iterate, valid or not. The log's meta records it as
    ``"mature"``. Under ``"neighbour"``, an epoch in which fewer than half of the counterfactuals
    are valid warns once (``LowValidityWarning``): the energy term is then mostly zero.

    Under DDP (:func:`cfbook.distributed.init_distributed` has run, each process passing its own
    sharded ``DeviceLoader``), gradients are averaged across processes, each process searches its
    share of the ``nce`` counterfactuals, the log holds figures over all processes (the epoch
    time is the slowest process's), and only rank 0 writes checkpoints. ``callback`` runs on
    every process.
    """
    _check_arguments(objective, nepochs, burnin, accuracy_every, verbose, accumulate)
    check_mature(mature)
    device = torch.device(device)
    check_amp(amp, device)
    model.to(device)
    x_all, y_all = (t.to(device) for t in training_tensors(train_loader))
    if x_all.ndim != 2:
        raise ValueError(f"training inputs must be flat (N, D) tensors, got {tuple(x_all.shape)}")
    distributed.check_sharded(train_loader)
    world = distributed.world_size()
    n_batches = len(train_loader)
    n_classes = count_classes(model, x_all)
    low, high = int(y_all.min()), int(y_all.max())
    if low < 0 or high >= n_classes:
        raise ValueError(
            f"labels must lie in [0, {n_classes - 1}] (the model's outputs), got {low}..{high}"
        )
    burnin_epochs = round(burnin * nepochs)
    search = objective.needs_counterfactuals
    chunks = rows = None
    if search:
        if domain is None:
            domain = infer_domain(x_all)
        constraints = make_constraints(domain, mutability, x_all.shape[1], device=device)
        # Every process's mini-batches need counterfactuals of their own.
        nce = _resolve_nce(nce, x_all.shape[0], n_batches * world)
        rows = distributed.shard_rows(nce) if world > 1 else None
        chunks = _chunk_bounds(nce if rows is None else rows.stop - rows.start, n_batches)
        levels = label_levels(y_all)
        neighbours = NeighbourSampler(y_all, n_classes)
    scaler = torch.amp.GradScaler(device.type) if amp == "fp16" else None
    profiler = EpochProfiler(profile_epoch, nepochs, device)
    plan = None
    if search:
        plan = _settle_compile(
            generator, model, x_all, nce, world, cf_batchsize, nepochs - burnin_epochs
        )

    rng = torch.Generator(device=device)
    # One seed for all processes: they draw the same factuals and keep disjoint shares of them.
    rng.manual_seed(distributed.broadcast_int(int(torch.randint(0, 2**62, (1,))), device))
    run = {
        "objective": objective.name,
        "lambdas": list(objective.lambdas),
        "nce": nce if search else None,
        "burnin_epochs": burnin_epochs,
        "generator": generator.settings() if search else None,
        "amp": amp,
        "mature": mature if search else None,
    }
    log = TrainingLog(
        meta={**run, "nepochs": nepochs, "n_train": x_all.shape[0], "device": str(device)}
    )
    if world > 1:
        log.meta["world_size"] = world
    if accumulate > 1:
        log.meta["accumulate"] = accumulate
    start = 1
    if checkpoint_dir is not None:
        start, saved = _resume(
            checkpoint_dir, run, model, optimizer, scaler, rng, train_loader, log
        )
        if saved is not None and plan is not None and plan["compile"] == saved["compile"] == "auto":
            # Continue on the path the interrupted run took, even if the rule has changed since.
            plan = saved
    if plan is not None:
        log.meta["search_compile"] = plan
    train_model = distributed.wrap_model(model, device)
    if not distributed.is_main():
        verbose = 0

    progress = EpochProgress(objective.name, nepochs, start, enabled=verbose > 0)
    warned_validity = False
    for epoch in range(start, nepochs + 1):
        with profiler.over(epoch):
            t0 = time.perf_counter()
            cf = None
            if search and epoch > burnin_epochs:
                with profiler.region("search"):
                    cf = epoch_counterfactuals(
                        model,
                        generator,
                        x_all,
                        y_all,
                        nce,
                        levels,
                        neighbours,
                        constraints,
                        domain,
                        mutability,
                        cf_batchsize,
                        rng,
                        rows,
                        compile=None if plan is None else plan["compiled"],
                        mature=mature,
                    )
            model.train()
            sums = _train_epoch(
                train_model,
                objective,
                train_loader,
                optimizer,
                device,
                epoch,
                cf=cf,
                chunks=chunks,
                fuse=fuse_cf_forwards,
                amp=amp,
                scaler=scaler,
                accumulate=accumulate,
                profiler=profiler,
            )
            distributed.sync_buffers(model)
            synchronize(device)
            time_taken = distributed.max_over_ranks(time.perf_counter() - t0, device)
        if epoch == profile_epoch:
            log.meta["epoch_profile"] = profiler.report

        acc = acc_val = None
        if epoch % accuracy_every == 0:
            acc = distributed.global_accuracy(model, x_all, y_all)
            if val_loader is not None:
                acc_val = distributed.global_accuracy(
                    model, *(t.to(device) for t in training_tensors(val_loader))
                )
        record = _record(epoch, acc, acc_val, time_taken, sums, cf)
        log.append(record)
        if cf is not None and mature == "neighbour" and not warned_validity:
            warned_validity = _warn_low_validity(record)
        if checkpoint_dir is not None and distributed.is_main():
            save_checkpoint(
                {
                    "epoch": epoch,
                    "run": run,
                    "world_size": world,
                    "model": model.state_dict(),
                    "optimizer": optimizer.state_dict(),
                    "scaler": None if scaler is None else scaler.state_dict(),
                    "rng": rng_states(rng, train_loader),
                    "log": [asdict(r) for r in log],
                    "search_compile": plan,
                },
                checkpoint_dir,
            )
        _report(progress, record, verbose)
        if callback is not None:
            callback(record)
    return model, log


#: Below this share of valid counterfactuals, an epoch under mature="neighbour" warns.
LOW_VALIDITY = 0.5


class LowValidityWarning(UserWarning):
    """Most of an epoch's counterfactuals were invalid, so CT's energy term was mostly zero."""


def _warn_low_validity(record: EpochRecord) -> bool:
    """Warn if ``record``'s counterfactuals were mostly invalid; True if it warned."""
    if record.percent_valid >= LOW_VALIDITY:
        return False
    warnings.warn(
        f"epoch {record.epoch}: only {record.percent_valid:.0%} of the counterfactuals were "
        f"valid. Under mature='neighbour' (the CT paper's rule) an invalid counterfactual is "
        f"replaced by its neighbour, so the energy differential was exactly zero for "
        f"{1 - record.percent_valid:.0%} of them and CT trained mostly on its ridge and "
        "adversarial terms. Let the search converge (a larger step_size or maxiter, a lower "
        "tau or lambda_cost), or train with mature='raw' (CT.jl's Native branch). Warned once "
        "per run.",
        LowValidityWarning,
        stacklevel=3,
    )
    return True


def _record(
    epoch: int,
    acc: float | None,
    acc_val: float | None,
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
        acc=acc,
        acc_val=acc_val,
        train_loss=total["loss"] / batches if batches else float("nan"),
        implaus=None,
        reg_loss=None,
        adv_loss=None,
        time_taken=time_taken,
        percent_valid=1.0,
        avg_iter=0.0,
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
