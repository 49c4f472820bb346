"""actbench against the fastest things a user could write instead, as whole processes, interleaved.

Grid: 8 activations x 2 data x 30 seeds (480 members, 64-64-1 MLP, 10 samples, Adam lr 1e-3,
each member's loss kept every epoch), at 1000 and 3000 epochs. Each path is a fresh process timed
whole, start-up and imports included:

- default: `actbench sweep ...` with no engine flag (engine=auto), each round from an empty cache
  (its own ACTBENCH_CACHE_DIR): no compiled step saved, so every stack trains eager; it also
  validates every member's config and writes 480 run directories and results.csv;
- default-warm: the same command, no flag, with the compile store warm (filled by one
  `engine=compiled` sweep of the same shapes before the rounds; that cold run's time is printed):
  auto finds each stack's compiled step saved and trains compiled;
- eager, compiled: the same sweep with `engine=eager`, and with `engine=compiled` (store warm);
- jax: benchmarks/peers/jax_peer.py (vmap over members, optax.adam, all epochs in one
  jax.jit-compiled lax.scan; compilation included; writes nothing);
- torch.func: benchmarks/peers/torchfunc_peer.py (stack_module_state + vmap(functional_call) +
  torch.optim.Adam per activation; writes nothing);
- naive: the seed notebook's loop (one model at a time), in this process on a sample of members
  (its rate in model-steps/s; the whole grid would take minutes).

Each round runs every path at every epoch count in turn, so a slow spell of a shared machine
hits all of them. Printed: each run; the whole-process ratios at each epoch count; and each
path's marginal training rate, (model-steps at the last count - at the first) / (seconds at the
last - at the first), which leaves out start-up, compilation and fixed costs. Ratios above 1 mean
actbench is faster. `python benchmarks/peers/jax_peer.py --check` (and torchfunc_peer.py) show
the peers compute what actbench computes.

Usage:
    python benchmarks/peer_throughput.py [--seeds 30] [--epochs 1000 3000] [--repeat 1]
    python benchmarks/peer_throughput.py --small      # a smoke test: 2 seeds, 20 and 60 epochs
    python benchmarks/peer_throughput.py --paths default,jax --threads 1 --cpu-time   # on a busy machine
    python benchmarks/peer_throughput.py --paths default,default-warm,jax --epochs 1000 3000 --repeat 3
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sweep_throughput import ACTBENCH, ACTS, DATA, naive

PEERS = Path(__file__).resolve().parent / "peers"
PATHS = ("default", "default-warm", "eager", "compiled", "jax", "torch.func", "naive")
OURS = ("default", "default-warm", "eager", "compiled")  # actbench's paths; the others are peers
WARM = ("default-warm", "compiled")  # the paths that read the warmed compile store


def whole_process(path: str, root: str, seeds: int, epochs: int, cpu_time: bool = False) -> float:
    """The process's wall seconds, or with cpu_time its user + system CPU seconds (with one thread
    per path, what it would take on an idle core: a busy machine's scheduler does not inflate it,
    but time spent waiting for the disk is left out). The default path gets an empty cache folder
    of its own (beside `root`); the others share the one ACTBENCH_CACHE_DIR names."""
    env = dict(os.environ)
    if path in OURS:
        engine = {"eager": ["engine=eager"], "compiled": ["engine=compiled"]}.get(path, [])
        cmd = [*ACTBENCH, "sweep", "--runs-dir", root, "-q", f"activation={','.join(ACTS)}",
               f"data={','.join(DATA)}", f"seed=range({seeds})", f"epochs={epochs}", *engine]
        if path == "default":
            env["ACTBENCH_CACHE_DIR"] = tempfile.mkdtemp(prefix="empty-cache-", dir=os.path.dirname(root))
    else:
        script = "jax_peer.py" if path == "jax" else "torchfunc_peer.py"
        cmd = [sys.executable, str(PEERS / script), "--seeds", str(seeds), "--epochs", str(epochs)]
    start, used = time.perf_counter(), children_cpu()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env)
    return children_cpu() - used if cpu_time else time.perf_counter() - start


def children_cpu() -> float:
    """The user + system CPU seconds of this process's finished children."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=30)
    ap.add_argument("--epochs", type=int, nargs="+", default=[1000, 3000])
    ap.add_argument("--repeat", type=int, default=1, help="interleaved rounds; ratios are the rounds' medians")
    ap.add_argument("--paths", default=",".join(PATHS), help=f"comma list of {', '.join(PATHS)}")
    ap.add_argument("--naive-epochs", type=int, default=200, help="epochs per naive sample member")
    ap.add_argument("--small", action="store_true", help="smoke test: 2 seeds, 20 and 60 epochs")
    ap.add_argument("--threads", type=int, default=0,
                    help="threads for every path (OMP/MKL and XLA's CPU); 0: each library's default. One "
                    "thread each is the steadier comparison on a machine shared with other work")
    ap.add_argument("--cpu-time", action="store_true",
                    help="time each process by its CPU time (with --threads 1 on a busy machine)")
    args = ap.parse_args()
    if args.cpu_time and args.threads != 1:
        ap.error("--cpu-time needs --threads 1 (with more threads CPU time adds the threads' times up)")
    if args.threads:
        os.environ.update(OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads),
                          XLA_FLAGS=f"--xla_cpu_multi_thread_eigen={str(args.threads > 1).lower()} "
                          f"intra_op_parallelism_threads={args.threads}")
    if args.small:
        args.seeds, args.epochs, args.naive_epochs = 2, [20, 60], 20
    paths = [p for p in args.paths.split(",") if p]
    if "jax" in paths and importlib.util.find_spec("jax") is None:
        print("jax is not installed (pip install -e '.[bench]'): the jax peer is skipped")
        paths.remove("jax")
    members = len(ACTS) * len(DATA) * args.seeds
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)  # the naive loop, in this process
    from provenance import compile_bytecode, header  # benchmarks/ is on sys.path when a script there runs

    print(header())
    compile_bytecode()
    print(f"torch {torch.__version__}, {os.cpu_count()} cores, threads {args.threads or 'default'}; "
          f"{members} members; epochs {args.epochs}")
    print(f"{'round':6s} {'path':12s} {'epochs':>7s} {'CPU s' if args.cpu_time else 'seconds':>9s} "
          f"{'model-steps/s':>14s}; load average {os.getloadavg()[0]:.2f}")
    times: dict[tuple[str, int], list[float]] = {}
    rates: list[float] = []
    if "naive" in paths:
        naive(ACTS, DATA, 2, "cpu")  # warm-up: one-time imports (torch.optim pulls in torch._dynamo)
    # every round's run directories are kept until the end (see sweep_throughput.py: deleting
    # thousands of files slows the next round's file creation on this VM's ext4)
    keep = tempfile.mkdtemp(prefix="actbench-peers-")
    # the compiled engine's inductor cache: its own folder, empty, filled by one cold sweep
    os.environ["ACTBENCH_CACHE_DIR"] = os.path.join(keep, "cache")
    os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
    try:
        if any(p in WARM for p in paths):
            cold = whole_process("compiled", os.path.join(keep, "cold"), args.seeds, args.epochs[0], args.cpu_time)
            print(f"{'cold':6s} {'compiled':12s} {args.epochs[0]:7d} {cold:9.2f} "
                  f"{members * args.epochs[0] / cold:14.0f}  (empty inductor cache: compiles every stack)", flush=True)
        for r in range(1, args.repeat + 1):
            for epochs in args.epochs:
                for path in paths:
                    if path == "naive":
                        steps, wall = naive(ACTS, DATA, args.naive_epochs, "cpu")
                        rates.append(steps / wall)
                        print(f"{r:<6d} {'naive':12s} {args.naive_epochs:7d} {wall:9.2f} {steps / wall:14.0f}")
                        continue
                    root = os.path.join(keep, f"r{r}-{epochs}-{path}")  # no path resumes another's sweep
                    wall = whole_process(path, root, args.seeds, epochs, args.cpu_time)
                    times.setdefault((path, epochs), []).append(wall)
                    print(f"{r:<6d} {path:12s} {epochs:7d} {wall:9.2f} {members * epochs / wall:14.0f}", flush=True)
    finally:
        shutil.rmtree(keep)
    report(times, rates, paths, args.epochs, members)
    print(f"load average at end {os.getloadavg()[0]:.2f}")


def report(times: dict, rates: list[float], paths: list[str], epochs: list[int], members: int) -> None:
    first, last = epochs[0], epochs[-1]
    med = {k: statistics.median(v) for k, v in times.items()}
    ours = [p for p in OURS if p in paths]
    others = [p for p in paths if p not in (*OURS, "naive")]
    for e in dict.fromkeys(epochs):  # each epoch count (the targets name 1000 and 3000)
        for a in ours:
            for p in others:
                rounds = [o / t for o, t in zip(times[(p, e)], times[(a, e)])]
                print(f"whole process at {e} epochs: {p} / {a} = {statistics.median(rounds):.2f}x "
                      f"(rounds: {', '.join(f'{x:.2f}' for x in rounds)}; above 1: {a} faster)")
    if rates:
        naive_rate = statistics.median(rates)
        for a in ours:
            print(f"whole process at {first} epochs: {a} / naive = "
                  f"{members * first / med[(a, first)] / naive_rate:.1f}x (naive {naive_rate:.0f} steps/s)")
    if last == first or not ours:
        return
    grew = {p: med[(p, last)] - med[(p, first)] for p in [*ours, *others]}
    if min(grew.values()) <= 0:
        print(f"marginal training rate: n/a (a path took no longer at {last} epochs than at {first})")
        return
    marginal = {p: members * (last - first) / grew[p] for p in grew}
    for p in grew:
        print(f"marginal training rate {first}->{last} epochs: {p} {marginal[p]:.0f} model-steps/s")
    for a in ours:
        for p in others:
            print(f"marginal training rate: {a} / {p} = {marginal[a] / marginal[p]:.2f}x")

if __name__ == "__main__":
    main()
