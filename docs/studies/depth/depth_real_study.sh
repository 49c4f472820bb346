#!/usr/bin/env bash
# Regenerates the real-data part of docs/depth.md ("On real data (diabetes)"), run from the repository root.
# Grid: depth 1, 2, 4, 8 x gelu, relu, tanh, sigmoid, selu, silu x init torch_default, auto x 30 seeds
# = 1,440 runs per task, judged on the test loss at each run's epoch of lowest validation loss
# (--metric early_stop), every activation paired by seed with relu at the same depth and init.
# 1. scikit-learn's diabetes table (442 rows; each seed its own 60/20/20 split), minibatches of 32
#    reshuffled every epoch, 200 epochs (as docs/real-data.md): about 4 minutes on one CPU core.
# 2. the exp_sin function task (1,000 train / 500 validation / 1,000 test points), minibatches of 128
#    and 200 epochs (1,600 steps): a short budget chosen for time (still improving at the end), about
#    12 minutes on one CPU core.
set -euo pipefail
RUNS=${RUNS:-runs}
# One thread per process (see docs/studies/depth/depth_study.sh): results are bit-identical at a fixed thread count.
export OMP_NUM_THREADS=1
ACT="python -m activation_bench.cli"
GRID=('model.depth=1,2,4,8' 'activation=gelu,relu,tanh,sigmoid,selu,silu' 'model.init=torch_default,auto'
      'seed=range(30)')

$ACT sweep --runs-dir "$RUNS" --name depth-real-diabetes -q "${GRID[@]}" \
    data=diabetes batch_size=32 shuffle=true epochs=200
$ACT sweep --runs-dir "$RUNS" --name depth-real-exp_sin -q "${GRID[@]}" \
    data=function data.fn=exp_sin batch_size=128 shuffle=true epochs=200

for task in diabetes exp_sin; do
  # paired table: every activation against relu at the same depth, init and seed (early-stopped test MSE)
  $ACT compare "$RUNS/depth-real-$task" --metric early_stop --baseline activation=relu \
      --format markdown --output "docs/studies/depth/depth-real-$task-early_stop.md"
  # recommended init against the default, paired by depth, activation and seed
  $ACT compare "$RUNS/depth-real-$task" --metric early_stop --baseline model.init=torch_default \
      --format markdown --output "docs/studies/depth/depth-real-$task-init.md"
  # depth 2, 4 and 8 against depth 1, paired by activation, init and seed
  $ACT compare "$RUNS/depth-real-$task" --metric early_stop --baseline model.depth=1 \
      --format markdown --output "docs/studies/depth/depth-real-$task-depth.md"
  # activations ranked over the 8 depth x init cells
  $ACT rank "$RUNS/depth-real-$task" --metric early_stop --format markdown --output "docs/studies/depth/depth-real-$task-rank.md"
  # the pivots quoted in docs/depth.md (early_stop and final test loss, train loss, early-stopping epochs)
  python docs/studies/depth/depth_tables.py "$RUNS/depth-real-$task" --real > "docs/studies/depth/depth-real-$task-tables.md"
done
