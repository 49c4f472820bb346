"""report speed: `actbench report` on a 480-member sweep against `actbench compare --format json`.

Trains the sweep 8 activations x 2 data x 30 seeds x 1000 epochs (480 members, 480,000 rows in
results.csv) with `actbench sweep` into a temporary directory (or reads --sweep DIR), then times,
each as a fresh process and interleaved over --repeat rounds:

- compare: `actbench compare SWEEP --format json` (the baseline: load and statistics, no torch);
- report --no-shapes: the page without the activation shapes (no torch);
- report: the whole page, torch imported for the shapes section.

Prints each command's median wall time and its ratio to compare's. Usage:
    python benchmarks/report_speed.py [--repeat 3] [--sweep runs/existing-sweep]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ACTS = "gelu,relu,silu,elu,tanh,mish,leaky_relu,softplus"
CLI = [sys.executable, "-m", "activation_bench.cli"]


def timed(args: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--sweep", type=Path, default=None, help="an existing sweep directory (default: train one)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        sweep = args.sweep
        if sweep is None:
            sweep = Path(tmp) / "runs" / "speed"
            subprocess.run([*CLI, "sweep", f"activation={ACTS}", "data=normal,uniform", "seed=range(30)",
                            "epochs=1000", "--name", "speed", "--runs-dir", str(Path(tmp) / "runs")],
                           check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        members = sum(1 for d in sweep.iterdir() if d.is_dir() and not d.name.startswith("."))
        out = Path(tmp) / "report.html"
        commands = {
            "compare --format json": [*CLI, "compare", str(sweep), "--format", "json"],
            "report --no-shapes": [*CLI, "report", str(sweep), "-o", str(out), "--no-shapes"],
            "report": [*CLI, "report", str(sweep), "-o", str(out)],
        }
        times: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(args.repeat):
            for name, cmd in commands.items():
                times[name].append(timed(cmd))
        size = out.stat().st_size
    base = statistics.median(times["compare --format json"])
    print(f"{members} members; report.html {size / 1e6:.2f} MB; medians of {args.repeat} interleaved rounds")
    for name, ts in times.items():
        med = statistics.median(ts)
        rounds = ", ".join(f"{t:.2f}" for t in ts)
        print(f"{name:24s} {med:6.2f} s  ({med / base:4.2f}x compare)  rounds: {rounds}")


if __name__ == "__main__":
    main()
