"""The CT paper's experiments, reproduced: per-data-set settings (``settings``), the resumable
grid of trainings and evaluations (``grid``), the merge into tables (``merge``), the paper's
published numbers (``published``) and the command line (``python -m cfbook.paper``).

A command layer, like ``cfbook.train``: it may import any part of cfbook but the book.
"""
