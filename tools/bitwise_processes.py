"""A sweep member equals the same run alone, bit for bit, in every fresh process.

Runs the equivalence check of tests/test_sweep.py (5 activations x 2 data x 2 seeds x 2 learning
rates, default sizes, 25 epochs unless --epochs) in N fresh processes at the default thread count, one after
another: each process trains the grid's stacks first (so the process's first threaded erf/exp
calls are the stacked ones, as in a sweep) and then every member alone, and compares the losses of
every epoch bitwise. Prints the number of processes with a mismatch (the goal: 0) and, for each,
the first mismatching member and epoch.

`--without-fix` skips the engine's vector-math warm-up (activation_bench/engine/vml.py) in the
children: on a CPU where oneMKL's kernels of different accuracy round differently (some Intel Xeons
with AVX-512) about one process in 25-40 then shows a mismatch; where they agree (AMD EPYC, and the
AVX-512 Xeon of family 6 model 207 measured on 2026-12-02: 0 of 200) none does, with or without
the fix.

`--paired` trains the grid's stacks two at a time, in two threads, as a sweep pairs them
(activation_bench/runs/beside.py): each process's first threaded vector-math calls then come from
two stacks at once; the members are still compared with their runs alone.

`--engine compiled` checks the compiled engine's promise instead (docs/reproducibility.md): every
process trains the grid's stacks with engine=compiled (the inductor cache warmed by the first) and
prints a digest of every member's losses at every epoch; processes whose digest differs from the
first's are counted as mismatches.

Usage:
    nice -n 5 python -m tools.bitwise_processes [--processes 200] [--epochs 25] [--jobs 1] [--without-fix]
    python -m tools.bitwise_processes --paired --processes 200 --jobs 2 --epochs 2
    python -m tools.bitwise_processes --engine compiled --processes 20
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

GRID = ["activation=gelu,relu,prelu,stochastic_gelu,swiglu", "data=normal,uniform", "seed=0,1",
        "lr=0.01,0.03"]


def child(without_fix: bool, epochs: int, paired: bool = False) -> None:
    """One process's check; prints a JSON line {mismatches: [...], members: n, threads: t}."""
    import torch

    from activation_bench.config.compose import compose_many
    from activation_bench.config.grid import expand
    from activation_bench.engine import plan, train
    from activation_bench.runs import beside

    if without_fix:
        train.resolve_vml_kernels = lambda: None
    grid = expand([*GRID, f"epochs={epochs}"])
    cfgs = compose_many(grid.members)
    stacks = plan.plan_stacks(cfgs)
    # two at a time in two threads with --paired (the last alone where their number is odd), else one by one
    waves = [stacks[k:k + 2] for k in range(0, len(stacks), 2)] if paired else [[s] for s in stacks]
    stacked = {}
    for wave in waves:
        tasks = [lambda _cancel, s=s: train.train([cfgs[i] for i in s]) for s in wave]
        outcomes = beside.train_both(*tasks) if len(tasks) == 2 else [beside.Outcome(tasks[0](None))]
        for stack, out in zip(wave, outcomes):
            if out.error is not None:
                raise out.error
            for i, res in zip(stack, out.results):
                stacked[i] = res.train_loss
    bad = []
    for i, cfg in enumerate(cfgs):
        alone = train.train([cfg])[0].train_loss
        if alone != stacked[i]:
            epoch = next(e for e, (a, s) in enumerate(zip(alone, stacked[i])) if a != s)
            bad.append({"member": grid.labels[i], "epoch": epoch + 1, "alone": alone[epoch],
                        "stacked": stacked[i][epoch]})
    print(json.dumps({"mismatches": bad, "members": len(cfgs), "threads": torch.get_num_threads()}))


def compiled_child(epochs: int) -> None:
    """One process of --engine compiled; prints a JSON line {digest, engines, members, threads}."""
    import hashlib

    import torch

    from activation_bench.config.compose import compose_many
    from activation_bench.config.grid import expand
    from activation_bench.engine import plan, train

    cfgs = compose_many(expand([*GRID, f"epochs={epochs}", "engine=compiled"]).members)
    losses: dict[int, list[str]] = {}
    engines = set()
    for stack in plan.plan_stacks(cfgs):
        for i, res in zip(stack, train.train([cfgs[i] for i in stack])):
            losses[i] = [float(v).hex() for v in res.train_loss]
            engines.add(res.engine)
    digest = hashlib.sha256(json.dumps([losses[i] for i in range(len(cfgs))]).encode()).hexdigest()
    print(json.dumps({"digest": digest, "engines": sorted(engines), "members": len(cfgs),
                      "threads": torch.get_num_threads()}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--processes", type=int, default=200)
    ap.add_argument("--epochs", type=int, default=25, help="epochs per member (the test's 25)")
    ap.add_argument("--without-fix", action="store_true", help="skip the engine's VML warm-up in the children")
    ap.add_argument("--paired", action="store_true", help="train the stacks two at a time in two threads")
    ap.add_argument("--jobs", type=int, default=1, help="processes run at once (each at the default threads)")
    ap.add_argument("--engine", choices=("eager", "compiled"), default="eager",
                    help="compiled: the same bits from process to process, instead of stacked == alone")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        if args.engine == "compiled":
            compiled_child(args.epochs)
        else:
            child(args.without_fix, args.epochs, args.paired)
        return
    from benchmarks.provenance import header

    print(header())
    print(f"# load average at start: {os.getloadavg()[0]:.2f}; {args.processes} fresh processes, "
          f"{'WITHOUT' if args.without_fix else 'with'} the VML warm-up, {args.epochs} epochs"
          f"{', stacks two at a time in two threads' if args.paired else ''}")
    cmd = [sys.executable, "-m", "tools.bitwise_processes", "--child", "--epochs", str(args.epochs),
           "--engine", args.engine]
    cmd += ["--without-fix"] if args.without_fix else []
    cmd += ["--paired"] if args.paired else []
    failed, start = 0, time.perf_counter()
    reference: str | None = None
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        runs = pool.map(lambda _: subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT), range(args.processes))
        for k, out in enumerate(runs):
            if out.returncode != 0:
                sys.exit(f"process {k + 1} failed:\n{out.stderr[-2000:]}")
            result = json.loads(out.stdout.strip().splitlines()[-1])
            if args.engine == "compiled":
                reference = reference or result["digest"]
                if result["digest"] != reference:
                    failed += 1
                    print(f"process {k + 1}: losses differ from process 1's (engines {result['engines']})")
            elif result["mismatches"]:
                failed += 1
                first = result["mismatches"][0]
                print(f"process {k + 1}: {len(result['mismatches'])} of {result['members']} members differ; first "
                      f"{first['member']} at epoch {first['epoch']}: alone {first['alone']!r}, "
                      f"stacked {first['stacked']!r}")
            if (k + 1) % 20 == 0:
                print(f"{k + 1} processes, {failed} with a mismatch ({time.perf_counter() - start:.0f} s, "
                      f"{result['threads']} threads, load {os.getloadavg()[0]:.2f})", flush=True)
    print(f"mismatching processes: {failed} of {args.processes}; load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
