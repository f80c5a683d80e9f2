"""One process of the multi-process tests (started by torchrun), and the toy run they compare.

``python -m torch.distributed.run --nproc_per_node=2 tests/distributed_worker.py OUT SCENARIO``
trains on toy data and leaves in OUT what the tests check: rank 0 the weights and the log, every
rank the factuals it searched. ``--fail-epoch``/``--fail-rank`` make one rank raise or kill itself
after that epoch, as a crash would.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
from pathlib import Path

import torch

from cfbook import (
    FullObjective,
    NativeGenerator,
    VanillaObjective,
    counterfactual_training,
)
from cfbook.data import DeviceLoader
from cfbook.models import mlp
from cfbook.search.calibration import PROBE_SEARCH_ROWS
from cfbook.training import distributed
from cfbook.training.log import save_log

N, N_FEATURES, N_CLASSES = 120, 6, 3
SEARCHED: list[dict] = []  # what each search of this process was given and found


def toy_data(n: int = N, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % N_CLASSES
    centres = torch.randn(N_CLASSES, N_FEATURES, generator=g)
    return (centres[y] + 0.5 * torch.randn(n, N_FEATURES, generator=g)).clamp(-3, 3), y


class RecordingGenerator(NativeGenerator):
    """Notes which training rows each search got, and how many of them it made valid."""

    def generate(self, model, x, target, **kwargs):
        result = super().generate(model, x, target, **kwargs)
        if len(x) == PROBE_SEARCH_ROWS:  # the probe before the first search epoch, not one
            return result
        x_all = toy_data()[0].to(x.device)
        rows = (x[:, None, :] == x_all[None]).all(2).float().argmax(1)
        SEARCHED.append(
            {
                "rows": rows.tolist(),
                "valid": int(result.valid.sum()),
                "iterations": int(result.iterations.sum()),
            }
        )
        return result


def toy_run(
    objective: str,
    batch_size: int,
    *,
    accumulate: int = 1,
    nepochs: int = 3,
    rank: int = 0,
    world_size: int = 1,
    device: str | torch.device = "cpu",
    **kwargs,
):
    """The same training in one process or in each of ``world_size`` processes."""
    x, y = (t.to(device) for t in toy_data())
    torch.manual_seed(0)
    model = mlp(N_FEATURES, (16,), N_CLASSES)
    loader = DeviceLoader(x, y, batch_size, seed=3, rank=rank, world_size=world_size)
    return counterfactual_training(
        FullObjective() if objective == "full" else VanillaObjective(),
        model,
        RecordingGenerator(maxiter=8, tau=0.5, step_size=0.5),
        loader,
        torch.optim.Adam(model.parameters(), 1e-2),
        device=device,
        nepochs=nepochs,
        domain=(-3.0, 3.0),
        verbose=0,
        accumulate=accumulate,
        **kwargs,
    )


def _failure(fail_rank: int, fail_epoch: int, how: str):
    def after_epoch(record, *_) -> None:
        if record.epoch == fail_epoch and distributed.rank() == fail_rank:
            if how == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            raise RuntimeError(f"rank {fail_rank} fails after epoch {fail_epoch}, as planned")

    return after_epoch


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("scenario", choices=["vanilla", "full"])
    parser.add_argument("--checkpoint-dir")
    parser.add_argument("--fail-rank", type=int, default=1)
    parser.add_argument("--fail-epoch", type=int)
    parser.add_argument("--fail-how", choices=["raise", "kill"], default="raise")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    ctx = distributed.init_distributed(args.device, timeout_s=60)
    distributed.configure_threads(1)
    shard = {"rank": ctx.rank, "world_size": ctx.world_size, "device": ctx.device}
    if args.scenario == "vanilla":
        for accumulate in (1, 2):
            model, log = toy_run("vanilla", 15, accumulate=accumulate, **shard)
            if ctx.is_main:
                weights = {k: v.cpu() for k, v in model.state_dict().items()}
                torch.save(weights, args.out / f"vanilla-acc{accumulate}.pt")
                save_log(log, args.out / f"vanilla-acc{accumulate}.json")
    else:
        callback = None
        if args.fail_epoch is not None:
            callback = _failure(args.fail_rank, args.fail_epoch, args.fail_how)
        model, log = toy_run(
            "full",
            15,
            nce=40,
            burnin=0.0,
            nepochs=4,
            callback=callback,
            checkpoint_dir=args.checkpoint_dir,
            **shard,
        )
        (args.out / f"searched-rank{ctx.rank}.json").write_text(json.dumps(SEARCHED))
        if ctx.is_main:
            torch.save(model.state_dict(), args.out / "full.pt")
            save_log(log, args.out / "full.json")
    distributed.cleanup()


if __name__ == "__main__":
    main()
