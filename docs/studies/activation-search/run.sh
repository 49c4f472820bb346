#!/usr/bin/env bash
# The searches of docs/activation-search.md: 400 candidates drawn from the core space (seed 0) on
# three tasks, rung 1 on 2 seeds, the best quarter on 4 seeds for twice as long, the best quarter
# of those judged with relu, gelu, silu and tanh on 10 fresh seeds. One torch thread per process
# (the machine is shared); RUNS defaults to runs/.
set -euo pipefail
RUNS=${RUNS:-runs}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
common=(--candidates 400 --seeds 2 --rungs 3 --keep 0.25 --final-seeds 10 --runs-dir "$RUNS" -q)
actbench search data=function data.fn=exp_sin epochs=30 batch_size=64 --name search_exp_sin "${common[@]}"
actbench search data=function data.fn=bessel_j0 epochs=30 batch_size=64 --name search_bessel_j0 "${common[@]}"
actbench search data=diabetes epochs=100 batch_size=64 --name search_diabetes "${common[@]}"
