"""Several processes, one training run: the set-up around ``counterfactual_training`` for DDP.

``torchrun`` (or ``srun``) starts one process per device and tells each its place through the
environment. :func:`init_distributed` reads it, picks the process's device, joins the process group
(NCCL on GPUs, gloo on CPUs) with a timeout, so that a lost peer ends the job instead of hanging
it, and quiets printing on all but rank 0. Everything else here is a small helper the training
loop calls; each is a no-op in a single process, so the loop reads the same for 1 or N processes.
"""

from __future__ import annotations

import builtins
import contextlib
import os
import signal
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.nn.parallel import DistributedDataParallel

from cfbook.device import cpu_cores, detect_device
from cfbook.errors import SetupError
from cfbook.evaluation.metrics import predict

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "THREADS_ENV",
    "Processes",
    "all_finite",
    "broadcast_int",
    "check_sharded",
    "cleanup",
    "configure_threads",
    "global_accuracy",
    "init_distributed",
    "is_main",
    "loader_shard",
    "max_over_ranks",
    "no_sync",
    "rank",
    "shard_rows",
    "sum_over_ranks",
    "sync_buffers",
    "world_size",
    "wrap_model",
]

# A collective that waits longer than this raises instead of hanging: a crashed or killed peer
# then ends the whole job. Long enough for the slowest rank's counterfactual search of an epoch.
DEFAULT_TIMEOUT_S = 600.0
THREADS_ENV = "CFBOOK_THREADS"


@dataclass(frozen=True)
class Processes:
    """This process's place in the job (rank 0 of 1 when not distributed)."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    device: torch.device
    backend: str | None  # None: a single process, no process group

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def _env_int(*names: str) -> int | None:
    for name in names:
        value = os.environ.get(name, "").strip()
        if value:
            try:
                return int(value)
            except ValueError:
                raise ValueError(f"${name}={value!r} is not an integer") from None
    return None


def _launch_environment() -> tuple[int, int, int, int]:
    """(rank, world size, local rank, local world size) from torchrun's variables, else from
    SLURM's (one srun task per device), else a single process."""
    if _env_int("WORLD_SIZE") is not None:
        world = _env_int("WORLD_SIZE")
        return (
            _env_int("RANK") or 0,
            world,
            _env_int("LOCAL_RANK") or 0,
            _env_int("LOCAL_WORLD_SIZE") or world,
        )
    ntasks = _env_int("SLURM_NTASKS") or 1
    if ntasks > 1 and _env_int("SLURM_PROCID") is not None:
        if not os.environ.get("MASTER_ADDR") or not os.environ.get("MASTER_PORT"):
            raise SetupError(
                "srun started this process as one of several tasks, but $MASTER_ADDR and "
                "$MASTER_PORT are not set; launch with torchrun (scripts/slurm-train.sh does) "
                "or export them in the batch script"
            )
        local_world = _env_int("SLURM_NTASKS_PER_NODE") or ntasks
        return _env_int("SLURM_PROCID"), ntasks, _env_int("SLURM_LOCALID") or 0, local_world
    return 0, 1, 0, 1


def _process_device(prefer: str | None, local_rank: int) -> torch.device:
    """The detected (or requested) device type; on CUDA, GPU number ``local_rank``."""
    device = detect_device(prefer, verbose=False)
    if device.type != "cuda":
        return device
    count = torch.cuda.device_count()
    if local_rank >= count:
        raise SetupError(
            f"local rank {local_rank} needs GPU {local_rank}, but this node shows {count}; "
            f"start at most {count} processes per node (torchrun --nproc_per_node={count})"
        )
    device = torch.device("cuda", local_rank)
    torch.cuda.set_device(device)
    return device


def _exit_on_sigterm() -> None:
    """Turn the launcher's SIGTERM (torchrun stopping the survivors of a failed rank, scancel)
    into SystemExit, so cleanups run, such as deleting a checkpoint's unfinished temporary file."""

    def stop(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)


def _quiet_other_ranks(main: bool) -> None:
    """Only rank 0 prints (``print(..., force=True)`` still prints anywhere), as torchvision's
    references do: N copies of every line would bury the one that matters."""
    original = builtins.print

    def rank_print(*args, force: bool = False, **kwargs) -> None:
        if main or force:
            original(*args, **kwargs)

    builtins.print = rank_print


def init_distributed(
    device: str | None = None, *, timeout_s: float = DEFAULT_TIMEOUT_S
) -> Processes:
    """Join the job the launcher started, or describe the single process when there is none.

    ``device`` is a device type ("cuda", "cpu", ...; default: detected); under CUDA every process
    takes GPU ``LOCAL_RANK``. The backend is NCCL on CUDA, gloo otherwise.
    """
    rank_, world, local_rank, local_world = _launch_environment()
    where = _process_device(device, local_rank)
    if world == 1:
        return Processes(0, 1, 0, 1, where, None)
    if where.type == "mps":
        raise SetupError("torch.distributed has no backend for Apple MPS; use --device cpu")
    backend = "nccl" if where.type == "cuda" else "gloo"
    if not dist.is_initialized():
        dist.init_process_group(
            backend, rank=rank_, world_size=world, timeout=timedelta(seconds=timeout_s)
        )
    _quiet_other_ranks(rank_ == 0)
    _exit_on_sigterm()
    return Processes(rank_, world, local_rank, local_world, where, backend)


def cleanup() -> None:
    """Leave the process group (after a success; a failing process just exits)."""
    if _active():
        dist.destroy_process_group()


def configure_threads(threads: int | None = None) -> int:
    """Set torch's intra-op threads and return their number.

    ``threads``, else $CFBOOK_THREADS, else this process's share of the cores it may run on
    (cores / $LOCAL_WORLD_SIZE). More OpenMP threads than free cores do not share the cores
    gracefully: each thread spins at every barrier waiting for the ones that are descheduled.
    """
    if threads is None:
        threads = _env_int(THREADS_ENV)
    if threads is None:
        threads = max(1, cpu_cores() // (_env_int("LOCAL_WORLD_SIZE") or 1))
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be a positive integer, got {threads!r}")
    torch.set_num_threads(threads)
    return threads


def _active() -> bool:
    return dist.is_available() and dist.is_initialized()


def world_size() -> int:
    return dist.get_world_size() if _active() else 1


def rank() -> int:
    return dist.get_rank() if _active() else 0


def is_main() -> bool:
    """True in the one process that writes logs and checkpoints."""
    return rank() == 0


def barrier() -> None:
    """Wait until every process gets here (nothing in a single process)."""
    if world_size() > 1:
        dist.barrier()


def shard_rows(n: int) -> slice:
    """This rank's contiguous share of ``n`` rows; shares differ in size by at most one."""
    base, extra = divmod(n, world_size())
    r = rank()
    start = r * base + min(r, extra)
    return slice(start, start + base + (r < extra))


def loader_shard(batch_size: int) -> dict[str, int]:
    """``DeviceLoader`` arguments that split a global batch of ``batch_size`` samples evenly
    over the processes: each takes ``batch_size / world_size`` of every batch."""
    world = world_size()
    if batch_size % world:
        raise ValueError(
            f"a batch of {batch_size} samples does not split evenly over {world} processes; "
            "use a process count that divides it"
        )
    return {"batch_size": batch_size // world, "rank": rank(), "world_size": world}


def check_sharded(loader: object) -> None:
    """Under DDP each process must train on its own shard of every batch, or the job would train
    on every sample ``world_size`` times."""
    world = world_size()
    if world == 1:
        return
    got = (getattr(loader, "rank", None), getattr(loader, "world_size", None))
    if got != (rank(), world):
        raise ValueError(
            f"train_loader is not sharded for rank {rank()} of {world} processes (it says "
            f"rank={got[0]}, world_size={got[1]}): build it with cfbook.data.DeviceLoader(..., "
            "rank=rank(), world_size=world_size()) so each process takes its part of every batch"
        )


def wrap_model(model: nn.Module, device: torch.device) -> nn.Module:
    """The module the training passes run through: DDP averages its gradients across processes.
    The search, accuracy and checkpoints use ``model`` itself."""
    if world_size() == 1:
        return model
    device_ids = [device.index] if device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=device_ids)


def no_sync(model: nn.Module, sync: bool) -> contextlib.AbstractContextManager:
    """Skip DDP's gradient all-reduce on accumulation steps that do not update (``sync=False``)."""
    if sync or not isinstance(model, DistributedDataParallel):
        return contextlib.nullcontext()
    return model.no_sync()


def all_finite(loss: Tensor) -> bool:
    """Whether the loss is finite on every process: all of them must skip an update together,
    or one would wait forever for the others' gradients."""
    finite = torch.isfinite(loss.detach())
    if world_size() > 1:
        flag = finite.to(torch.int32)
        dist.all_reduce(flag, op=dist.ReduceOp.MIN)
        finite = flag.bool()
    return bool(finite)


def broadcast_int(value: int, device: torch.device) -> int:
    """Rank 0's ``value`` on every process (e.g. the seed of the shared search generator)."""
    if world_size() == 1:
        return value
    tensor = torch.tensor([value], dtype=torch.int64, device=device)
    dist.broadcast(tensor, src=0)
    return int(tensor)


def sum_over_ranks(tensor: Tensor) -> Tensor:
    """The element-wise sum over processes (the tensor itself in a single process)."""
    if world_size() > 1:
        tensor = tensor.clone()
        dist.all_reduce(tensor)
    return tensor


def max_over_ranks(value: float, device: torch.device) -> float:
    """The largest ``value`` of all processes, e.g. the slowest one's epoch time."""
    if world_size() == 1:
        return value
    tensor = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return float(tensor)


def sync_buffers(model: nn.Module) -> None:
    """Give every process rank 0's buffers (BatchNorm statistics, which each process updates from
    its own shard), so the search, accuracy and the checkpoint see one model."""
    if world_size() > 1:
        for buffer in model.buffers():
            dist.broadcast(buffer, src=0)


def global_accuracy(model: nn.Module, x: Tensor, y: Tensor) -> float:
    """Accuracy on all of ``x``, each process classifying its share of the rows."""
    if world_size() == 1:  # the data were checked when the run began
        return float((predict(model, x) == y.to(x.device)).float().mean())
    rows = shard_rows(x.shape[0])
    correct = (predict(model, x[rows]) == y[rows].to(x.device)).sum().to(torch.float64)
    return float(sum_over_ranks(correct)) / x.shape[0]
