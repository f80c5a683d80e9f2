"""Counterfactual training: the loop (``loop``: ``counterfactual_training``), a run's identity
for resuming (``run``), the training set as tensors (``data``), one epoch's counterfactuals
(``counterfactuals``), CT's loss terms and ``CounterfactualLoss`` for a loop of one's own
(``loss``), the per-epoch log (``log``), checkpoints (``checkpoint``) and training over several
processes (``distributed``).

May import ``cfbook.search`` and ``cfbook.evaluation`` (``predict``, ``accuracy``); nothing of
data, the paper grid or the book.
"""

from cfbook.training.counterfactuals import CounterfactualBatch
from cfbook.training.log import EpochRecord, TrainingLog, load_log, save_log
from cfbook.training.loop import LowValidityWarning, SearchProbeWarning, counterfactual_training
from cfbook.training.loss import CounterfactualLoss, counterfactual_terms

__all__ = [
    "CounterfactualBatch",
    "CounterfactualLoss",
    "EpochRecord",
    "LowValidityWarning",
    "SearchProbeWarning",
    "TrainingLog",
    "counterfactual_terms",
    "counterfactual_training",
    "load_log",
    "save_log",
]
