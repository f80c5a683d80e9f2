"""One search under the microscope: a held-out digit searched on the baseline and on the CT model
with the profile's training-time generator, every iterate kept (``cfbook.search.path``).

The paired evaluation (``cfbook.book.stages``) calls :func:`look_closely` on run 1's models and
saves the result as ``data/<profile>/microscope.json``; the main example's chapter only reads it.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor, nn

from cfbook.book.evaluation import encode_images
from cfbook.evaluation.metrics import predict
from cfbook.search.generators import NativeGenerator
from cfbook.search.path import record_search

__all__ = ["MICROSCOPE_FORMAT", "look_closely"]

MICROSCOPE_FORMAT = "cfbook-microscope"


def look_closely(
    models: dict[str, nn.Module],
    x: Tensor,
    y: Tensor,
    generator: NativeGenerator,
    *,
    factual: int = 4,
    target: int = 9,
    domain: tuple[float, float] = (-1.0, 1.0),
) -> dict[str, Any]:
    """Search the first digit of ``x`` labelled ``factual`` that every model classifies as
    ``factual`` (else the first so labelled) towards ``target`` in each model, keeping the
    iterates (as 8-bit images), target probabilities and L-inf distances."""
    labelled = y == factual
    if not labelled.any():
        raise ValueError(f"the digits hold no {factual}; pass another factual class")
    agree = labelled.clone()
    for model in models.values():
        agree &= predict(model, x) == factual
    if not agree.any():  # a barely trained model (the smoke profile): take the first one anyway
        print(
            f"No {factual} is classified as {factual} by every model; taking the first {factual}."
        )
    index = int((agree if agree.any() else labelled).nonzero()[0, 0])
    searches = {}
    for name, model in models.items():
        record = record_search(generator, model, x[index], target, domain=domain)
        searches[name] = {
            # The path is frozen after the search stops: only the iterates up to there are kept.
            "path": encode_images(record.path[: record.counterfactual_at + 1], *domain),
            "target_prob": [round(p, 4) for p in record.target_prob.tolist()],
            "distance": [round(d, 4) for d in record.distance.tolist()],
            "counterfactual_at": record.counterfactual_at,
            "adversarial_at": record.adversarial_at,
            "valid": record.valid,
        }
    return {
        "format": MICROSCOPE_FORMAT,
        "meta": {
            "index": index,
            "factual": factual,
            "target": target,
            "classified_as_factual": bool(agree.any()),
            "domain": list(domain),
            "search": generator.settings(),
        },
        "searches": searches,
    }
