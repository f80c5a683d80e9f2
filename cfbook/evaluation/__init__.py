"""Evaluation with the CT paper's protocol: its test-time protocol (``protocol``:
``PaperProtocol``, ``paper_evaluate``), one implementation of each measure (``metrics``:
validity, cost, IP, IP*, and ``predict`` and ``accuracy``, which training uses too), the
registry of the protocol's measures that its results, tables and figures read (``measures``),
the evaluation rounds (``rounds``), their statistics (``statistics``: CT against the baseline,
mean and standard error), the attacks (``attacks``: FGSM and PGD) and feature attributions by
integrated gradients (``attribution``).

May import ``cfbook.search``; nothing of training, data, the paper grid or the book.
"""

from cfbook.evaluation.attacks import PAPER_EPSILONS, PAPER_PGD, accuracy_at, attack_accuracy
from cfbook.evaluation.metrics import accuracy, predict
from cfbook.evaluation.protocol import PaperProtocol, paper_evaluate
from cfbook.evaluation.statistics import compare_models, compare_rounds

__all__ = [
    "PAPER_EPSILONS",
    "PAPER_PGD",
    "PaperProtocol",
    "accuracy",
    "accuracy_at",
    "attack_accuracy",
    "compare_models",
    "compare_rounds",
    "paper_evaluate",
    "predict",
]
