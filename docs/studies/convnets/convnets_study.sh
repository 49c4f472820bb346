#!/usr/bin/env bash
# The convnet study of docs/convnets.md (run from the repository root): do activations rank in
# convnets as they do in MLPs? Two convnets, each with and without batch norm:
#   - MNIST-1D's published CNN (model=cnn's defaults: Conv1d 1->25->25->25, kernels 5,3,3, stride 2,
#     flatten -> Linear 10), batch 100, the published 6,000 steps (188 epochs of 3,200 rows);
#   - a small 2-D CNN on digits' 8x8 images (16 and 32 channels, kernel 3, padding 1, max pooling),
#     batch 64, 100 epochs (1,700 steps).
# 6 activations x 5 learning rates (1e-3 to 1e-1) x 20 seeds per cell: 600 runs per sweep, 2,400 in
# all; seeds 0-4 choose each activation's lr (on validation accuracy, or validation loss for the
# loss table), seeds 5-19 judge it on the canonical test set, early-stopped on validation loss.
# DEVICE=cuda trains on a GPU; SWEEPS_ONLY=1 stops after training,
# ONLY=cnn-mnist1d-none (say) trains that sweep alone.
set -euo pipefail
RUNS=${RUNS:-runs}
DEVICE=${DEVICE:-cpu}
ACTBENCH=${ACTBENCH:-actbench}
OUT=docs/studies/convnets
GRID=('activation=relu,gelu,silu,elu,tanh,mish' 'lr=1e-3,3e-3,1e-2,3e-2,1e-1' 'seed=range(20)')
MNIST1D=(model=cnn data=mnist1d batch_size=100 shuffle=true epochs=30 "device=$DEVICE")
DIGITS=(model=cnn data=digits 'model.channels=[16,32]' 'model.kernel=[3,3]' 'model.stride=[1,1]'
        'model.padding=[1,1]' model.pool=max batch_size=64 shuffle=true epochs=30 "device=$DEVICE")

for task in mnist1d digits; do
  for norm in none batch; do
    [ -n "${ONLY:-}" ] && [ "$ONLY" != "cnn-$task-$norm" ] && continue
    if [ "$task" = mnist1d ]; then task_args=("${MNIST1D[@]}"); else task_args=("${DIGITS[@]}"); fi
    $ACTBENCH sweep --runs-dir "$RUNS" --name "cnn-$task-$norm" -q "${GRID[@]}" "${task_args[@]}" "model.norm=$norm"
  done
done
[ "${SWEEPS_ONLY:-0}" = 1 ] && exit 0

for task in mnist1d digits; do
  for norm in none batch; do
    sweep="$RUNS/cnn-$task-$norm"
    actbench compare "$sweep" --metric early_stop --loss test_acc --tune lr --tune-seeds 5 --tune-on val_acc \
        --baseline activation=relu --format markdown --output "$OUT/$task-$norm-test_acc.md"
    actbench compare "$sweep" --metric early_stop --loss test_loss --tune lr --tune-seeds 5 \
        --baseline activation=relu --format markdown --output "$OUT/$task-$norm-test_loss.md"
    python "$OUT/budget.py" "$sweep" "$OUT/$task-$norm-test_acc.md" > "$OUT/$task-$norm-budget.md"
  done
done
