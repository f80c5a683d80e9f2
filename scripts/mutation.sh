#!/usr/bin/env bash
# Mutation testing of the library: mutmut mutates the search, training, evaluation, the data sets,
# the objectives, the checks of user input, the models and mixed precision ([tool.mutmut] in
# pyproject.toml) and runs the unit tests that cover each mutant; then the wrong edits that once
# passed every test (scripts/named_mutants.py) are applied one at a time.
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
# Tests that read the shipped data or the recorded benchmarks, or run the project's scripts, find
# them beside the mutants.
for shared in data scripts benchmarks; do
    ln -sfn "../$shared" "mutants/$shared"
done
.venv/bin/mutmut run --max-children "$workers" "$@"
.venv/bin/python scripts/mutation_report.py
# A mutant that loses its data folder can write through the links above into the repository's
# own files: name them, to restore before a commit.
changed=$(git status --porcelain -- data)
if [ -n "$changed" ]; then
    echo "Shipped files changed while the mutants ran (restore them if you did not change them):"
    echo "$changed"
fi
.venv/bin/python scripts/named_mutants.py
