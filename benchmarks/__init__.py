"""Benchmarks of cfbook's counterfactual search and training (not tests: nothing here asserts).

Run them all with ``python -m benchmarks.run`` (``--quick`` for a smoke run); results go to
``benchmarks/results.json``, and ``benchmarks/RESULTS.md`` is rendered from it.
"""
