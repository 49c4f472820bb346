#!/usr/bin/env bash
# The tuned depth study of docs/depth.md (run from the repository root): every cell at its own
# learning rate. Grid: depth 1, 2, 4, 8 x model.norm none, batch x gelu, relu, tanh, sigmoid, selu,
# silu x lr 1e-4 to 1e-1 (7 half-decades) x 20 seeds = 6,720 runs on the synthetic teacher task of
# the first study (PyTorch's default init); seeds 0-4 choose each cell's lr, seeds 5-19 judge it.
# log.preact_stats=100 records how normal each layer's pre-activations are (preact.csv).
set -euo pipefail
RUNS=${RUNS:-runs}
# One thread per process: on a small shared machine, OpenMP's threads wait on each other when the
# cores are busy; results are bit-identical at a fixed thread count.
export OMP_NUM_THREADS=1
TASK=(data.target=teacher data.input_dim=16 data.n_samples=64 data.n_val=256 data.noise=0.1
      model.hidden_dim=32 epochs=300 log.every=10 log.preact_stats=100)

actbench sweep --runs-dir "$RUNS" --name depth-tuned -q \
    'model.depth=1,2,4,8' 'model.norm=none,batch' 'activation=gelu,relu,tanh,sigmoid,selu,silu' \
    'lr=1e-4,3e-4,1e-3,3e-3,1e-2,3e-2,1e-1' 'seed=range(20)' "${TASK[@]}"

for metric in final best; do
  actbench compare "$RUNS/depth-tuned" --loss val_loss --metric "$metric" --tune lr --tune-seeds 5 \
      --baseline activation=relu --format markdown --output "docs/studies/depth/tuned-$metric-val.md"
done
python docs/studies/depth/tuned_tables.py "$RUNS/depth-tuned" > docs/studies/depth/tuned-tables.md
