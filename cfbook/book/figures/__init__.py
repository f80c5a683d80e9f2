"""The book's figures and the text written from the numbers: training runs compared
(``training``) and the evaluation's gallery, quality and robustness (``evaluation``).

May import plotly and any part of cfbook except the pipeline.
"""

from cfbook.book.figures.evaluation import gallery_figure, quality_figure, robustness_figure
from cfbook.book.figures.training import (
    comparison_figure,
    comparison_summary,
    profile_table,
    sample_digits_figure,
    show,
    summary_markdown,
)

__all__ = [
    "comparison_figure",
    "comparison_summary",
    "gallery_figure",
    "profile_table",
    "quality_figure",
    "robustness_figure",
    "sample_digits_figure",
    "show",
    "summary_markdown",
]
