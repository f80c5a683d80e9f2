"""Evaluation: the CT paper's test-time protocol (``protocol``), its metrics (``metrics``:
``predict`` and ``accuracy`` too, which training uses) and the report written from its numbers
(``report``).

May import ``cfbook.search`` and ``cfbook.device``; nothing of training, data or the book.
"""

from cfbook.evaluation.protocol import EvaluationConfig, evaluate

__all__ = ["EvaluationConfig", "evaluate"]
