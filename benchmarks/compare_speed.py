"""compare speed: the full `actbench compare` computation against `pandas.read_csv` of the same file.

Generates a long-format results.csv of about 1,000,000 rows (8 activations x 2 data x 60 seeds x
1042 epochs = 1,000,320 rows, columns activation,data,seed,run,epoch,train_loss as `actbench sweep`
writes them) in a temporary directory, then times (best of --repeat):

- read_csv: `pandas.read_csv(path)` alone;
- compare: load + metric per run + group statistics + paired comparisons vs a baseline (no rendering).

Prints both and their ratio (the goal: compare costs at most about 2x read_csv). Usage:
    python benchmarks/compare_speed.py [--seeds 60] [--epochs 1042] [--repeat 3] [--metric final]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np

ACTS = ["gelu", "relu", "silu", "elu", "tanh", "mish", "leaky_relu", "softplus"]
DATA = ["normal", "uniform"]


def write_results(path: str, seeds: int, epochs: int) -> int:
    """A sweep-style results.csv with decaying, floor-hitting losses; returns the number of rows."""
    rng = np.random.default_rng(0)
    ep = np.arange(1, epochs + 1)
    rows = 0
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("activation,data,seed,run,epoch,train_loss\n")
        i = 0
        for act in ACTS:
            for data in DATA:
                for seed in range(seeds):
                    run = f"{i:04d}_activation={act}_data={data}_seed={seed}"
                    rate = rng.uniform(0.01, 0.04)
                    loss = np.maximum(np.exp(-rate * ep) * rng.uniform(0.5, 1.5), 1e-14 * rng.uniform(0.5, 2))
                    prefix = f"{act},{data},{seed},{run},"
                    fh.write("".join(f"{prefix}{e},{v!r}\n" for e, v in zip(ep.tolist(), loss.tolist())))
                    rows += epochs
                    i += 1
    return rows


def best_of(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=60)
    ap.add_argument("--epochs", type=int, default=1042)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--metric", default="final")
    args = ap.parse_args()

    import pandas as pd
    from provenance import header  # benchmarks/ is on sys.path when a script there runs

    from activation_bench import compare as cmp

    print(header())

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "results.csv")
        t0 = time.perf_counter()
        rows = write_results(path, args.seeds, args.epochs)
        size = os.path.getsize(path) / 1e6
        print(f"generated {rows:,} rows ({size:.0f} MB) in {time.perf_counter() - t0:.1f} s")

        t_read = best_of(lambda: pd.read_csv(path), args.repeat)

        def full() -> None:
            res = cmp.compare(cmp.load([path]), args.metric, None, "activation=relu")
            assert len(res.table) == len(ACTS) * len(DATA)

        t_cmp = best_of(full, args.repeat)
        print(f"pandas.read_csv          {t_read:7.3f} s")
        print(f"compare ({args.metric:>6}) total  {t_cmp:7.3f} s")
        print(f"ratio compare/read_csv   {t_cmp / t_read:7.2f}x  (goal: <= 2x)")


if __name__ == "__main__":
    main()
