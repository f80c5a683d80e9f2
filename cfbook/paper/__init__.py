"""The CT paper's experiments, reproduced: per-data-set settings (``settings``), the resumable
grid of trainings and evaluations (``grid``), the merge into tables (``merge``), the paper's
published numbers (``published``), the knob study (``knobs``) and the two-dimensional figures'
data (``two_d``). Its command line is ``python -m cfbook.commands.paper``.

May import the library (training, evaluation, search, data); nothing of the book.
"""
