#!/usr/bin/env bash
# Regenerates every number and figure in docs/depth.md (run from the repository root).
# Grid: depth 1, 2, 4, 8 x gelu, relu, tanh, sigmoid, selu, silu x init torch_default, auto x 30 seeds
# = 1,440 runs on synthetic teacher data; about 10 minutes on a 2-core CPU.
set -euo pipefail
RUNS=${RUNS:-runs}
# One thread per process: on a small shared machine, OpenMP's threads wait on each other when the
# cores are busy (20x slower here at these sizes); results are bit-identical at a fixed thread count.
export OMP_NUM_THREADS=1
ACT="python -m activation_bench.cli"
TASK=(data.target=teacher data.input_dim=16 data.n_samples=64 data.n_val=256 data.noise=0.1
      model.hidden_dim=32 epochs=300 lr=0.001 log.grad_norms=true log.every=10)

$ACT sweep --runs-dir "$RUNS" --name depth-study -q \
    'model.depth=1,2,4,8' 'activation=gelu,relu,tanh,sigmoid,selu,silu' 'model.init=torch_default,auto' \
    'seed=range(30)' "${TASK[@]}"

# paired tables: every activation against relu at the same depth, init and seed
for metric in final best; do
  $ACT compare "$RUNS/depth-study" --loss val_loss --metric "$metric" --baseline activation=relu \
      --format markdown --output "docs/studies/depth/depth-$metric-val.md"
done
# the pivots, ranks and dead/saturated units quoted in docs/depth.md
python docs/studies/depth/depth_tables.py "$RUNS/depth-study" > docs/studies/depth/depth-tables.md
# gradient norms per layer at depth 8, and loss curves
$ACT plot --grads "$RUNS"/depth-study/*_model.depth=8_* --output docs/studies/depth/depth-grads-8.png
$ACT plot --grads "$RUNS"/depth-study/*_model.depth=4_* --output docs/studies/depth/depth-grads-4.png
$ACT plot "$RUNS/depth-study" --by model.depth,model.init --loss val_loss --output docs/studies/depth/depth-val-curves.png
# modest file sizes for the repository: 256-colour palette PNGs
python -c "
import sys
from PIL import Image
for p in sys.argv[1:]:
    Image.open(p).convert('RGB').quantize(256).save(p, optimize=True)
" docs/studies/depth/depth-grads-8.png docs/studies/depth/depth-grads-4.png docs/studies/depth/depth-val-curves.png
