"""engine=compiled against engine=eager: whole `actbench sweep` processes, cold and warm cache.

The grid of sweep_throughput.py (8 activations x 2 data x --seeds seeds, 64-64-1 MLP, 10 samples),
at each --epochs, as whole processes writing every run: eager; compiled with an empty inductor
cache (cold: every stack graph compiled); compiled again with the cache that run left (warm: what
a user sees from the second run on). Prints wall seconds (and with --cpu-time the children's CPU
seconds), model-steps per second, and between the first and last epoch counts the marginal
training rate of eager and warm compiled. The `engine ...` lines of each compiled run are counted.

Usage:
    python benchmarks/compiled_engine.py [--seeds 30] [--epochs 1000 3000] [--threads 1] [--cpu-time]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from peer_throughput import children_cpu  # noqa: E402
from provenance import header  # noqa: E402
from sweep_throughput import ACTBENCH, ACTS, DATA  # noqa: E402


def sweep(root: str, cache: str, seeds: int, epochs: int, engine: str, threads: int) -> tuple[float, float, str]:
    """(wall s, CPU s, the engine lines) of one whole `actbench sweep` process."""
    env = {**os.environ, "ACTBENCH_CACHE_DIR": cache}
    env.pop("TORCHINDUCTOR_CACHE_DIR", None)
    if threads:
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    cmd = [*ACTBENCH, "sweep", "--runs-dir", root, "-q", f"activation={','.join(ACTS)}", f"data={','.join(DATA)}",
           f"seed=range({seeds})", f"epochs={epochs}", f"engine={engine}"]
    start, used = time.perf_counter(), children_cpu()
    done = subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    lines = [ln for ln in done.stderr.splitlines() if ln.startswith("engine ")]
    engines = sorted({ln.split()[1] for ln in lines})
    return time.perf_counter() - start, children_cpu() - used, f"{len(lines)} stacks: {'/'.join(engines) or '-'}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=30)
    ap.add_argument("--epochs", type=int, nargs="+", default=[1000, 3000])
    ap.add_argument("--threads", type=int, default=0, help="OMP/MKL threads; 0: torch's default")
    ap.add_argument("--cpu-time", action="store_true", help="also print the processes' CPU seconds")
    args = ap.parse_args()
    print(header())
    print(f"load average {os.getloadavg()[0]:.2f}; {len(ACTS) * len(DATA) * args.seeds} members; "
          f"threads {args.threads or 'default'}", flush=True)
    members = len(ACTS) * len(DATA) * args.seeds
    work = Path(tempfile.mkdtemp(prefix="actbench-compiled-"))
    rows: dict[tuple[str, int], float] = {}
    try:
        for epochs in args.epochs:
            cache = str(work / f"cache-{epochs}")
            for label, engine in (("eager", "eager"), ("compiled, cold cache", "compiled"),
                                  ("compiled, warm cache", "compiled")):
                root = str(work / f"runs-{epochs}-{len(rows)}")
                wall, cpu, engines = sweep(root, cache, args.seeds, epochs, engine, args.threads)
                shutil.rmtree(root, ignore_errors=True)
                rows[(label, epochs)] = cpu if args.cpu_time else wall
                extra = f", CPU {cpu:.2f} s" if args.cpu_time else ""
                print(f"{epochs:6d} epochs  {label:22s} wall {wall:7.2f} s{extra}  "
                      f"{members * epochs / wall:10,.0f} model-steps/s  ({engines})", flush=True)
        lo, hi = min(args.epochs), max(args.epochs)
        if hi > lo:
            unit = "CPU" if args.cpu_time else "wall"
            for label in ("eager", "compiled, warm cache"):
                rate = members * (hi - lo) / (rows[(label, hi)] - rows[(label, lo)])
                print(f"marginal rate {lo} -> {hi} epochs, {label}: {rate:,.0f} model-steps/s ({unit} time)")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"load average at end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
