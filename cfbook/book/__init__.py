"""Everything that exists only to build the book: the pipeline (``pipeline``), its training
stages and evaluation step (``stages``), the profiles, the per-model evaluation
(``evaluation``: accuracy under attack and the gallery), the report written from its numbers
(``report``), the search under the microscope, the recorded benchmarks (``benchmarks``), a
chapter's set-up, the chapter list (``toc``), the figures and generated text (``figures``), the
site builders (``site``) and the scaling chapter's runs (``scaling``).

May import the library and the paper grid; nothing imports it but ``cfbook.commands``.
"""
