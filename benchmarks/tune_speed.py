"""compare --tune speed: a whole `actbench compare --tune lr` process against a plain `actbench compare`.

The results.csv of compare_speed (about 1,000,000 rows: 27 activations x 2 data x 2 x 10 seeds x
926 epochs, as `actbench sweep` writes them) with an `lr` column (0.001, 0.01) in place of
`data.target`, in a temporary directory. Times, each as a fresh Python process (start-up and imports
included), in interleaved rounds:

- compare: `actbench compare path -f csv` (groups activation x data x lr, paired tests vs the baseline);
- compare --tune lr: `actbench compare path --tune lr -f csv` (each activation x data at its best lr,
  chosen on seeds 0-3, statistics on seeds 4-9).

Prints each round and the median of the rounds' ratios (the goal: at most 1.2x plain compare).
Usage:
    python -m benchmarks.tune_speed [--seeds 10] [--epochs 926] [--rounds 5]
"""

from __future__ import annotations

import tempfile

from benchmarks import harness, provenance, tables

LRS = ["0.001", "0.01"]


def main() -> None:
    args = tables.options(__doc__).parse_args()
    bench = harness.Bench(args, compile_bytecode=True)
    with tempfile.TemporaryDirectory() as tmp:
        path = tables.results_table(tmp, args.seeds, args.epochs, ("lr", LRS))
        cli = [*provenance.actbench(), "compare", path, "-f", "csv"]
        times = tables.against_first(bench, {"compare": cli, "compare --tune lr": [*cli, "--tune", "lr"]},
                                     args.rounds, {"compare --tune lr": "<= 1.2"})
    bench.finish(times)


if __name__ == "__main__":
    main()
