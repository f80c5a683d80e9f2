"""Counterfactual training (Algorithm 1 of the CT paper): each epoch after burn-in, search
counterfactuals for a sample of the training data and add their loss terms to every mini-batch."""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import Tensor, nn

from cfbook.amp import autocast, check_amp
from cfbook.checkpoint import load_checkpoint, save_checkpoint
from cfbook.constraints import Constraints, Domain, Mutability, infer_domain, make_constraints
from cfbook.generators import NativeGenerator, ReferenceGenerator, count_classes
from cfbook.log import EpochRecord, TrainingLog
from cfbook.metrics import accuracy, predict
from cfbook.objectives import Objective
from cfbook.progress import EpochProgress

Generator = NativeGenerator | ReferenceGenerator


@dataclass
class CounterfactualBatch:
    """One epoch's search output, aligned row by row (constants for the loss: no gradient)."""

    counterfactual: Tensor  # mature CF: the search result if valid, else its neighbour
    neighbour: Tensor
    nascent: Tensor  # adversarial example
    target: Tensor
    label: Tensor  # true label of the factual
    valid: Tensor
    iterations: Tensor


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


class _NeighbourSampler:
    """Draws, on the device, one training sample whose true label is each requested class."""

    def __init__(self, y: Tensor, n_classes: int):
        self.order = torch.argsort(y, stable=True)
        self.counts = torch.bincount(y, minlength=n_classes)
        self.offsets = torch.cumsum(self.counts, 0) - self.counts
        self.n = y.shape[0]

    def __call__(self, classes: Tensor, rng: torch.Generator) -> Tensor:
        u = torch.rand(classes.shape[0], generator=rng, device=classes.device)
        counts = self.counts[classes]
        in_class = self.offsets[classes] + (u * counts).long().clamp(max=counts - 1)
        # A class absent from the data falls back to any sample, as in the Julia package.
        anywhere = (u * self.n).long().clamp(max=self.n - 1)
        return self.order[torch.where(counts > 0, in_class, anywhere)]


def _counterfactuals(
    model: nn.Module,
    generator: Generator,
    x_all: Tensor,
    y_all: Tensor,
    nce: int,
    n_classes: int,
    neighbours: _NeighbourSampler,
    constraints: Constraints,
    domain: Domain,
    mutability: Mutability,
    cf_batchsize: int | None,
    rng: torch.Generator,
) -> CounterfactualBatch:
    """Steps 2-8 of Algorithm 1, on the device, with the model as it stands at the epoch start."""
    device = x_all.device
    idx = torch.randperm(x_all.shape[0], generator=rng, device=device)[:nce]
    x, label = x_all[idx], y_all[idx]
    # Uniform over all classes but the predicted one.
    shift = torch.randint(1, n_classes, (nce,), generator=rng, device=device)
    target = (predict(model, x) + shift) % n_classes
    kwargs = {"cf_batchsize": cf_batchsize} if isinstance(generator, NativeGenerator) else {}
    found = generator.generate(model, x, target, domain=domain, mutability=mutability, **kwargs)
    neighbour = x_all[neighbours(target, rng)]
    mature = torch.where(found.valid[:, None], found.counterfactual, neighbour)
    return CounterfactualBatch(
        counterfactual=mature,
        neighbour=constraints.protect_neighbours(neighbour, mature),
        nascent=found.nascent,
        target=target,
        label=label,
        valid=found.valid,
        iterations=found.iterations,
    )


def _target_logit(logits: Tensor, target: Tensor) -> Tensor:
    return logits.gather(1, target[:, None]).squeeze(1)


def _counterfactual_terms(
    model: nn.Module, objective: Objective, cf: CounterfactualBatch, rows: slice, fuse: bool
) -> dict[str, Tensor]:
    """The energy differential, ridge and adversarial terms on one chunk (unweighted)."""
    want_energy = objective.lambda_div > 0 or objective.lambda_reg > 0
    want_adv = objective.lambda_adv > 0
    inputs = ([cf.counterfactual[rows], cf.neighbour[rows]] if want_energy else []) + (
        [cf.nascent[rows]] if want_adv else []
    )
    if fuse:
        outputs = list(model(torch.cat(inputs)).float().split(inputs[0].shape[0]))
    else:
        outputs = [model(x).float() for x in inputs]
    terms: dict[str, Tensor] = {}
    if want_energy:
        target = cf.target[rows]
        z_cf, z_nb = _target_logit(outputs[0], target), _target_logit(outputs[1], target)
        terms["implaus"] = (z_cf - z_nb).mean()
        terms["reg_loss"] = (z_nb.square() + z_cf.square()).mean()
    if want_adv:
        terms["adv_loss"] = nn.functional.cross_entropy(outputs[-1], cf.label[rows])
    return terms


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
    objective: Objective, nepochs: int, burnin: float, accuracy_every: int, verbose: int
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


def _resolve_nce(nce: int | None, n: int, n_batches: int) -> int:
    if nce is None:
        nce = n
    if not isinstance(nce, int) or nce < 1:
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


def _rng_states(rng: torch.Generator, loader: object) -> dict:
    states = {"search": rng.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state_all()
    if hasattr(loader, "state_dict"):
        states["loader"] = loader.state_dict()
    return states


def _restore_rng_states(states: dict, rng: torch.Generator, loader: object) -> None:
    rng.set_state(states["search"])
    torch.set_rng_state(states["torch"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])
    if "loader" in states and hasattr(loader, "load_state_dict"):
        loader.load_state_dict(states["loader"])


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def _mean(total: Tensor | None, count: int) -> float | None:
    return None if total is None or count == 0 else float(total) / count


def _resume(
    checkpoint_dir: str | Path,
    objective: Objective,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    rng: torch.Generator,
    loader: object,
    log: TrainingLog,
) -> int:
    """Restore the last completed epoch's state, if any; returns the epoch to start from."""
    state = load_checkpoint(checkpoint_dir)
    if state is None:
        return 1
    if state.get("objective") != objective.name:
        raise ValueError(
            f"checkpoint in {checkpoint_dir} belongs to {state.get('objective')}, not "
            f"{objective.name}; use another checkpoint_dir"
        )
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    _restore_rng_states(state["rng"], rng, loader)
    log.extend(EpochRecord(**r) for r in state["log"])
    return state["epoch"] + 1


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
) -> tuple[Tensor, dict[str, Tensor], int]:
    """One pass over the mini-batches, each with its chunk of counterfactual terms.

    Returns the summed loss and unweighted terms of the applied steps (as device tensors, read
    once per epoch) and the number of steps applied.
    """
    total = torch.zeros((), device=device)
    sums: dict[str, Tensor] = {}
    steps = 0
    for b, (xb, yb) in enumerate(loader):
        xb, yb = xb.to(device, non_blocking=True), yb.to(device, non_blocking=True)
        with autocast(amp, device):
            loss = objective.lambda_clf * nn.functional.cross_entropy(model(xb).float(), yb)
            terms = {}
            if cf is not None:
                terms = _counterfactual_terms(model, objective, cf, chunks[b], fuse)
            for name, value in terms.items():
                loss = loss + getattr(objective, _WEIGHT[name]) * value
        optimizer.zero_grad(set_to_none=True)
        (loss if scaler is None else scaler.scale(loss)).backward()
        if not torch.isfinite(loss):  # the one sync per batch: skip a diverged step
            warnings.warn(
                f"non-finite loss in epoch {epoch}, batch {b}: update skipped", stacklevel=3
            )
            continue
        if scaler is None:
            optimizer.step()
        else:
            scaler.step(optimizer)
            scaler.update()
        total += loss.detach()
        for name, value in terms.items():
            sums[name] = sums.get(name, 0.0) + value.detach()
        steps += 1
    return total, sums, steps


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
) -> tuple[nn.Module, TrainingLog]:
    """Train ``model`` with ``objective``; returns the model and its per-epoch log.

    ``nce`` counterfactuals (default: the whole training set) are searched per epoch after
    ``round(burnin * nepochs)`` burn-in epochs. With ``checkpoint_dir`` every epoch is saved and
    a repeated call resumes after the last completed one. ``amp`` ("bf16", or "fp16" on CUDA)
    runs the training forward passes under autocast. One host synchronisation per mini-batch
    remains: the finiteness check of the loss before the optimiser step, which skips the update
    of a non-finite loss with a warning.
    """
    _check_arguments(objective, nepochs, burnin, accuracy_every, verbose)
    device = torch.device(device)
    check_amp(amp, device)
    model.to(device)
    x_all, y_all = (t.to(device) for t in training_tensors(train_loader))
    if x_all.ndim != 2:
        raise ValueError(f"training inputs must be flat (N, D) tensors, got {tuple(x_all.shape)}")
    n_batches = len(train_loader)
    n_classes = count_classes(model, x_all)
    low, high = int(y_all.min()), int(y_all.max())
    if low < 0 or high >= n_classes:
        raise ValueError(f"labels must lie in [0, {n_classes - 1}] (the model's outputs), "
                         f"got {low}..{high}")
    burnin_epochs = round(burnin * nepochs)
    search = objective.needs_counterfactuals
    if search:
        if domain is None:
            domain = infer_domain(x_all)
        constraints = make_constraints(domain, mutability, x_all.shape[1], device=device)
        nce = _resolve_nce(nce, x_all.shape[0], n_batches)
        chunks = _chunk_bounds(nce, n_batches)
        neighbours = _NeighbourSampler(y_all, n_classes)
    scaler = torch.amp.GradScaler(device.type) if amp == "fp16" else None

    rng = torch.Generator(device=device)
    rng.manual_seed(int(torch.randint(0, 2**62, (1,))))
    log = TrainingLog(
        meta={
            "objective": objective.name,
            "lambdas": [objective.lambda_clf, objective.lambda_div, objective.lambda_reg,
                        objective.lambda_adv],
            "nepochs": nepochs,
            "burnin_epochs": burnin_epochs,
            "nce": nce if search else None,
            "n_train": x_all.shape[0],
            "device": str(device),
        }
    )
    start = 1
    if checkpoint_dir is not None:
        start = _resume(checkpoint_dir, objective, model, optimizer, rng, train_loader, log)

    progress = EpochProgress(objective.name, nepochs, start, enabled=verbose > 0)
    for epoch in range(start, nepochs + 1):
        t0 = time.perf_counter()
        cf = None
        if search and epoch > burnin_epochs:
            cf = _counterfactuals(
                model, generator, x_all, y_all, nce, n_classes, neighbours, constraints,
                domain, mutability, cf_batchsize, rng,
            )
        model.train()
        total, sums, steps = _train_epoch(
            model, objective, train_loader, optimizer, device, epoch,
            cf=cf if objective.uses_counterfactual_terms else None,
            chunks=chunks if search else None, fuse=fuse_cf_forwards, amp=amp, scaler=scaler,
        )
        _synchronize(device)
        time_taken = time.perf_counter() - t0

        acc = acc_val = None
        if epoch % accuracy_every == 0:
            acc = accuracy(model, x_all, y_all)
            if val_loader is not None:
                acc_val = accuracy(model, *(t.to(device) for t in training_tensors(val_loader)))
        record = EpochRecord(
            epoch=epoch,
            acc=acc,
            acc_val=acc_val,
            train_loss=_mean(total, steps) if steps else float("nan"),
            implaus=_mean(sums.get("implaus"), steps),
            reg_loss=_mean(sums.get("reg_loss"), steps),
            adv_loss=_mean(sums.get("adv_loss"), steps),
            time_taken=time_taken,
            percent_valid=1.0 if cf is None else float(cf.valid.float().mean()),
            avg_iter=0.0 if cf is None else float(cf.iterations.float().mean()),
        )
        log.append(record)
        if checkpoint_dir is not None:
            save_checkpoint(
                {
                    "epoch": epoch,
                    "objective": objective.name,
                    "model": model.state_dict(),
                    "optimizer": optimizer.state_dict(),
                    "rng": _rng_states(rng, train_loader),
                    "log": [asdict(r) for r in log],
                },
                checkpoint_dir,
            )
        _report(progress, record, verbose)
        if callback is not None:
            callback(record)
    return model, log


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
