"""Single entry point: ``python -m benchmarks.run [--quick] [--only a,b] [--device cpu]``.

Also works as ``python benchmarks/run.py`` from the repository root.
"""

import sys
from pathlib import Path

if not __package__:  # run as a file: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
