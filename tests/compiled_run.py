"""A small CT run with the compiled search (``compile=True``), for the tests of exact repeats.

``python tests/compiled_run.py CHECKPOINT_DIR OUT [KILL_AT]`` trains it (resuming from the
checkpoint if there is one), kills itself with SIGKILL right after epoch KILL_AT was saved, as a
machine stopping would, and otherwise saves its log and weights in OUT.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import torch

from cfbook import FullObjective, NativeGenerator, TrainingLog, counterfactual_training, save_log
from cfbook.data import DeviceLoader
from cfbook.models import mlp

N, N_FEATURES, N_CLASSES = 256, 12, 3
NEPOCHS, BURNIN, NCE, MAXITER = 9, 1, 64, 10


def train(
    checkpoint_dir: Path | None = None,
    kill_at: int | None = None,
    raise_at: int | None = None,
    compile: bool = True,
) -> tuple[torch.nn.Module, TrainingLog]:
    """The run, killed (SIGKILL) or interrupted (RuntimeError) right after epoch ``kill_at`` or
    ``raise_at`` was saved."""
    g = torch.Generator().manual_seed(0)
    y = torch.arange(N) % N_CLASSES
    centres = torch.randn(N_CLASSES, N_FEATURES, generator=g)
    x = (centres[y] + 0.5 * torch.randn(N, N_FEATURES, generator=g)).clamp(-3, 3)
    torch.manual_seed(1)
    model = mlp(N_FEATURES, hidden=(16,), num_classes=N_CLASSES)

    def stop(record, *_) -> None:
        if record.epoch == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        if record.epoch == raise_at:
            raise RuntimeError(f"interrupted after epoch {raise_at}")

    return counterfactual_training(
        FullObjective(),
        model,
        # most searches succeed
        NativeGenerator(maxiter=MAXITER, tau=0.5, step_size=0.5, compile=compile),
        DeviceLoader(x, y, 32, seed=0),
        torch.optim.Adam(model.parameters(), lr=1e-2),
        device="cpu",
        nepochs=NEPOCHS,
        domain=(-3.0, 3.0),
        burnin=BURNIN / NEPOCHS,
        nce=NCE,
        verbose=0,
        checkpoint_dir=checkpoint_dir,
        callback=stop,
    )


if __name__ == "__main__":
    checkpoint_dir, out = Path(sys.argv[1]), Path(sys.argv[2])
    model, log = train(checkpoint_dir, int(sys.argv[3]) if len(sys.argv) > 3 else None)
    out.mkdir(parents=True, exist_ok=True)
    torch.save(model.state_dict(), out / "weights.pt")
    save_log(log, out / "log.json")
