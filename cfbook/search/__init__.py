"""The counterfactual search: the generators (``NativeGenerator`` batched on the device,
``ReferenceGenerator`` one sample at a time), one search iteration (``step``), its compiled
form (``compiled``), the domain and mutability constraints, and the drawing of target classes.

May import torch and ``cfbook.amp``; nothing of training, evaluation, data or the book.
"""

from cfbook.search.generators import (
    PAPER_SEARCH,
    CounterfactualResult,
    NativeGenerator,
    ReferenceGenerator,
)

__all__ = ["PAPER_SEARCH", "CounterfactualResult", "NativeGenerator", "ReferenceGenerator"]
