"""engine=compiled against engine=eager: whole `actbench sweep` processes, cold and warm cache.

The grid of sweep_throughput (8 activations x 2 data x --seeds seeds, 64-64-1 MLP, 10 samples),
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
    python -m benchmarks.compiled_engine [--grid peer] [--seeds 30] [--epochs 1000 3000] [--repeat 1]
                                         [--threads 1] [--cpu-time]
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
from pathlib import Path

from benchmarks import harness, provenance
from benchmarks.peers.grid import ACTS, DATA

# each grid's activation overrides and its activations' count
GRIDS = {
    "peer": ([f"activation={','.join(ACTS)}"], len(ACTS)),
    "prelu": (["activation=prelu,gelu,relu,tanh"], 4),
    "rrelu": (["activation=rrelu,gelu,relu,tanh"], 4),
    "stochastic_gelu": (["activation=stochastic_gelu,gelu,relu,tanh"], 4),
    "custom": (["activation=custom",
                "activation._target_=torch.nn.SiLU,torch.nn.Hardswish,torch.nn.Softsign,torch.nn.Tanh"], 4),
}


def sweep(root: str, cache: str, grid: str, seeds: int, epochs: int, engine: str, threads: int,
          cpu_time: bool) -> float:
    """The seconds of one whole `actbench sweep` process (wall, or CPU with cpu_time); prints them
    with the process's `engine ...` lines counted."""
    env = {**os.environ, "ACTBENCH_CACHE_DIR": cache}
    env.pop("TORCHINDUCTOR_CACHE_DIR", None)
    if threads:
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    cmd = [*provenance.actbench(), "sweep", "--runs-dir", root, "-q", *GRIDS[grid][0], f"data={','.join(DATA)}",
           f"seed=range({seeds})", f"epochs={epochs}", f"engine={engine}"]
    timed = harness.run(cmd, env=env, cpu_time=cpu_time)
    shutil.rmtree(root, ignore_errors=True)
    lines = [ln for ln in timed.stderr.splitlines() if ln.startswith("engine ")]
    engines = sorted({ln.split()[1] for ln in lines})
    print(f"  {epochs} epochs, engine={engine}: CPU {timed.cpu:.2f} s "
          f"({len(lines)} stacks: {'/'.join(engines) or '-'})")
    return timed.seconds


def main() -> None:
    ap = harness.parser(__doc__)
    ap.add_argument("--grid", choices=sorted(GRIDS), default="peer")
    ap.add_argument("--seeds", type=int, default=30)
    ap.add_argument("--epochs", type=int, nargs="+", default=[1000, 3000])
    ap.add_argument("--repeat", type=int, default=1, help="interleaved rounds of eager and warm compiled")
    ap.add_argument("--threads", type=int, default=0, help="OMP/MKL threads; 0: torch's default")
    ap.add_argument("--cpu-time", action="store_true", help="time the processes by their CPU seconds")
    args = ap.parse_args()
    members = GRIDS[args.grid][1] * len(DATA) * args.seeds
    bench = harness.Bench(args, compile_bytecode=True)
    print(f"grid {args.grid}, {members} members; threads {args.threads or 'default'}", flush=True)
    work = Path(tempfile.mkdtemp(prefix="actbench-compiled-"))
    times: dict[str, list[float]] = {}
    try:
        for epochs in args.epochs:
            cache = str(work / f"cache-{epochs}")

            def path(engine: str, epochs: int = epochs, cache: str = cache):  # noqa: ANN202
                return lambda r: sweep(str(work / f"runs-{epochs}-{engine}-{r}"), cache, args.grid, args.seeds,
                                       epochs, engine, args.threads, args.cpu_time)

            cold = times[f"compiled, cold store, {epochs} epochs"] = [path("compiled")(0)]
            print(f"compiled from an empty store (compiles every stack), {epochs} epochs {cold[0]:.2f} s", flush=True)
            times.update(harness.interleaved({f"eager, {epochs} epochs": path("eager"),
                                              f"compiled, warm store, {epochs} epochs": path("compiled")},
                                             args.repeat))
            bench.figure(f"eager / warm compiled, whole process at {epochs} epochs",
                         harness.ratios(times[f"eager, {epochs} epochs"],
                                        times[f"compiled, warm store, {epochs} epochs"]))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    lo, hi = min(args.epochs), max(args.epochs)
    if hi > lo:
        rates = {}
        for label in ("eager", "compiled, warm store"):
            grown = (statistics.median(times[f"{label}, {hi} epochs"])
                     - statistics.median(times[f"{label}, {lo} epochs"]))
            rates[label] = members * (hi - lo) / grown
            print(f"marginal rate {lo} -> {hi} epochs, {label}: {rates[label]:,.0f} model-steps/s (medians)")
        bench.note(marginal_model_steps_per_second=rates)
    bench.finish(times)


if __name__ == "__main__":
    main()
