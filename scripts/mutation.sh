#!/usr/bin/env bash
# Mutation testing: mutmut mutates cfbook/search/, cfbook/evaluation/, the objectives, the training
# loss terms, an epoch's counterfactuals, checkpoints, the paper's agreement rule, the synthetic,
# tabular and MNIST data sets, the device loader, the merge of the paper's tables, the paper's
# settings, the models, the training loop, its log and a run's identity, atomic writes, progress
# lines, the device choice and warnings, the checks of user input, the chapters' verdict text, the
# evaluation chapter's gallery and attacks, the settings table, the training, comparison,
# microscope, ridge, 2-D, seed-page and evaluation texts and figures, mixed precision, the data
# folder's paths, the epoch profiler, the chapter list and a chapter's set-up, the recorded
# benchmarks and their figures, the grid's locks, the book's profiles, the scaling chapter's
# runs, table and figure, the knob study, the two-dimensional chapter's data, the paper and
# scaling commands and the microscope's search ([tool.mutmut] in pyproject.toml; of
# cfbook/paper/grid.py, name patterns pick parts: pass 27 ran missing_weights) and runs the unit
# tests that cover each mutant; then the wrong edits that once passed every test
# (scripts/named_mutants.py) are applied one at a time.
# Prints the kill rate per module; tests/MUTATION.md records them.
#
#   bash scripts/mutation.sh                       # everything (hours on 2 CPU cores)
#   bash scripts/mutation.sh "cfbook.evaluation*"  # the mutants whose names match
#
# mutmut keeps its results in mutants/: a second run on the same sources resumes, and
# `.venv/bin/mutmut browse` or `mutmut show NAME` shows a survivor's diff.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/mutmut ] || .venv/bin/pip install -q "mutmut==3.8.1"
# One thread per test process: mutmut runs one worker per core (counted before
# OMP_NUM_THREADS=1, which nproc obeys).
workers=$(nproc)
export OMP_NUM_THREADS=1 CFBOOK_DEVICE=cpu
# mutmut never recopies a source file that mutants/ already holds, and measures line coverage on
# that (already mutated) copy: a module edited since the last run would be tested as it was, or
# mutated on the wrong lines. Start afresh whenever any of cfbook's sources changed.
stamp=$(find cfbook -name '*.py' | sort | xargs cat | sha256sum)
if [ -d mutants ] && [ "$(cat mutants/.source-stamp 2>/dev/null)" != "$stamp" ]; then
    echo "cfbook's sources changed since the last run: starting afresh"
    rm -rf mutants
fi
mkdir -p mutants && echo "$stamp" > mutants/.source-stamp
# Tests that read the shipped data, run the project's scripts or check the book's files find them
# beside the mutants.
for shared in data scripts benchmarks book reference _quarto.yml index.ipynb environment.yml; do
    ln -sfn "../$shared" "mutants/$shared"
done
.venv/bin/mutmut run --max-children "$workers" "$@"
.venv/bin/python scripts/mutation_report.py
# A mutant that loses its data folder can write through the links above into the repository's
# own files (pass 26 left a scaling log in data/scaling/): name them, to restore before a commit.
changed=$(git status --porcelain -- data book reference _quarto.yml index.ipynb)
if [ -n "$changed" ]; then
    echo "Shipped files changed while the mutants ran (restore them if you did not change them):"
    echo "$changed"
fi
.venv/bin/python scripts/named_mutants.py
