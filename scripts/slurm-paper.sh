#!/usr/bin/env bash
# The CT paper's experiment grid on a SLURM cluster: one training cell per array task, then one
# evaluation per data set and seed, then the merge into results.json. Run it with bash (it
# submits three jobs, each waiting for the one before):
#
#   bash scripts/slurm-paper.sh                      # the whole grid
#   bash scripts/slurm-paper.sh --data adult,mnist   # part of it (any python -m cfbook.commands.paper filter)
#   bash scripts/slurm-paper.sh --dry-run            # print the sbatch commands instead
#
# Every task is resumable: a requeued or repeated task reuses what is done. Results go to
# data/reproduction/ (or --out). Adapt SBATCH_ARGS (partition, account, time) to your cluster.
set -euo pipefail

dry_run=0
if [ "${1:-}" = "--dry-run" ]; then
    dry_run=1
    shift
fi
cd "$(dirname "$0")/.."
python=${PYTHON:-python}
[ -x .venv/bin/python ] && python=${PYTHON:-.venv/bin/python}
read -r -a extra <<< "${SBATCH_ARGS:---cpus-per-task=2 --mem=8G --time=00:30:00}"
args=$(printf '%q ' "$@")

n_cells=$("$python" -m cfbook.commands.paper --list "$@" | wc -l)
n_evals=$("$python" -m cfbook.commands.paper --list-evaluations "$@" | wc -l)
run="$python -m cfbook.commands.paper $args"

train=(sbatch --parsable "${extra[@]}" --job-name=cfbook-paper-train
    --array=0-$((n_cells - 1)) --output=cfbook-paper-train-%A_%a.out
    --wrap "$run --train-task \$SLURM_ARRAY_TASK_ID")
evaluate=(sbatch --parsable "${extra[@]}" --job-name=cfbook-paper-eval
    --array=0-$((n_evals - 1)) --output=cfbook-paper-eval-%A_%a.out
    --wrap "$run --eval-task \$SLURM_ARRAY_TASK_ID")
merge=(sbatch --parsable "${extra[@]}" --job-name=cfbook-paper-merge
    --output=cfbook-paper-merge-%j.out --wrap "$run --merge-only")

if [ "$dry_run" = 1 ]; then
    echo "# $n_cells training tasks, $n_evals evaluation tasks, one merge"
    printf '%q ' "${train[@]}"; echo
    printf '%q ' "${evaluate[@]:0:2}" "--dependency=afterok:<train job>" "${evaluate[@]:2}"; echo
    printf '%q ' "${merge[@]:0:2}" "--dependency=afterok:<evaluation job>" "${merge[@]:2}"; echo
    exit 0
fi
train_id=$("${train[@]}")
eval_id=$("${evaluate[@]:0:2}" --dependency=afterok:"$train_id" "${evaluate[@]:2}")
merge_id=$("${merge[@]:0:2}" --dependency=afterok:"$eval_id" "${merge[@]:2}")
echo "submitted: training $train_id ($n_cells tasks), evaluation $eval_id ($n_evals), merge $merge_id"
