"""Sweep throughput: `actbench sweep` against the seed notebook's way, measured in one run.

Grid: 8 activations x 2 data distributions x 30 seeds x 1000 epochs (480 runs, 480,000 model
steps; a step is one optimiser update of one 64-64-1 MLP on 10 samples).

- actbench: the real command, `actbench sweep ...` in a fresh process, timed whole (Python
  start-up, imports, composing, training, writing 480 run directories and results.csv).
- naive: the seed notebook's loop: one model at a time, a DataLoader, zero_grad/backward/step per
  batch. It runs ~1,400 steps/s here, so the whole grid would take minutes: it is timed on a
  sample of members (one per activation x data by default), which gives its steps per second.
- stacked by hand: a minimal hand-written stacked loop (weights [members, in, out], baddbmm,
  activations per slice, torch.optim.Adam(fused=True), each member's loss kept per epoch), timed
  twice: in this process (training alone), and as a script in a fresh process (imports included,
  nothing written), which is what the whole-process actbench figure compares with.

Shared and virtual machines speed up and slow down by tens of percent over minutes, so actbench
and the naive sample run in interleaved rounds (--repeat) and the ratio reported is the median
of the rounds' ratios.

Prints model-steps per second for each and the ratios, and actbench's marginal training rate (each
round also times the sweep at a fifth of the epochs; the difference) against torch.bmm's rate at the
stack's own shapes (benchmarks/roofline.py). Usage:
    python benchmarks/sweep_throughput.py [--epochs 1000] [--seeds 30] [--repeat 3] [--device cpu]
        [--engine compiled]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

import provenance  # benchmarks/ is on sys.path when a script there runs

ACTS = ["gelu", "relu", "silu", "elu", "tanh", "mish", "leaky_relu", "softplus"]
DATA = ["normal", "uniform"]


def naive(acts: list[str], data: list[str], epochs: int, device: str) -> tuple[int, float]:
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    from activation_bench.engine.activations.registry import create

    steps, start = 0, time.perf_counter()
    for d in data:
        for a in acts:
            torch.manual_seed(0)
            if d == "normal":
                x, y = torch.randn(10, 64), torch.randn(10, 1)
            else:
                x, y = torch.rand(10, 64) * 2 - 1, torch.rand(10, 1) * 2 - 1
            model = nn.Sequential(nn.Linear(64, 64), create(a), nn.Linear(64, 1)).to(device)
            opt = torch.optim.Adam(model.parameters(), lr=1e-3)
            loader = DataLoader(TensorDataset(x.to(device), y.to(device)), batch_size=10)
            crit = nn.MSELoss()
            for _ in range(epochs):
                for xb, yb in loader:
                    opt.zero_grad()
                    loss = crit(model(xb), yb)
                    loss.backward()
                    opt.step()
                    steps += 1
            if device == "cuda":
                torch.cuda.synchronize()
    return steps, time.perf_counter() - start


def stacked_by_hand(acts: list[str], data: list[str], seeds: int, epochs: int, device: str) -> tuple[int, float]:
    import torch

    from activation_bench.engine.activations.registry import create

    start = time.perf_counter()
    m = len(acts) * len(data) * seeds
    g = torch.Generator().manual_seed(0)
    x = torch.randn(m, 10, 64, generator=g).to(device)
    y = torch.randn(m, 10, 1, generator=g).to(device)
    w1 = (torch.rand(m, 64, 64, generator=g) * 0.25 - 0.125).to(device).requires_grad_()
    b1 = torch.zeros(m, 1, 64, device=device, requires_grad=True)
    w2 = (torch.rand(m, 64, 1, generator=g) * 0.25 - 0.125).to(device).requires_grad_()
    b2 = torch.zeros(m, 1, 1, device=device, requires_grad=True)
    mods = [create(a) for a in acts for _ in data]
    per = seeds
    opt = torch.optim.Adam([w1, b1, w2, b2], lr=1e-3, fused=True)
    losses = torch.empty(epochs, m, device=device)
    for epoch in range(epochs):
        opt.zero_grad()
        h = torch.baddbmm(b1, x, w1)
        a = torch.cat([mod(part) for mod, part in zip(mods, h.split(per))])
        out = torch.baddbmm(b2, a, w2)
        loss = (out - y).square().mean(dim=(1, 2))
        loss.sum().backward()
        opt.step()
        losses[epoch] = loss.detach()
    losses.tolist()  # the table a script would go on to save
    if device == "cuda":
        torch.cuda.synchronize()
    return m * epochs, time.perf_counter() - start


def stacked_by_hand_process(seeds: int, epochs: int, device: str) -> tuple[int, float]:
    """The hand-written loop as a script of its own: a fresh Python process, timed whole."""
    cmd = [sys.executable, __file__, "--hand-only", "--seeds", str(seeds), "--epochs", str(epochs),
           "--device", device]
    start = time.perf_counter()
    subprocess.run(cmd, check=True)
    return len(ACTS) * len(DATA) * seeds * epochs, time.perf_counter() - start


def grid(acts: list[str], data: list[str], seeds: int, epochs: int, device: str, engine: str = "eager") -> list[str]:
    return [f"activation={','.join(acts)}", f"data={','.join(data)}", f"seed=range({seeds})", f"epochs={epochs}",
            f"device={device}", f"engine={engine}"]


def actbench_sweep(root: str, acts: list[str], data: list[str], seeds: int, epochs: int,
                   device: str, engine: str = "eager") -> tuple[int, float]:
    cmd = [*ACTBENCH, "sweep", "--runs-dir", root, "-q", *grid(acts, data, seeds, epochs, device, engine)]
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return len(acts) * len(data) * seeds * epochs, time.perf_counter() - start


ACTBENCH = provenance.actbench()


def _round(r: int, root: str, args: argparse.Namespace, ratios: list[float], ours: list[float],
           naives: list[float], marginal: list[float]) -> None:
    # interleaved, so a slow spell of a shared machine hits both sides of a round's ratio
    steps, wall = actbench_sweep(root, ACTS, DATA, args.seeds, args.epochs, args.device, args.engine)
    marginal.append(wall - actbench_sweep(root + "-short", ACTS, DATA, args.seeds, _short(args), args.device,
                                          args.engine)[1])
    n_steps, n_wall = naive(ACTS, DATA, args.naive_epochs or args.epochs, args.device)
    base, rate = n_steps / n_wall, steps / wall
    ratios.append(rate / base), ours.append(rate), naives.append(base)
    print(f"{r:<6d} {'actbench sweep (whole process)':34s} {steps:12d} {wall:9.2f} {rate:10.0f} {rate / base:8.1f}")
    print(f"{r:<6d} {'naive, as the seed (sample)':34s} {n_steps:12d} {n_wall:9.2f} {base:10.0f} {1.0:8.1f}")


def _short(args: argparse.Namespace) -> int:
    """The epochs of the shorter sweep each round also times (the marginal time is the difference)."""
    return max(1, args.epochs // 5)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--epochs", type=int, default=1000)
    ap.add_argument("--seeds", type=int, default=30)
    ap.add_argument("--naive-epochs", type=int, default=None, help="epochs per naive sample run (default --epochs)")
    ap.add_argument("--repeat", type=int, default=3,
                    help="rounds of (actbench, naive), interleaved; the ratio is the median of the rounds'")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--engine", default="eager", help="actbench's engine= (eager, compiled, auto)")
    ap.add_argument("--hand-only", action="store_true", help=argparse.SUPPRESS)  # the child process
    args = ap.parse_args()
    if args.hand_only:
        stacked_by_hand(ACTS, DATA, args.seeds, args.epochs, args.device)
        return
    import statistics

    import torch

    print(provenance.header())
    provenance.compile_bytecode()
    gpu = f" ({torch.cuda.get_device_name()})" if args.device == "cuda" and torch.cuda.is_available() else ""
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} cores, "
          f"device {args.device}{gpu}")
    print(f"{'round':6s} {'path':34s} {'model-steps':>12s} {'seconds':>9s} {'steps/s':>10s} {'x naive':>8s}")
    naive(ACTS, DATA, 2, args.device)  # warm-up: one-time imports (torch.optim pulls in torch._dynamo)
    ratios, ours, naives, marginal = [], [], [], []
    # Every round's 480 run directories are kept until the end: on an ext4 file system without a
    # journal (this VM's), creating a file skips inodes freed in the last 1-6 minutes one by one,
    # so deleting one round's 1,920 files would slow the next round's file creation ~20-fold.
    keep = tempfile.mkdtemp(prefix="actbench-bench-")
    try:  # an untimed short sweep first: fills inductor's cache (engine=compiled), so no timed run compiles cold
        actbench_sweep(os.path.join(keep, "warm-up"), ACTS, DATA, args.seeds, _short(args), args.device, args.engine)
        for r in range(1, args.repeat + 1):
            _round(r, os.path.join(keep, f"round{r}"), args, ratios, ours, naives, marginal)
    finally:
        shutil.rmtree(keep)
    base = statistics.median(naives)
    steps, wall = stacked_by_hand(ACTS, DATA, args.seeds, args.epochs, args.device)
    hand = steps / wall
    print(f"{'-':6s} {'stacked by hand (in process)':34s} {steps:12d} {wall:9.2f} {hand:10.0f} {hand / base:8.1f}")
    steps, wall = stacked_by_hand_process(args.seeds, args.epochs, args.device)
    hand_process = steps / wall
    print(f"{'-':6s} {'stacked by hand (whole process)':34s} {steps:12d} {wall:9.2f} {hand_process:10.0f} "
          f"{hand_process / base:8.1f}")
    rounds = ", ".join(f"{x:.1f}" for x in ratios)
    print(f"actbench / naive = {statistics.median(ratios):.1f}x (median of {len(ratios)} rounds: {rounds}); "
          f"actbench / stacked-by-hand = {statistics.median(ours) / hand:.2f}x in process, "
          f"{statistics.median(ours) / hand_process:.2f}x whole process")
    import roofline  # benchmarks/, beside this script

    stack = roofline.largest_stack(grid(ACTS, DATA, args.seeds, args.epochs, args.device, args.engine))
    ceiling = roofline.bmm_rate(stack, [64, 64], 10)  # the one output is a multiply and a sum, no bmm
    extra = args.epochs - _short(args)
    members = len(ACTS) * len(DATA) * args.seeds
    flops = roofline.training_flops(members, [64, 64, 1], 10, extra)
    update = roofline.update_total(members, stack, [64, 64, 1], extra)
    m = statistics.median(marginal)
    print(f"actbench, marginal: {extra} epochs in {m:.2f} s (median over rounds of {args.epochs} less "
          f"{_short(args)}); {roofline.line(flops, m, ceiling, update)}; bmm timed on stacks of {stack}; load average "
          f"{os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
