"""Real-data throughput: `actbench sweep` on data=diabetes with shuffled minibatches, against the
naive loop, measured in one run.

Grid: 8 activations x 30 seeds x 200 epochs on data=diabetes (266 training rows, 88 validation,
88 test; 10 features), batch_size=32, shuffle=true: 240 runs, 9 minibatch steps an epoch, 432,000
model steps, with the validation and test losses evaluated every epoch.

- actbench: the real command, `actbench sweep ...` in a fresh process, timed whole (start-up,
  imports, reading and splitting the table, composing, training, writing 240 run directories and
  results.csv), with each engine of --engines (default eager,compiled; the compiled engine's
  inductor cache is its own folder, filled by one cold sweep before the rounds, whose time is
  printed).
- naive: the same runs done one model at a time: the seed's split and standardisation, an
  nn.Sequential, torch.optim.Adam, a shuffled torch DataLoader over the training rows, and the
  validation and test losses every epoch (what early stopping needs). It is timed on a sample of
  members (one per activation by default), which gives its steps per second.

actbench and the naive sample run in interleaved rounds (--repeat); the ratio reported is the
median of the rounds' ratios of model steps per second. Each round also runs each engine's sweep at
a fifth of the epochs; the last lines give the other epochs' training FLOPs per second against
torch.bmm's rate at the stack's own shapes (benchmarks/roofline.py).

Usage:
    python benchmarks/real_data_throughput.py [--epochs 200] [--seeds 30] [--repeat 3]
    python benchmarks/real_data_throughput.py --quick      # a smoke run: 4 seeds, 20 epochs, 1 round
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

from peer_throughput import children_cpu  # benchmarks/ is on sys.path when a script there runs

ACTS = ["gelu", "relu", "silu", "elu", "tanh", "mish", "leaky_relu", "softplus"]
BATCH = 32
ACTBENCH = (shutil.which("actbench") or f"{sys.executable} -m activation_bench.cli").split()


CLOCK = time.perf_counter  # time.process_time with --cpu-time


def naive(acts: list[str], seed: int, epochs: int) -> tuple[int, float]:
    """One model at a time, a shuffled DataLoader; returns (model steps, seconds)."""
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    from activation_bench.config.compose import compose
    from activation_bench.data import splits
    from activation_bench.engine.activations.registry import create

    start = CLOCK()
    cfg = compose(["data=diabetes", f"seed={seed}"])
    s = splits.split_arrays(cfg)
    x, y = torch.tensor(s.x, dtype=torch.float32), torch.tensor(s.y[:, None], dtype=torch.float32)
    xv, yv = torch.tensor(s.x_val, dtype=torch.float32), torch.tensor(s.y_val[:, None], dtype=torch.float32)
    xt, yt = torch.tensor(s.x_test, dtype=torch.float32), torch.tensor(s.y_test[:, None], dtype=torch.float32)
    steps = 0
    for a in acts:
        torch.manual_seed(seed)
        model = nn.Sequential(nn.Linear(x.shape[1], 64), create(a), nn.Linear(64, 1))
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        loader = DataLoader(TensorDataset(x, y), batch_size=BATCH, shuffle=True)
        crit = nn.MSELoss()
        history = []
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
                history.append((loss.item(), crit(model(xv), yv).item(), crit(model(xt), yt).item()))
    return steps, CLOCK() - start


def actbench_sweep(root: str, seeds: int, epochs: int, engine: str = "eager") -> tuple[int, float]:
    """(model steps, the process's wall seconds, or its CPU seconds with --cpu-time)."""
    cmd = [*ACTBENCH, "sweep", "--runs-dir", root, "-q", f"activation={','.join(ACTS)}", f"seed=range({seeds})",
           "data=diabetes", f"batch_size={BATCH}", "shuffle=true", f"epochs={epochs}", f"engine={engine}"]
    start, used = time.perf_counter(), children_cpu()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    took = children_cpu() - used if CLOCK is time.process_time else time.perf_counter() - start
    steps_per_epoch = -(-266 // BATCH)
    return len(ACTS) * seeds * epochs * steps_per_epoch, took



def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--epochs", type=int, default=200)
    ap.add_argument("--seeds", type=int, default=30)
    ap.add_argument("--repeat", type=int, default=3, help="interleaved rounds; the ratio is their median")
    ap.add_argument("--engines", default="eager,compiled", help="actbench's engines to time (comma list)")
    ap.add_argument("--quick", action="store_true", help="a smoke run: 4 seeds, 20 epochs, 1 round")
    ap.add_argument("--cpu-time", action="store_true", help="one thread for both paths, timed by CPU time (a busy "
                    "machine's scheduler does not inflate it)")
    args = ap.parse_args()
    global CLOCK
    if args.cpu_time:
        CLOCK = time.process_time
        os.environ.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    if args.quick:
        args.seeds, args.epochs, args.repeat = 4, 20, 1
    import torch

    if args.cpu_time:
        torch.set_num_threads(1)
    from provenance import compile_bytecode, header  # benchmarks/ is on sys.path when a script there runs

    print(header())
    compile_bytecode()
    print(f"load average {os.getloadavg()[0]:.2f}; {'CPU' if args.cpu_time else 'wall'} time")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} cores; "
          f"{len(ACTS)} activations x {args.seeds} seeds x {args.epochs} epochs, data=diabetes, "
          f"batch_size={BATCH}, shuffle=true")
    print(f"{'round':6s} {'path':34s} {'model-steps':>12s} {'seconds':>9s} {'steps/s':>10s} {'x naive':>8s}")
    naive(ACTS[:1], 0, 2)  # warm-up: one-time imports (torch.optim pulls in torch._dynamo), the table's first read
    engines = [e for e in args.engines.split(",") if e]
    ratios: dict[str, list[float]] = {e: [] for e in engines}
    short = max(1, args.epochs // 5)
    marginal: dict[str, list[float]] = {e: [] for e in engines}  # per round: wall at --epochs less at `short`
    keep = tempfile.mkdtemp(prefix="actbench-real-bench-")
    os.environ["ACTBENCH_CACHE_DIR"] = os.path.join(keep, "cache")  # the compiled engine's, empty
    os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
    try:
        if "compiled" in engines:
            steps, wall = actbench_sweep(os.path.join(keep, "cold"), args.seeds, args.epochs, "compiled")
            print(f"{'cold':6s} {'actbench engine=compiled, cold cache':34s} {steps:12d} {wall:9.2f} "
                  f"{steps / wall:10.0f}")
        for r in range(1, args.repeat + 1):
            n_steps, n_wall = naive(ACTS, r, args.epochs)
            base = n_steps / n_wall
            for engine in engines:
                steps, wall = actbench_sweep(os.path.join(keep, f"round{r}-{engine}"), args.seeds, args.epochs, engine)
                rate = steps / wall
                ratios[engine].append(rate / base)
                marginal[engine].append(wall - actbench_sweep(os.path.join(keep, f"short{r}-{engine}"), args.seeds,
                                                              short, engine)[1])
                print(f"{r:<6d} {'actbench engine=' + engine:34s} {steps:12d} {wall:9.2f} {rate:10.0f} "
                      f"{rate / base:8.1f}", flush=True)
            print(f"{r:<6d} {'naive, DataLoader (sample)':34s} {n_steps:12d} {n_wall:9.2f} {base:10.0f} {1.0:8.1f}")
    finally:
        shutil.rmtree(keep)
    for engine, rs in ratios.items():
        rounds = ", ".join(f"{x:.1f}" for x in rs)
        print(f"actbench engine={engine} / naive = {statistics.median(rs):.1f}x (median of {len(rs)} rounds: {rounds})")
    import roofline  # benchmarks/, beside this script

    grid = [f"activation={','.join(ACTS)}", f"seed=range({args.seeds})", "data=diabetes", f"batch_size={BATCH}",
            "shuffle=true"]
    stack = roofline.largest_stack(grid)
    ceiling = roofline.bmm_rate(stack, [10, 64], BATCH)  # the one output is a multiply and a sum, no bmm
    # an epoch's 9 batches cover the 266 training rows once (the last has 10): 6 x 266 x W an epoch
    flops = roofline.training_flops(len(ACTS) * args.seeds, [10, 64, 1], 266, args.epochs - short, 88 + 88,
                                    args.epochs - short)
    # 9 optimiser steps an epoch (266 rows in batches of 32)
    update = roofline.update_total(len(ACTS) * args.seeds, stack, [10, 64, 1], (args.epochs - short) * -(-266 // BATCH))
    for engine, ms in marginal.items():
        m = statistics.median(ms)
        print(f"actbench engine={engine}, marginal: {args.epochs - short} epochs in {m:.2f} s (median over rounds of "
              f"{args.epochs} less {short}); {roofline.line(flops, m, ceiling, update)}; bmm timed on stacks of "
              f"{stack}")
    print(f"load average at end {os.getloadavg()[0]:.2f}")

if __name__ == "__main__":
    main()
