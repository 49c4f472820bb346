#!/usr/bin/env bash
# The GELU paper's MLP classification experiment (Hendrycks & Gimpel, section 3.1, Figure 2),
# redone with tuned learning rates and paired seeds (docs/gelu-paper-mlp.md).
#
#   bash docs/studies/gelu-mlp/study.sh [RUNS_DIR]     (default runs/gelu-mlp; SKIP_SWEEPS=1: tables only)
#
# The paper's network (8 hidden layers x 128), GELU, ReLU, ELU and SiLU, Adam, minibatches of 128,
# 50 epochs, dropout 0 and 0.5 after every hidden layer; the paper's learning rates {1e-5, 1e-4,
# 1e-3} widened by 3e-3, 1e-2, 3e-2 and 1e-1 (the last two in sweeps of their own, added when 1e-2
# came out at the edge of the first grid); 20 paired seeds: 0-4 tune each activation's lr per dropout
# setting, 5-19 judge. log.train_eval=true logs the training loss with dropout off, as the paper
# plots it. Re-running resumes the sweeps; the tables and figures go to this script's folder.
set -euo pipefail
RUNS=${1:-runs/gelu-mlp}
OUT=$(cd "$(dirname "$0")" && pwd)
ACTBENCH=${ACTBENCH:-actbench}
ACTS=('activation=gelu,relu,elu,silu' 'seed=range(20)')
REST=('model.dropout=0,0.5' model.depth=8 model.hidden_dim=128 model.init=lecun batch_size=128 shuffle=true
      epochs=50 log.train_eval=true)

if [ -z "${SKIP_SWEEPS:-}" ]; then
for task in mnist1d digits; do  # (the overrides in this order: a sweep resumes only the same command)
    $ACTBENCH sweep -q --runs-dir "$RUNS" --name "$task" "${ACTS[@]}" 'lr=1e-5,1e-4,1e-3,3e-3,1e-2' "${REST[@]}" \
        "data=$task"
    $ACTBENCH sweep -q --runs-dir "$RUNS" --name "$task-hi" "${ACTS[@]}" 'lr=3e-2,1e-1' "${REST[@]}" "data=$task"
done
fi

python "$OUT/tables.py" "$RUNS" "$OUT"
