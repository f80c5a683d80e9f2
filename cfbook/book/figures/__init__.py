"""The book's figures and the text written from the numbers: shared helpers and profiles
(``training``), both objectives over their seeds (``seeds``), the evaluation's gallery and
robustness (``evaluation``) and the paper reproduction (``reproduction``).

May import plotly and any part of cfbook except the pipeline.
"""

from cfbook.book.figures.evaluation import gallery_figure, gallery_text, robustness_figure
from cfbook.book.figures.seeds import seeds_figure, seeds_markdown, seeds_summary
from cfbook.book.figures.training import profile_table, sample_digits_figure, show

__all__ = [
    "gallery_figure",
    "gallery_text",
    "profile_table",
    "robustness_figure",
    "sample_digits_figure",
    "seeds_figure",
    "seeds_markdown",
    "seeds_summary",
    "show",
]
