"""rank and compare --power speed: whole processes against a bare `pandas.read_csv` process.

Generates a long-format results.csv of about 1,000,000 rows in a temporary directory (27 activations
x 2 data x 2 targets x 10 seeds x 926 epochs = 1,000,080 rows, columns activation,data,data.target,
seed,run,epoch,train_loss as `actbench sweep` writes them), then times, each as a fresh Python
process (start-up and imports included), in interleaved rounds:

- read_csv: `python -c "import pandas; pandas.read_csv(path)"`;
- rank: `actbench rank path` (rich table to a pipe);
- compare --power: `actbench compare path --power 1.05` (rich table to a pipe).

Prints each round and the median of the rounds' ratios (the goal: each at most 1.5x read_csv).
Usage:
    python -m benchmarks.rank_speed [--seeds 10] [--epochs 926] [--rounds 5]
"""

from __future__ import annotations

import sys
import tempfile

from benchmarks import harness, provenance, tables


def main() -> None:
    args = tables.options(__doc__).parse_args()
    bench = harness.Bench(args, compile_bytecode=True)
    with tempfile.TemporaryDirectory() as tmp:
        path = tables.results_table(tmp, args.seeds, args.epochs)
        cmds = {
            "read_csv": [sys.executable, "-c", f"import pandas; pandas.read_csv({path!r})"],
            "rank": [*provenance.actbench(), "rank", path],
            "compare --power": [*provenance.actbench(), "compare", path, "--power", "1.05"],
        }
        times = tables.against_first(bench, cmds, args.rounds, {"rank": "<= 1.5", "compare --power": "<= 1.5"})
    bench.finish(times)


if __name__ == "__main__":
    main()
