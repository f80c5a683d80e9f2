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
# KaTeX, which typesets the site's equations, served by the site itself (no CDN): from the npm
# registry into .cache/npm, copied into the site by scripts/quarto_pre_render.py.
KATEX_VERSION=0.19.1
if [ ! -f .cache/npm/node_modules/katex/dist/katex.min.js ] \
    || ! grep -q "\"version\": \"$KATEX_VERSION\"" .cache/npm/node_modules/katex/package.json; then
    if command -v npm >/dev/null 2>&1; then
        npm install --silent --no-save --no-audit --no-fund --prefix .cache/npm "katex@$KATEX_VERSION"
    else
        echo "npm is not installed: the Quarto site cannot typeset its equations (install" \
             "Node.js and npm, then run this again)" >&2
    fi
fi
# Register the venv's kernel so papermill and nbval run the chapters with this environment.
.venv/bin/python -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (cfbook)" >/dev/null
.venv/bin/python -c "import torch, cfbook; print(f'cfbook {cfbook.__version__} with torch {torch.__version__} ready in .venv')"
