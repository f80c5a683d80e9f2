#!/usr/bin/env bash
# Set up, then run the book's pipeline (both training stages in fresh kernels, every chapter) and
# build the site: with Quarto when scripts/quarto.sh finds or installs it, else with nbconvert.
# Extra arguments go to the pipeline, e.g. `bash scripts/main.sh --profile tutorial --force`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
source scripts/quarto.sh
.venv/bin/python -m cfbook.commands.pipeline "$@"
