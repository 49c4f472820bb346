#!/usr/bin/env bash
# The tuned real-data study (docs/real-data.md): GELU, ReLU, SiLU, ELU and tanh on every real table
# and every function task, each at every lr of a half-decade grid from 1e-4 to 3e-1, 26 paired seeds.
# Seeds 0-5 choose each activation's lr per task (lowest mean log10 of the best val_loss), seeds
# 6-25 judge it (test loss at the epoch of lowest val_loss); the same seeds at lr 1e-3 give the
# fixed-lr verdict beside it.
#
#   bash docs/studies/real-data/tuned_study.sh [RUNS_DIR]      (default runs/real-data-tuned; SKIP_SWEEPS=1: tables only)
#
# One thread per process (the numbers do not depend on the core count). Re-running resumes the
# sweeps; the tables and figures go to docs/studies/real-data/ (this script's folder).
set -euo pipefail
export OMP_NUM_THREADS=1
RUNS=${1:-runs/real-data-tuned}
OUT=$(cd "$(dirname "$0")" && pwd)
ACTBENCH=${ACTBENCH:-actbench}
ACTS='activation=gelu,relu,silu,elu,tanh'
SEEDS='seed=range(26)'
LRS='lr=1e-4,3e-4,1e-3,3e-3,1e-2,3e-2,1e-1,3e-1'

if [ -z "${SKIP_SWEEPS:-}" ]; then  # SKIP_SWEEPS=1: only the tables and figures from existing sweeps
# the small tables (266 and 182 training rows): minibatches of 32, 200 epochs
$ACTBENCH sweep -q --runs-dir "$RUNS" --name tables "$ACTS" "$SEEDS" "$LRS" 'data=diabetes,star98' \
    batch_size=32 shuffle=true epochs=200
# function fitting (1,000 training points): minibatches of 32, 60 epochs (1,920 Adam steps); six
# sweeps over parts of the grid, so they can run side by side (a member's numbers do not depend on
# which sweep or stack it trained in)
FNS='data.fn=exp_sin,xy,bessel_j0,exp_sin4,ellipkinc,ellipeinc,jv,iv,lpmv'
for part in 'lo lr=1e-4,3e-4,1e-3' '3e-3 lr=3e-3' '1e-2 lr=1e-2' '3e-2 lr=3e-2' '1e-1 lr=1e-1' '3e-1 lr=3e-1'; do
    # shellcheck disable=SC2086
    set -- $part
    $ACTBENCH sweep -q --runs-dir "$RUNS" --name "functions-$1" "$ACTS" "$SEEDS" "$2" data=function "$FNS" \
        batch_size=32 shuffle=true epochs=60
done
# the large table (12,114 training rows): minibatches of 256, 12 epochs (576 Adam steps)
$ACTBENCH sweep -q --runs-dir "$RUNS" --name randhie "$ACTS" "$SEEDS" "$LRS" data=randhie \
    batch_size=256 shuffle=true epochs=12
fi

# the tuned comparisons (markdown, csv, json), the same seeds at lr 1e-3, the sensitivity figures and
# the ranking across all tasks, each part loaded once (the equivalent actbench commands are listed
# at the top of tuned_tables.py)
python "$OUT/tuned_tables.py" compare "$RUNS" "$OUT"
python "$OUT/tuned_tables.py" summary "$RUNS" "$OUT" > "$OUT/summary.md"
