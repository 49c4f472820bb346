#!/usr/bin/env bash
# The searches of the activation-search study (README.md beside this script): 400 candidates
# drawn from the core space (seed 0) on three tasks with the search's defaults: rung 1 on 2 seeds
# at lr 3e-3 and 3e-2, the best quarter on 4 seeds for twice as long at each one's rung-1 lr, then
# the judgement: the best 16 of those and relu, gelu, silu and tanh at lr 1e-3..1e-1 on 4 fresh
# tuning seeds, each at its chosen lr on 10 other fresh seeds. One torch thread per process; RUNS
# defaults to runs/.
set -euo pipefail
RUNS=${RUNS:-runs}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
common=(--candidates 400 --runs-dir "$RUNS" -q)
actbench search data=function data.fn=exp_sin epochs=30 batch_size=64 --name search_exp_sin "${common[@]}"
actbench search data=function data.fn=bessel_j0 epochs=30 batch_size=64 --name search_bessel_j0 "${common[@]}"
actbench search data=diabetes epochs=100 batch_size=64 --name search_diabetes "${common[@]}"
# The function tasks chose lr 1e-1, the grid's top, for most functions: the judgement again with the
# grid widened to 3e-1 and 1. The screen is the same, so its rungs are copied and found finished by
# their config hashes (nothing of them retrains); only the judgement trains.
for task in exp_sin bessel_j0; do
  mkdir -p "$RUNS/search_${task}_wide"
  cp -rn "$RUNS/search_$task/rung1" "$RUNS/search_$task/rung2" "$RUNS/search_${task}_wide/"
  actbench search data=function data.fn=$task epochs=30 batch_size=64 --name search_${task}_wide \
    --lrs 1e-3,3e-3,1e-2,3e-2,1e-1,3e-1,1 "${common[@]}"
done
