"""compare speed: whole `actbench compare` processes against a bare `pandas.read_csv` process.

Uses rank_speed.py's long-format results.csv of about 1,000,000 rows (27 activations x 2 data x
2 targets x 10 seeds x 926 epochs, columns activation,data,data.target,seed,run,epoch,train_loss as
`actbench sweep` writes them) in a temporary directory, then times, each as a fresh Python process
(start-up and imports included), in interleaved rounds:

- read_csv: `python -c "import pandas; pandas.read_csv(path)"`;
- compare: `actbench compare path --format csv` (group statistics, paired t and Wilcoxon tests
  against the default baseline).

Prints each round and the median of the rounds' ratios (the goal: at most 1.5x read_csv).
The actbench processes run this checkout (`python -m activation_bench.cli`). Usage:
    python benchmarks/compare_speed.py [--seeds 10] [--epochs 926] [--rounds 5] [--metric final]
"""

from __future__ import annotations

import sys
import tempfile

from provenance import header  # benchmarks/ is on sys.path when a script there runs
from rank_speed import arguments, interleaved, results_table


def main() -> None:
    ap = arguments()
    ap.add_argument("--metric", default="final")
    args = ap.parse_args()
    print(header())

    with tempfile.TemporaryDirectory() as tmp:
        path = results_table(tmp, args.seeds, args.epochs)
        cli = [sys.executable, "-m", "activation_bench.cli", "compare", path, "--metric", args.metric, "-f", "csv"]
        cmds = {
            "read_csv": [sys.executable, "-c", f"import pandas; pandas.read_csv({path!r})"],
            "compare": cli,
        }
        interleaved(cmds, args.rounds)


if __name__ == "__main__":
    main()
