"""The efficiency benchmark's bare passes and row schedules: a forward pass and an input
gradient by autograd per scheduled row count, and the rows a search carries between its
compaction points."""

from __future__ import annotations

import torch
from torch import nn

from benchmarks.efficiency import active_rows, bare_passes, scheduled_rows
from cfbook.search.generators import NativeGenerator


def test_bare_passes_run_one_forward_and_one_input_gradient_per_row_count():
    model = nn.Sequential(nn.Linear(12, 8), nn.ReLU(), nn.Linear(8, 3))
    forward_rows: list[int] = []
    gradient_rows: list[int] = []
    model.register_forward_hook(lambda m, args, out: forward_rows.append(args[0].shape[0]))
    model[0].register_full_backward_hook(
        lambda m, grad_in, grad_out: gradient_rows.append(grad_in[0].shape[0])
    )
    x, grad_out = torch.rand(20, 12), torch.randn(20, 3)
    bare_passes(model, x, [20, 7, 3], grad_out)
    assert forward_rows == [20, 7, 3]
    assert gradient_rows == [20, 7, 3]  # the gradient reached the inputs every time
    assert all(p.grad is None for p in model.parameters())  # w.r.t. the inputs only


def test_rows_active_and_scheduled_follow_the_iterations_and_compaction_points():
    iterations = torch.tensor([0, 1, 3, 6, 6])
    assert active_rows(iterations, 6) == [4, 3, 3, 2, 2, 2]
    generator = NativeGenerator(maxiter=6, compact_every=5)
    assert generator.compaction_points() == [1, 2, 4, 5]
    # All rows until the first point, then those that had not stopped by the last point.
    assert scheduled_rows(iterations, generator) == [5, 4, 3, 3, 2, 2]
