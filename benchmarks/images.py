"""Image inputs: a search of ``(N, 1, 28, 28)`` images against the same search of flat rows.

The same weights, rows and targets, searched twice: once as images, given to a network that
takes them as they are, and once as flat ``(N, 784)`` rows, given to the same network behind a
reshape (the MLP: an ``nn.Flatten`` in front of it for the images; ResNet-18: torchvision's
network for the images, the same behind an ``nn.Unflatten`` for the rows). The results agree to
the bit (``tests/test_images.py`` and the table's last column); the question here is the time.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from benchmarks.common import Case, Context, Table, check, fmt_ratio, fmt_seconds, side_by_side
from benchmarks.config import MODEL_NAMES
from benchmarks.fixtures import DOMAIN, factuals, trained_model
from cfbook.models import IMAGE_SHAPE
from cfbook.search.generators import NativeGenerator
from cfbook.search.interface import CounterfactualResult

TITLE = "Image inputs: time per search, images against flat rows"
# The image path may cost at most this much more than the flat one, beyond timing noise.
TARGET_RATIO = 1.10


def _image_model(name: str, flat: nn.Module) -> nn.Module:
    """The network of ``flat`` that takes images: ResNet-18's own, or the MLP behind a
    flatten (both share ``flat``'s weights)."""
    return flat[1] if name == "resnet18" else nn.Sequential(nn.Flatten(), flat)


def _search(
    search: NativeGenerator, model: nn.Module, x: torch.Tensor, target: torch.Tensor
) -> Callable[[], CounterfactualResult]:
    return lambda: search.generate(model, x, target, domain=DOMAIN)


def run(ctx: Context) -> list[Table]:
    sizes = ctx.sizes
    table = Table(
        f"Seconds per generate() call, flat rows against images (maxiter {sizes.maxiter}, "
        "the default eager search)",
        [
            "model",
            "rows",
            "flat s/search",
            "images s/search",
            "images / flat",
            f"<= {TARGET_RATIO}x",
            "same results",
        ],
    )
    search = NativeGenerator(maxiter=sizes.maxiter)
    for name in MODEL_NAMES:
        n = sizes.reference_subset[name] * 4
        flat_model = trained_model(ctx, name)
        image_model = _image_model(name, flat_model)
        x, target = factuals(ctx, flat_model, n)
        images = x.reshape(n, *IMAGE_SHAPE)
        with torch.no_grad():
            assert torch.equal(flat_model(x), image_model(images))
        timings = side_by_side(
            ctx,
            {
                "flat": Case(_search(search, flat_model, x, target)),
                "images": Case(_search(search, image_model, images, target)),
            },
            label=f"images {name}",
        )
        flat, shaped = timings["flat"].result, timings["images"].result
        same = torch.equal(flat.counterfactual, shaped.counterfactual.flatten(1)) and torch.equal(
            flat.iterations, shaped.iterations
        )
        ratio = timings["images"].median / timings["flat"].median
        table.add(
            name,
            n,
            fmt_seconds(timings["flat"].median),
            fmt_seconds(timings["images"].median),
            fmt_ratio(ratio),
            check(ratio <= TARGET_RATIO),
            check(same),
        )
    table.notes.append(
        "Interleaved rounds of the two cases after a warm-up each; medians. The same rows and "
        "targets on both sides, drawn from MNIST's training part; the models partially trained "
        f"as in the other benchmarks. The target allows {TARGET_RATIO}x for timing noise."
    )
    return [table]
