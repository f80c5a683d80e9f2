"""Evaluation: the CT paper's test-time protocol (``protocol``), its metrics (``metrics``:
``predict`` and ``accuracy`` too, which training uses), the report written from its numbers
(``report``), and the paper's evaluation rounds and bootstrap confidence intervals
(``bootstrap``).

May import ``cfbook.search`` and ``cfbook.device``; nothing of training, data or the book.
"""

from cfbook.evaluation.protocol import EvaluationConfig, evaluate

__all__ = ["EvaluationConfig", "evaluate"]
