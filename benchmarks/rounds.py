"""Interleaved rounds of a whole `actbench sweep` process against a plain PyTorch loop's worker
process, as the throughput benchmarks measure them: each round times the sweep, then the loop, so a
shared machine's load falls on both; the ratio is the median over rounds of model-steps per second."""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable


def timed(cmd: list[str]) -> tuple[float, str]:
    """(wall seconds, stdout) of one process."""
    start = time.perf_counter()
    done = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return time.perf_counter() - start, done.stdout


def sweep_vs_plain(sweep_cmd: Callable[[str], list[str]], worker: list[str], sweep_steps: int, repeat: int,
                   plain_label: str, sweep_walls: list[float] | None = None) -> float:
    """Print a line per path and round and the median ratio; return it. `sweep_cmd(runs_dir)` is the
    sweep's command line; the worker prints its model-steps as the last word of its output. Each
    sweep process's wall time is appended to `sweep_walls` where given."""
    print(f"{'round':6s} {'path':36s} {'model-steps':>12s} {'seconds':>9s} {'steps/s':>10s} {'x plain':>8s}")
    ratios = []
    keep = tempfile.mkdtemp(prefix="actbench-bench-")  # kept until the end (see sweep_throughput.py)
    try:
        for r in range(1, repeat + 1):
            wall, _ = timed(sweep_cmd(os.path.join(keep, f"round{r}")))
            if sweep_walls is not None:
                sweep_walls.append(wall)
            p_wall, out = timed(worker)
            p_steps = int(out.split()[-1])
            rate, base = sweep_steps / wall, p_steps / p_wall
            ratios.append(rate / base)
            print(f"{r:<6d} {'actbench sweep (whole process)':36s} {sweep_steps:12d} {wall:9.2f} {rate:10.0f} "
                  f"{rate / base:8.1f}")
            print(f"{r:<6d} {plain_label:36s} {p_steps:12d} {p_wall:9.2f} {base:10.0f} {1.0:8.1f}")
    finally:
        shutil.rmtree(keep)
    rounds = ", ".join(f"{x:.1f}" for x in ratios)
    median = statistics.median(ratios)
    print(f"actbench / plain = {median:.1f}x (median of {len(ratios)} rounds: {rounds}); "
          f"load average at end {os.getloadavg()[0]:.2f}")
    return median
