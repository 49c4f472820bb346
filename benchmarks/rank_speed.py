"""rank and compare --power speed: whole processes against a bare `pandas.read_csv` process.

Generates a long-format results.csv of about 1,000,000 rows in a temporary directory (27 activations
x 2 data x 2 targets x 10 seeds x 926 epochs = 1,000,080 rows, columns activation,data,data.target,
seed,run,epoch,train_loss as `actbench sweep` writes them), then times, each as a fresh Python
process (start-up and imports included), in interleaved rounds:

- read_csv: `python -c "import pandas; pandas.read_csv(path)"`;
- rank: `actbench rank path` (rich table to a pipe);
- compare --power: `actbench compare path --power 1.05` (rich table to a pipe).

Prints each round and the median of the rounds' ratios (the goal: each at most 1.5x read_csv).
The actbench processes run this checkout (`python -m activation_bench.cli`). Usage:
    python benchmarks/rank_speed.py [--seeds 10] [--epochs 926] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
ACTS = sorted(p.stem for p in (ROOT / "configs" / "activation").glob("*.yaml") if p.stem != "custom")
DATA = ["normal", "uniform"]
TARGETS = ["random", "teacher"]


def write_results(path: str, seeds: int, epochs: int, axis: tuple[str, list[str]] = ("data.target", TARGETS)) -> int:
    """A sweep-style results.csv with decaying, floor-hitting losses over activation x data x `axis`
    (a key and its values: data.target by default) x seed; returns the number of rows."""
    key, values = axis
    rng = np.random.default_rng(0)
    ep = np.arange(1, epochs + 1)
    rows = i = 0
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(f"activation,data,{key},seed,run,epoch,train_loss\n")
        for act in ACTS:
            skill = rng.uniform(0.01, 0.03)
            for data in DATA:
                for target in values:
                    for seed in range(seeds):
                        run = f"{i:04d}_activation={act}_data={data}_{key}={target}_seed={seed}"
                        rate = skill * rng.uniform(0.7, 1.3)
                        loss = np.maximum(np.exp(-rate * ep) * rng.uniform(0.5, 1.5), 1e-14 * rng.uniform(0.5, 2))
                        prefix = f"{act},{data},{target},{seed},{run},"
                        fh.write("".join(f"{prefix}{e},{v!r}\n" for e, v in zip(ep.tolist(), loss.tolist())))
                        rows += epochs
                        i += 1
    return rows


def timed(cmd: list[str]) -> float:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, env=env, cwd=ROOT)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"failed ({done.returncode}): {' '.join(cmd)}\n{done.stderr.decode()}")
    return elapsed


def interleaved(cmds: dict[str, list[str]], rounds: int, goal: float = 1.5) -> dict[str, float]:
    """Times every command once per round, in turn; prints each round and the median ratio of each
    command to the first one (the baseline) over the rounds, and returns those medians."""
    names = list(cmds)
    timed(cmds[names[0]])  # warm the page cache and the interpreter's files, untimed
    ratios: dict[str, list[float]] = {name: [] for name in names[1:]}
    for r in range(rounds):
        t = {name: timed(cmd) for name, cmd in cmds.items()}
        for name in ratios:
            ratios[name].append(t[name] / t[names[0]])
        print(f"round {r + 1}: " + ", ".join(f"{name} {sec:.2f} s" for name, sec in t.items()) + "; "
              + ", ".join(f"{name}/{names[0]} {ratios[name][-1]:.2f}x" for name in ratios))
    for name, values in ratios.items():
        print(f"median {name}/{names[0]}: {statistics.median(values):.2f}x "
              f"(rounds {min(values):.2f}-{max(values):.2f}x; goal <= {goal:g}x)")
    return {name: statistics.median(values) for name, values in ratios.items()}


def arguments() -> argparse.ArgumentParser:
    """The options every results-table benchmark takes (the script's own are added to it)."""
    ap = argparse.ArgumentParser(description=sys.modules["__main__"].__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--epochs", type=int, default=926)
    ap.add_argument("--rounds", type=int, default=5)
    return ap


def results_table(folder: str, seeds: int, epochs: int, axis: tuple[str, list[str]] = ("data.target", TARGETS)) -> str:
    """Write write_results' table into folder, print its size and the time taken; returns its path."""
    path = os.path.join(folder, "results.csv")
    t0 = time.perf_counter()
    rows = write_results(path, seeds, epochs, axis)
    print(f"generated {rows:,} rows ({os.path.getsize(path) / 1e6:.0f} MB, {len(ACTS)} activations x "
          f"{len(DATA) * len(axis[1])} tasks x {seeds} seeds) in {time.perf_counter() - t0:.1f} s")
    return path


def main() -> None:
    args = arguments().parse_args()
    from provenance import header  # benchmarks/ is on sys.path when a script there runs

    print(header())
    with tempfile.TemporaryDirectory() as tmp:
        path = results_table(tmp, args.seeds, args.epochs)
        py = sys.executable
        cmds = {
            "read_csv": [py, "-c", f"import pandas; pandas.read_csv({path!r})"],
            "rank": [py, "-m", "activation_bench.cli", "rank", path],
            "compare --power": [py, "-m", "activation_bench.cli", "compare", path, "--power", "1.05"],
        }
        interleaved(cmds, args.rounds)


if __name__ == "__main__":
    main()
