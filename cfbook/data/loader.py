"""A loader that batches and shuffles on the device.

The whole (small) data set is moved to the accelerator once; every batch is then a slice of tensors
that already live there, so training never pays for a per-batch host-to-device copy.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import torch

from cfbook.inputs import require_int


class DeviceLoader:
    """Mini-batches of on-device tensors, shuffled by a generator on the same device.

    ``state_dict()`` captures the generator and the position inside an epoch, so a loader restored
    with ``load_state_dict()`` continues with exactly the batches an uninterrupted run would yield.

    Under DDP every process builds the loader with the same ``seed`` and its own ``rank`` of
    ``world_size``: all draw one permutation, cut it into global batches of
    ``world_size * batch_size`` samples, and each process takes its contiguous part of every
    global batch (a short last batch is split as evenly as possible). Two processes with batch
    ``B`` therefore see exactly the samples one process with batch ``2B`` sees, step by step.
    """

    def __init__(
        self,
        x: torch.Tensor | np.ndarray,
        y: torch.Tensor | np.ndarray,
        batch_size: int,
        shuffle: bool = True,
        seed: int = 0,
        *,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        # NumPy arrays (or anything torch.as_tensor takes) are accepted where tensors are.
        x, y = torch.as_tensor(x), torch.as_tensor(y)
        if x.shape[0] != y.shape[0]:
            raise ValueError(f"x and y differ in length: {x.shape[0]} vs {y.shape[0]} samples")
        if x.device != y.device:
            raise ValueError(f"x and y must be on one device, got {x.device} and {y.device}")
        require_int("batch_size", batch_size)
        require_int("world_size", world_size)
        require_int("rank", rank, minimum=0)
        if not rank < world_size:
            raise ValueError(f"need 0 <= rank < world_size, got {rank=}, {world_size=}")
        short = x.shape[0] % (batch_size * world_size)
        if 0 < short < world_size:
            raise ValueError(
                f"the last global batch holds {short} sample(s), fewer than the {world_size} "
                f"processes sharing it; choose a batch size for which {x.shape[0]} samples leave "
                "no such remainder"
            )
        self.x, self.y = x, y
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.seed = seed
        self.rank, self.world_size = rank, world_size
        self._generator = torch.Generator(device=x.device)
        self._generator.manual_seed(seed)
        # Generator state before this epoch's permutation and batches handed out so far (None:
        # between epochs); _resume holds the same pair after load_state_dict until the next epoch.
        self._epoch_start: torch.Tensor | None = None
        self._served = 0
        self._resume: tuple[torch.Tensor, int] | None = None

    @property
    def tensors(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The whole data set, for code that indexes it directly (e.g. counterfactual pools)."""
        return self.x, self.y

    @property
    def device(self) -> torch.device:
        return self.x.device

    def __len__(self) -> int:
        """Batches per epoch: the same number on every process."""
        return math.ceil(self.x.shape[0] / (self.batch_size * self.world_size))

    def _rows(self, b: int) -> slice:
        """This process's positions in the epoch's order for batch ``b``."""
        start = b * self.batch_size * self.world_size
        size = min(self.batch_size * self.world_size, self.x.shape[0] - start)
        base, extra = divmod(size, self.world_size)
        start += self.rank * base + min(self.rank, extra)
        return slice(start, start + base + (self.rank < extra))

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        n = self.x.shape[0]
        if self._resume is not None:
            start_state, first = self._resume
            self._resume = None
            self._generator.set_state(start_state)
        else:
            start_state, first = self._generator.get_state(), 0
        order = None
        if self.shuffle:
            order = torch.randperm(n, generator=self._generator, device=self.x.device)
        self._epoch_start, self._served = start_state, first
        try:
            for b in range(first, len(self)):
                self._served = b + 1
                rows = self._rows(b)
                if order is None:
                    yield self.x[rows], self.y[rows]
                else:
                    idx = order[rows]
                    yield self.x[idx], self.y[idx]
        finally:
            # An abandoned iteration (e.g. next(iter(loader))) counts as a finished epoch, as it
            # does for an uninterrupted loader: the next one draws a fresh permutation either way.
            # (Only if no newer iteration has taken over the bookkeeping meanwhile.)
            if self._epoch_start is start_state:
                self._epoch_start, self._served = None, 0

    def state_dict(self) -> dict:
        """Everything needed to resume the batch order exactly (safe to torch.save)."""
        if self._resume is not None:
            state, served = self._resume
        elif self._epoch_start is not None and self._served < len(self):
            state, served = self._epoch_start, self._served
        else:  # between epochs (or after the last batch): the next epoch draws a fresh permutation
            state, served = self._generator.get_state(), 0
        return {
            "generator": state.clone(),
            "batches_served": served,
            "n": self.x.shape[0],
            "batch_size": self.batch_size,
            "shuffle": self.shuffle,
            "device_type": self.x.device.type,
            "world_size": self.world_size,
        }

    def load_state_dict(self, state: dict) -> None:
        """Restore a position saved by ``state_dict()``; the next iteration continues from there."""
        expected = {
            "n": self.x.shape[0],
            "batch_size": self.batch_size,
            "shuffle": self.shuffle,
            "device_type": self.x.device.type,
            "world_size": self.world_size,
        }
        state = {"world_size": 1, **state}  # states saved before sharding: one process
        for key, value in expected.items():
            if state.get(key) != value:
                raise ValueError(
                    f"loader state does not fit this loader: {key}={state.get(key)!r} in the saved "
                    f"state, {value!r} here"
                )
        generator_state = state["generator"].cpu()
        self._generator.set_state(generator_state)
        served = int(state["batches_served"])
        self._resume = (generator_state, served) if served else None
        self._epoch_start, self._served = None, 0
