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
- jax: benchmarks.peers.jax_peer (vmap over members, optax.adam, all epochs in one
  jax.jit-compiled lax.scan; compilation included; writes nothing);
- torch.func: benchmarks.peers.torchfunc_peer (stack_module_state + vmap(functional_call) +
  torch.optim.Adam per activation; writes nothing);
- naive: the seed notebook's loop (one model at a time), in this process on a sample of members
  (its rate in model-steps/s; the whole grid would take minutes).

Each round runs every path at every epoch count in turn, so a slow spell of a shared machine
hits all of them. Printed: each run; the whole-process ratios at each epoch count; and each
path's marginal training rate, (model-steps at the last count - at the first) / (seconds at the
last - at the first), which leaves out start-up, compilation and fixed costs. Ratios above 1 mean
actbench is faster; goals: the default path from an empty cache >= 0.8x JAX, with the store warm
(default-warm, compiled) >= 1.0x. `python -m benchmarks.peers.jax_peer --check` (and torchfunc_peer)
show the peers compute what actbench computes.

Usage:
    python -m benchmarks.peer_throughput [--seeds 30] [--epochs 1000 3000] [--repeat 1]
    python -m benchmarks.peer_throughput --small      # a smoke test: 2 seeds, 20 and 60 epochs
    python -m benchmarks.peer_throughput --paths default,jax --threads 1 --cpu-time   # on a busy machine
    python -m benchmarks.peer_throughput --paths default,default-warm,jax --epochs 1000 3000 --repeat 3
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import statistics
import tempfile

from benchmarks import harness, provenance
from benchmarks.peers.grid import ACTS, DATA
from benchmarks.plain import naive

PATHS = ("default", "default-warm", "eager", "compiled", "jax", "torch.func", "naive")
OURS = ("default", "default-warm", "eager", "compiled")  # actbench's paths; the others are peers
WARM = ("default-warm", "compiled")  # the paths that read the warmed compile store
PEERS = {"jax": "benchmarks.peers.jax_peer", "torch.func": "benchmarks.peers.torchfunc_peer"}
GOALS = {("jax", "default"): ">= 0.8", ("jax", "default-warm"): ">= 1.0", ("jax", "compiled"): ">= 1.0"}


def whole_process(path: str, root: str, seeds: int, epochs: int, cpu_time: bool = False) -> float:
    """The process's wall seconds, or with cpu_time its CPU seconds (harness.run). The default path
    gets an empty cache folder of its own (beside `root`); the others share the one
    ACTBENCH_CACHE_DIR names."""
    env = dict(os.environ)
    if path in OURS:
        engine = {"eager": ["engine=eager"], "compiled": ["engine=compiled"]}.get(path, [])
        cmd = [*provenance.actbench(), "sweep", "--runs-dir", root, "-q", f"activation={','.join(ACTS)}",
               f"data={','.join(DATA)}", f"seed=range({seeds})", f"epochs={epochs}", *engine]
        if path == "default":
            env["ACTBENCH_CACHE_DIR"] = tempfile.mkdtemp(prefix="empty-cache-", dir=os.path.dirname(root))
    else:
        cmd = [*provenance.module(PEERS[path]), "--seeds", str(seeds), "--epochs", str(epochs)]
    return harness.run(cmd, env=env, cpu_time=cpu_time).seconds


def options() -> argparse.ArgumentParser:
    ap = harness.parser(__doc__)
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
    return ap


def main() -> None:
    ap = options()
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
    bench = harness.Bench(args, compile_bytecode=True)
    print(f"torch {torch.__version__}, {os.cpu_count()} cores, threads {args.threads or 'default'}; "
          f"{members} members; epochs {args.epochs}; {'CPU' if args.cpu_time else 'wall'} seconds")
    if "naive" in paths:
        naive(ACTS, DATA, 2)  # warm-up: one-time imports (torch.optim pulls in torch._dynamo)
    # every round's run directories are kept until the end (see sweep_throughput.py: deleting
    # thousands of files slows the next round's file creation on this VM's ext4)
    keep = tempfile.mkdtemp(prefix="actbench-peers-")
    # the compiled engine's store: its own folder, empty, filled by one cold sweep
    os.environ["ACTBENCH_CACHE_DIR"] = os.path.join(keep, "cache")
    os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)

    def path_of(path: str, epochs: int):  # noqa: ANN202
        if path == "naive":
            return lambda r: harness.clock(naive, ACTS, DATA, args.naive_epochs, cpu_time=args.cpu_time)[0]
        # no path resumes another's sweep
        return lambda r: whole_process(path, os.path.join(keep, f"r{r}-{epochs}-{path}"), args.seeds, epochs,
                                       args.cpu_time)

    rounds = {f"{p} {e}": path_of(p, e) for e in args.epochs for p in paths if p != "naive"}
    if "naive" in paths:
        rounds["naive"] = path_of("naive", 0)
    try:
        if any(p in WARM for p in paths):
            cold = whole_process("compiled", os.path.join(keep, "cold"), args.seeds, args.epochs[0], args.cpu_time)
            print(f"cold compiled sweep at {args.epochs[0]} epochs (empty store: compiles every stack): {cold:.2f} s",
                  flush=True)
            bench.note(cold_compiled_seconds=cold)
        times = harness.interleaved(rounds, args.repeat)
    finally:
        shutil.rmtree(keep)
    report(bench, times, paths, args.epochs, members, len(ACTS) * len(DATA) * args.naive_epochs)
    bench.finish(times)


def report(bench: harness.Bench, times: dict[str, list[float]], paths: list[str], epochs: list[int], members: int,
           naive_steps: int) -> None:
    """The figures: each peer over each of our paths at each epoch count, each of ours over the naive
    loop, and the marginal training rates between the first and last epoch counts."""
    ours = [p for p in OURS if p in paths]
    others = [p for p in paths if p not in (*OURS, "naive")]
    for e in dict.fromkeys(epochs):  # each epoch count (the targets name 1000 and 3000)
        for a in ours:
            for p in others:
                bench.figure(f"{p} / {a}, whole process at {e} epochs",
                             harness.ratios(times[f"{p} {e}"], times[f"{a} {e}"]), goal=GOALS.get((p, a)))
    if "naive" in times:
        naive_rates = [naive_steps / s for s in times["naive"]]
        for a in ours:
            rates = [members * epochs[0] / s for s in times[f"{a} {epochs[0]}"]]
            bench.figure(f"{a} / naive, model-steps/s at {epochs[0]} epochs",
                         harness.ratios(rates, naive_rates), digits=1)
    first, last = epochs[0], epochs[-1]
    if last == first or not ours:
        return
    med = {k: statistics.median(v) for k, v in times.items()}
    grew = {p: med[f"{p} {last}"] - med[f"{p} {first}"] for p in [*ours, *others]}
    if min(grew.values()) <= 0:
        print(f"marginal training rate: n/a (a path took no longer at {last} epochs than at {first})")
        return
    marginal = {p: members * (last - first) / grew[p] for p in grew}
    for p in grew:
        print(f"marginal training rate {first}->{last} epochs: {p} {marginal[p]:.0f} model-steps/s")
    bench.note(marginal_model_steps_per_second=marginal)
    for a in ours:
        for p in others:
            bench.figure(f"marginal rate {first}->{last} epochs, {a} / {p}", [marginal[a] / marginal[p]])


if __name__ == "__main__":
    main()
