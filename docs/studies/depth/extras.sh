#!/usr/bin/env bash
# What the depth study files cannot express; run from the repository root after the study file:
#
#   bash docs/studies/depth/extras.sh synthetic   after study.yaml: depth-tables.md, depth-grads-{4,8}.png
#   bash docs/studies/depth/extras.sh real        after real.yaml:  depth-real-{diabetes,exp_sin}-tables.md
#   bash docs/studies/depth/extras.sh tuned       after tuned.yaml: tuned-tables.md
#
# depth_tables.py and tuned_tables.py print per-cell pivots (ranks, chosen lrs, dead and saturated
# units from summary.json, early-stopping epochs, pre-activation statistics from preact.csv) that no
# compare or rank writes; the gradient-norm figures are `actbench plot --grads` over the member
# folders of one depth, a glob of members that a study figure has no key for. RUNS=runs by default
# (the study files' runs_dir).
set -euo pipefail
RUNS=${RUNS:-runs}
HERE=docs/studies/depth
export OMP_NUM_THREADS=1
case "${1:-}" in
  synthetic)
    python "$HERE/depth_tables.py" "$RUNS/depth-study" > "$HERE/depth-tables.md"
    actbench plot --grads "$RUNS"/depth-study/*_model.depth=8_* --output "$HERE/depth-grads-8.png"
    actbench plot --grads "$RUNS"/depth-study/*_model.depth=4_* --output "$HERE/depth-grads-4.png"
    # modest file sizes for the repository: 256-colour palette PNGs
    python -c "
import sys
from PIL import Image
for p in sys.argv[1:]:
    Image.open(p).convert('RGB').quantize(256).save(p, optimize=True)
" "$HERE/depth-grads-8.png" "$HERE/depth-grads-4.png"
    ;;
  real)
    for task in diabetes exp_sin; do
      python "$HERE/depth_tables.py" "$RUNS/depth-real-$task" --real > "$HERE/depth-real-$task-tables.md"
    done
    ;;
  tuned)
    python "$HERE/tuned_tables.py" "$RUNS/depth-tuned" > "$HERE/tuned-tables.md"
    ;;
  *)
    sed -n '2,12p' "$0" >&2
    exit 2
    ;;
esac
