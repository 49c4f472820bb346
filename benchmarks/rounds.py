"""Interleaved rounds of a whole `actbench sweep` process against a plain PyTorch loop's worker
process, as the throughput benchmarks measure them: each round times the sweep, then the loop, so a
shared machine's load falls on both; the ratio is the median over rounds of model-steps per second."""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from roofline import Roof


def timed(cmd: list[str]) -> tuple[float, str]:
    """(wall seconds, stdout) of one process."""
    start = time.perf_counter()
    done = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return time.perf_counter() - start, done.stdout


def sweep_vs_plain(sweep_cmd: Callable[[str], list[str]], worker: list[str], sweep_steps: int, repeat: int,
                   plain_label: str, sweep_walls: list[float] | None = None,
                   short_cmd: Callable[[str], list[str]] | None = None,
                   short_walls: list[float] | None = None, around_sweeps: Callable[[], None] | None = None) -> float:
    """Print a line per path and round and the median ratio; return it. `sweep_cmd(runs_dir)` is the
    sweep's command line; the worker prints its model-steps as the last word of its output. Each
    sweep process's wall time is appended to `sweep_walls` where given. With `short_cmd` (the same
    sweep with fewer epochs) each round also times that, into `short_walls`: the difference is the
    marginal time of the extra epochs (roofline.py); `around_sweeps` is called right before and right
    after each round's sweeps (to time the ceiling in the same minutes)."""
    print(f"{'round':6s} {'path':36s} {'model-steps':>12s} {'seconds':>9s} {'steps/s':>10s} {'x plain':>8s}")
    ratios = []
    keep = tempfile.mkdtemp(prefix="actbench-bench-")  # kept until the end (see sweep_throughput.py)
    try:
        if short_cmd is not None:  # untimed: fills inductor's cache (engine=compiled), so no timed run compiles cold
            timed(short_cmd(os.path.join(keep, "warm-up")))
        for r in range(1, repeat + 1):
            if around_sweeps is not None:
                around_sweeps()
            wall, _ = timed(sweep_cmd(os.path.join(keep, f"round{r}")))
            if sweep_walls is not None:
                sweep_walls.append(wall)
            if short_cmd is not None and short_walls is not None:
                short_walls.append(timed(short_cmd(os.path.join(keep, f"short{r}")))[0])
            if around_sweeps is not None:
                around_sweeps()
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


def fit_classifier(model, x, y, evals, epochs: int, batch: int, lr: float) -> int:  # noqa: ANN001
    """The loop a user would write for one classifier: torch.optim.Adam, nn.CrossEntropyLoss, a
    shuffled DataLoader over (x, y), and after each epoch the loss and accuracy on each (x, y) of
    `evals`. Returns the optimiser steps taken."""
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    opt = torch.optim.Adam(model.parameters(), lr=lr)
    loader = DataLoader(TensorDataset(x, y), batch_size=batch, shuffle=True)
    crit = nn.CrossEntropyLoss()
    steps, history = 0, []
    for _ in range(epochs):
        model.train()
        for xb, yb in loader:
            opt.zero_grad()
            loss = crit(model(xb), yb)
            loss.backward()
            opt.step()
            steps += 1
        model.eval()
        with torch.no_grad():
            row = [loss.item()]
            for ex, ey in evals:
                out = model(ex)
                row += [crit(out, ey).item(), (out.argmax(1) == ey).float().mean().item()]
            history.append(row)
    return steps


def mnist1d_sweep_vs_plain(doc: str, script: str, plain: Callable[[int, int], int], acts: list[str], batch: int,
                           overrides: list[str], what: str, epochs: int, plain_seeds: int,
                           quick: tuple[int, int, int], roof: Roof | None = None) -> argparse.Namespace | None:
    """The command line of an MNIST-1D benchmark script (--epochs, --seeds, --plain-seeds, --repeat,
    --quick: (seeds, epochs, plain seeds) in one round), its plain-loop worker (`plain(seeds,
    epochs)` in a fresh process of `script`), and the interleaved rounds of `actbench sweep` (the
    activations x seeds with `overrides`) against it. With `roof` (a roofline.Roof: a member's
    FLOPs, products and parameters) each round also times the sweep at a fifth of the epochs, and
    the end prints the marginal training rate against torch.bmm's at these shapes and the products
    + Adam roof (roofline.py). Returns the arguments, or None in the worker."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--epochs", type=int, default=epochs)
    ap.add_argument("--seeds", type=int, default=30)
    ap.add_argument("--plain-seeds", type=int, default=plain_seeds,
                    help="seeds of every activation the plain loop runs")
    ap.add_argument("--repeat", type=int, default=3, help="interleaved rounds; the ratio is their median")
    ap.add_argument("--quick", action="store_true", help="a smoke run: a few seeds and epochs, 1 round")
    ap.add_argument("--engine", default="eager", help="actbench's engine= (eager, compiled, auto)")
    ap.add_argument("--jobs", type=int, default=1,
                    help="with N > 1 the sweep runs as N processes (--launcher joblib --jobs N), each with "
                         "cores / N threads")
    ap.add_argument("--plain-worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.plain_worker:
        print(plain(args.plain_seeds, args.epochs))
        return None
    if args.quick:
        (args.seeds, args.epochs, args.plain_seeds), args.repeat = quick, 1
    import torch
    from provenance import compile_bytecode, header

    from activation_bench.config.compose import compose
    from activation_bench.data import splits

    data = splits.split_arrays(compose(["data=mnist1d"]))  # fills the per-machine MNIST-1D cache before timing
    print(header())
    compile_bytecode()
    print(f"load average {os.getloadavg()[0]:.2f}; wall time of whole processes")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} cores; {len(acts)} "
          f"activations x {args.seeds} seeds x {args.epochs} epochs, {what}, engine={args.engine}, "
          f"{args.jobs} sweep process{'es' if args.jobs > 1 else ''}")
    sweep_steps = len(acts) * args.seeds * args.epochs * -(-3200 // batch)
    worker = [sys.executable, script, "--plain-worker", "--plain-seeds", str(args.plain_seeds),
              "--epochs", str(args.epochs)]
    actbench = (shutil.which("actbench") or f"{sys.executable} -m activation_bench.cli").split()

    def grid(epochs: int = args.epochs) -> list[str]:
        return [f"activation={','.join(acts)}", f"seed=range({args.seeds})", "data=mnist1d", f"batch_size={batch}",
                "shuffle=true", f"epochs={epochs}", f"engine={args.engine}", *overrides]

    def sweep_cmd(runs: str, epochs: int = args.epochs) -> list[str]:
        jobs = ["--launcher", "joblib", "--jobs", str(args.jobs)] if args.jobs > 1 else []
        return [*actbench, "sweep", "--runs-dir", runs, "-q", *jobs, *grid(epochs)]

    args.sweep_steps = sweep_steps
    short = max(1, args.epochs // 5)
    walls: list[float] = []
    shorts: list[float] = []
    import roofline  # benchmarks/, beside this script

    stack = roofline.largest_stack(grid()) if roof else 0
    # timed right before and right after each round's sweeps. This VM's bmm rate at two threads moves
    # between about 145 and 85 GFLOP/s from one minute to the next while the training does not
    # follow it, so a fraction against the ceiling of its own minute says as much about the minute:
    # every round is judged against the best rate timed in the run, what this machine did reach
    ceilings: list[float] = []
    updates: list[float] = []  # torch's fused Adam on one stack, one step, timed beside each ceiling

    def ceiling() -> None:
        ceilings.append(roofline.products_rate(stack, roof.products))
        updates.append(roofline.adam_seconds(stack, roof.params))

    ratio = sweep_vs_plain(sweep_cmd, worker, sweep_steps, args.repeat, "plain loop, DataLoader (sample)", walls,
                           (lambda runs: sweep_cmd(runs, short)) if roof else None, shorts,
                           ceiling if roof else None)
    if roof:
        n, n_eval = len(data.x), len(data.x_val) + len(data.x_test)
        extra = args.epochs - short
        steps = extra * -(-n // batch)
        flops = roof.flops(len(acts) * args.seeds, steps, extra * n_eval)
        margins = [w - s for w, s in zip(walls, shorts)]
        best = max(ceilings)
        fractions = [flops / m / 1e9 / best for m in margins]
        marginal = statistics.median(margins)
        update = min(updates) * steps * len(acts) * args.seeds / stack
        pairs = ", ".join(f"{a:.0f}/{b:.0f}" for a, b in zip(ceilings[::2], ceilings[1::2]))
        print(f"per round: marginal {', '.join(f'{m:.2f}' for m in margins)} s; bmm before/after the sweeps "
              f"{pairs} GFLOP/s; fraction of the best {', '.join(f'{f:.2f}' for f in fractions)}")
        print(f"marginal: {extra} epochs in {marginal:.2f} s (median over rounds of {args.epochs} less {short} "
              f"epochs); actbench / plain = {ratio:.1f}x; {roofline.line(flops, marginal, best, update)}; bmm "
              f"timed on stacks of {stack} before and after each round (the best of them); load average "
              f"{os.getloadavg()[0]:.2f}")
    return args
