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

import argparse
import os
import sys
import tempfile
import time

from provenance import header  # benchmarks/ is on sys.path when a script there runs
from rank_speed import interleaved, write_results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--epochs", type=int, default=926)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--metric", default="final")
    args = ap.parse_args()
    print(header())

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "results.csv")
        t0 = time.perf_counter()
        rows = write_results(path, args.seeds, args.epochs)
        print(f"generated {rows:,} rows ({os.path.getsize(path) / 1e6:.0f} MB) in {time.perf_counter() - t0:.1f} s")
        cli = [sys.executable, "-m", "activation_bench.cli", "compare", path, "--metric", args.metric, "-f", "csv"]
        cmds = {
            "read_csv": [sys.executable, "-c", f"import pandas; pandas.read_csv({path!r})"],
            "compare": cli,
        }
        interleaved(cmds, args.rounds)


if __name__ == "__main__":
    main()
