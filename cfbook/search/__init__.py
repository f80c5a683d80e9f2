"""The counterfactual search: the ``Generator`` protocol the rest of cfbook depends on and the
result it returns (``interface``); the generators (``NativeGenerator`` batched on the device,
``ReferenceGenerator`` one sample at a time); one search iteration, written once (``step``),
and its compiled executor (``compiled``); the domain and mutability constraints; the drawing of
target classes; the iterates of a search for pictures (``path``); the checks of a model and its
data (``checks``), a binary model's single logit as two classes (``logits``), and how often a
search reaches its target on a model, with the step that makes it (``calibration``).

May import torch and ``cfbook.amp``; nothing of training, evaluation, data or the book.
"""

from cfbook.search.calibration import calibrate_search, probe_validity
from cfbook.search.constraints import Domain, Mutability, infer_domain
from cfbook.search.generators import PAPER_SEARCH, NativeGenerator, ReferenceGenerator
from cfbook.search.interface import CounterfactualResult, Generator

__all__ = [
    "PAPER_SEARCH",
    "CounterfactualResult",
    "Domain",
    "Generator",
    "Mutability",
    "NativeGenerator",
    "ReferenceGenerator",
    "calibrate_search",
    "infer_domain",
    "probe_validity",
]
