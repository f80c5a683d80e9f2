#!/usr/bin/env bash
# Set up, then run the linter, the formatter check and every test: unit tests, the notebooks
# (nbval), the pipeline, and the site rendered by Quarto and by nbconvert, in Chromium.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# Quarto from PATH, else installed once from ../shared/tools/quarto into .cache/ (offline).
source scripts/quarto.sh
if ! command -v chromium >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "Installing Debian's chromium for the site test..."
        apt-get update -qq >/dev/null && apt-get install -y -qq chromium >/dev/null
    else
        echo "chromium is not installed: the browser test of the site will be skipped" >&2
    fi
fi
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/lint-imports
export CFBOOK_DEVICE=${CFBOOK_DEVICE:-cpu}
.venv/bin/python -m pytest "$@"
