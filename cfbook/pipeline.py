"""``python -m cfbook.pipeline``: the command that trains the stages and builds the book.

The pipeline itself is :mod:`cfbook.book.pipeline`; this module is only its command line.
"""

import sys

from cfbook.book.pipeline import main

if __name__ == "__main__":
    sys.exit(main())
