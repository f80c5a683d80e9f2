#!/usr/bin/env bash
# Create .venv with everything cfbook, its book and its tests need. Safe to re-run.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
# torch first, pinned: on machines with the local wheel mirror this is a quick install; a bare
# `torch` requirement would pull a multi-GB newer build.
.venv/bin/python -m pip install --quiet "torch==${CFBOOK_TORCH:-2.14.1}" "torchvision==${CFBOOK_TORCHVISION:-0.29.1}"
.venv/bin/python -m pip install --quiet -e '.[dev]'
# Register the venv's kernel so papermill and nbval run the chapters with this environment.
.venv/bin/python -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (cfbook)" >/dev/null
.venv/bin/python -c "import torch, cfbook; print(f'cfbook {cfbook.__version__} with torch {torch.__version__} ready in .venv')"
