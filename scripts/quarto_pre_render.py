"""Quarto pre-render step: put plotly.min.js and KaTeX at the project root for the site to serve.

The chapters store their figures without plotly.js, and every page loads the site's one copy
(``project.resources`` in _quarto.yml copies it into the site). The file comes from the installed
plotly package and is git-ignored, so a fresh clone gets it here, on every ``quarto render``.
KaTeX, which typesets the equations (``html-math-method`` in _quarto.yml), comes the same way
from the copy scripts/setup.sh installed from the npm registry into .cache/npm: its script, its
stylesheet and its fonts go to katex/.

Quarto runs this with $QUARTO_PYTHON, else the python3 on PATH, in the project folder. When that
Python has no plotly (a system python3, say), the project's .venv from scripts/setup.sh is asked.
Standard library only: the Python that runs this need not have cfbook installed.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

PLOTLY_JS = "plotly.min.js"
KATEX_SOURCE = Path(".cache") / "npm" / "node_modules" / "katex" / "dist"
KATEX_TARGET = Path("katex")
KATEX_FILES = ("katex.min.js", "katex.min.css")
VENV_PYTHON = Path(".venv") / "bin" / "python"


def _in_venv() -> bool:
    return Path(sys.prefix).resolve() == VENV_PYTHON.parents[1].resolve()


def main() -> None:
    try:
        import plotly
    except ImportError:
        if VENV_PYTHON.is_file() and not _in_venv():
            os.execv(VENV_PYTHON, [str(VENV_PYTHON), os.path.abspath(__file__)])  # the project's
        sys.exit(
            f"{__file__}: {sys.executable} cannot import plotly, which provides {PLOTLY_JS}. "
            "Run `bash scripts/setup.sh`, or set QUARTO_PYTHON to the Python you installed "
            "cfbook into."
        )
    source = Path(plotly.__file__).parent / "package_data" / PLOTLY_JS
    target = Path(PLOTLY_JS)
    if not target.is_file() or target.stat().st_size != source.stat().st_size:
        shutil.copyfile(source, target)
        print(f"Copied {source} to {target.resolve()}")
    _copy_katex()


def _katex_source() -> Path | None:
    # The project's own .cache, else that of the checkout this script lives in (the pipeline
    # renders a staged copy of the project whose scripts/ links back to the checkout).
    for project in (Path("."), Path(__file__).resolve().parents[1]):
        if (project / KATEX_SOURCE / KATEX_FILES[0]).is_file():
            return project / KATEX_SOURCE
    return None


def _copy_katex() -> None:
    source_dir = _katex_source()
    if source_dir is None:
        sys.exit(
            f"{__file__}: KaTeX, which typesets the site's equations, is not in {KATEX_SOURCE}. "
            "Run `bash scripts/setup.sh` (it installs KaTeX with npm from the npm registry)."
        )
    fonts = KATEX_TARGET / "fonts"
    fonts.mkdir(parents=True, exist_ok=True)
    wanted = [source_dir / name for name in KATEX_FILES]
    wanted += sorted((source_dir / "fonts").iterdir())
    for source in wanted:
        target = KATEX_TARGET / source.relative_to(source_dir)
        if not target.is_file() or target.stat().st_size != source.stat().st_size:
            shutil.copyfile(source, target)


if __name__ == "__main__":
    main()
