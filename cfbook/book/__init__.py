"""Everything that exists only to build the book: the pipeline and its training stages, the
profiles, a chapter's set-up, the chapter list (``toc``), the figures and generated text
(``figures``), the site builders (``site``) and the scaling chapter's runner.

May import any part of cfbook. Nothing outside it imports it, except the command lines
``python -m cfbook.train`` and ``python -m cfbook.pipeline``.
"""
