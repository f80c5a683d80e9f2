"""The site builders: ``build`` picks Quarto (``quarto``) when it is installed, else
nbconvert (``nbconvert``), and both make the same offline pages from the executed chapters.

May import ``cfbook.book.toc`` and the rendering tools; nothing of training or evaluation.
"""
