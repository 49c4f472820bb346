#!/usr/bin/env bash
# Known functions trained exactly like a search's screen (rung 1: seeds 0 and 1 at lr 3e-3 and
# 3e-2, the same task and budget), so tables.py can place them in the screen's ranking. RUNS
# defaults to runs/.
set -euo pipefail
RUNS=${RUNS:-runs}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
fns='"x * sigmoid(x)","max(x, sigmoid(x))","x * sigmoid(1.702 * x)","x * (1 + erf(x / 1.4142135623730951)) / 2","max(x, 0)","tanh(x)"'
for task in exp_sin bessel_j0; do
  actbench sweep data=function data.fn=$task epochs=30 batch_size=64 activation=expr "activation.fn=$fns" \
    'lr=0.003,0.03' 'seed=0,1' --name known_$task --runs-dir "$RUNS" -q
done
actbench sweep data=diabetes epochs=100 batch_size=64 activation=expr "activation.fn=$fns" 'lr=0.003,0.03' \
  'seed=0,1' --name known_diabetes --runs-dir "$RUNS" -q
