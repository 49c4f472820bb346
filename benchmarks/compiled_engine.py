"""engine=compiled against engine=eager: whole `actbench sweep` processes, cold and warm cache.

The grid of sweep_throughput.py (8 activations x 2 data x --seeds seeds, 64-64-1 MLP, 10 samples),
or with --grid another set of activations on the same data, at each --epochs, as whole processes
writing every run: compiled with an empty inductor cache (cold: every stack graph compiled); then
--repeat rounds of eager and compiled with the cache that run left (warm: what a user sees from
the second run on), interleaved. Prints wall seconds (and with --cpu-time the children's CPU
seconds), model-steps per second, each round's eager / warm compiled ratio and their median, and
between the first and last epoch counts the marginal training rate of eager and warm compiled
(medians of the rounds). The `engine ...` lines of each compiled run are counted.

Grids (--grid): peer (the sweep benchmark's 8 activations), prelu (a learned slope beside gelu,
relu, tanh), rrelu and stochastic_gelu (random draws, the same three beside), custom (a user's
module: four torch modules as activation._target_, each its own stacks).

Usage:
    python benchmarks/compiled_engine.py [--grid peer] [--seeds 30] [--epochs 1000 3000] [--repeat 1]
                                         [--threads 1] [--cpu-time]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from peer_throughput import children_cpu  # noqa: E402
from provenance import compile_bytecode, header  # noqa: E402
from sweep_throughput import ACTBENCH, ACTS, DATA  # noqa: E402

# each grid's activation overrides and its activations' count
GRIDS = {
    "peer": ([f"activation={','.join(ACTS)}"], len(ACTS)),
    "prelu": (["activation=prelu,gelu,relu,tanh"], 4),
    "rrelu": (["activation=rrelu,gelu,relu,tanh"], 4),
    "stochastic_gelu": (["activation=stochastic_gelu,gelu,relu,tanh"], 4),
    "custom": (["activation=custom",
                "activation._target_=torch.nn.SiLU,torch.nn.Hardswish,torch.nn.Softsign,torch.nn.Tanh"], 4),
}


def sweep(root: str, cache: str, grid: str, seeds: int, epochs: int, engine: str,
          threads: int) -> tuple[float, float, str]:
    """(wall s, CPU s, the engine lines) of one whole `actbench sweep` process."""
    env = {**os.environ, "ACTBENCH_CACHE_DIR": cache}
    env.pop("TORCHINDUCTOR_CACHE_DIR", None)
    if threads:
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    cmd = [*ACTBENCH, "sweep", "--runs-dir", root, "-q", *GRIDS[grid][0], f"data={','.join(DATA)}",
           f"seed=range({seeds})", f"epochs={epochs}", f"engine={engine}"]
    start, used = time.perf_counter(), children_cpu()
    done = subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    lines = [ln for ln in done.stderr.splitlines() if ln.startswith("engine ")]
    engines = sorted({ln.split()[1] for ln in lines})
    return time.perf_counter() - start, children_cpu() - used, f"{len(lines)} stacks: {'/'.join(engines) or '-'}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--grid", choices=sorted(GRIDS), default="peer")
    ap.add_argument("--seeds", type=int, default=30)
    ap.add_argument("--epochs", type=int, nargs="+", default=[1000, 3000])
    ap.add_argument("--repeat", type=int, default=1, help="interleaved rounds of eager and warm compiled")
    ap.add_argument("--threads", type=int, default=0, help="OMP/MKL threads; 0: torch's default")
    ap.add_argument("--cpu-time", action="store_true", help="also print the processes' CPU seconds")
    args = ap.parse_args()
    members = GRIDS[args.grid][1] * len(DATA) * args.seeds
    print(header())
    compile_bytecode()
    print(f"load average {os.getloadavg()[0]:.2f}; grid {args.grid}, {members} members; "
          f"threads {args.threads or 'default'}", flush=True)
    work = Path(tempfile.mkdtemp(prefix="actbench-compiled-"))
    rows: dict[tuple[str, int], list[float]] = {}
    try:
        for epochs in args.epochs:
            cache = str(work / f"cache-{epochs}")
            plan = [("compiled, cold cache", "compiled")]
            rounds = (("eager", "eager"), ("compiled, warm cache", "compiled"))
            plan += [run for _ in range(args.repeat) for run in rounds]
            for label, engine in plan:
                root = str(work / f"runs-{epochs}-{sum(map(len, rows.values()))}")
                wall, cpu, engines = sweep(root, cache, args.grid, args.seeds, epochs, engine, args.threads)
                shutil.rmtree(root, ignore_errors=True)
                rows.setdefault((label, epochs), []).append(cpu if args.cpu_time else wall)
                extra = f", CPU {cpu:.2f} s" if args.cpu_time else ""
                print(f"{epochs:6d} epochs  {label:22s} wall {wall:7.2f} s{extra}  "
                      f"{members * epochs / wall:10,.0f} model-steps/s  ({engines})", flush=True)
            ratios = [e / c for e, c in zip(rows[("eager", epochs)], rows[("compiled, warm cache", epochs)])]
            print(f"{epochs:6d} epochs  eager / warm compiled = {statistics.median(ratios):.2f}x "
                  f"(rounds: {', '.join(f'{r:.2f}' for r in ratios)})", flush=True)
        lo, hi = min(args.epochs), max(args.epochs)
        if hi > lo:
            unit = "CPU" if args.cpu_time else "wall"
            for label in ("eager", "compiled, warm cache"):
                grown = statistics.median(rows[(label, hi)]) - statistics.median(rows[(label, lo)])
                print(f"marginal rate {lo} -> {hi} epochs, {label}: {members * (hi - lo) / grown:,.0f} "
                      f"model-steps/s ({unit} time, medians of the rounds)")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"load average at end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
