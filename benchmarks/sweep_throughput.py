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
    python -m benchmarks.sweep_throughput [--epochs 1000] [--seeds 30] [--repeat 3] [--device cpu]
        [--engine compiled]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile

from benchmarks import harness, provenance, roofline
from benchmarks.peers.grid import ACTS, DATA
from benchmarks.plain import naive

MODULE = "benchmarks.sweep_throughput"


def stacked_by_hand(seeds: int, epochs: int, device: str) -> None:
    """The reference grid trained by a minimal hand-written stacked loop."""
    import torch

    from activation_bench.engine.activations.registry import create

    m = len(ACTS) * len(DATA) * seeds
    g = torch.Generator().manual_seed(0)
    x = torch.randn(m, 10, 64, generator=g).to(device)
    y = torch.randn(m, 10, 1, generator=g).to(device)
    w1 = (torch.rand(m, 64, 64, generator=g) * 0.25 - 0.125).to(device).requires_grad_()
    b1 = torch.zeros(m, 1, 64, device=device, requires_grad=True)
    w2 = (torch.rand(m, 64, 1, generator=g) * 0.25 - 0.125).to(device).requires_grad_()
    b2 = torch.zeros(m, 1, 1, device=device, requires_grad=True)
    mods = [create(a) for a in ACTS for _ in DATA]
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


def grid(seeds: int, epochs: int, device: str, engine: str) -> list[str]:
    return [f"activation={','.join(ACTS)}", f"data={','.join(DATA)}", f"seed=range({seeds})", f"epochs={epochs}",
            f"device={device}", f"engine={engine}"]


def sweep_cmd(root: str, seeds: int, epochs: int, device: str, engine: str) -> list[str]:
    return [*provenance.actbench(), "sweep", "--runs-dir", root, "-q", *grid(seeds, epochs, device, engine)]


def main() -> None:
    ap = harness.parser(__doc__)
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
        stacked_by_hand(args.seeds, args.epochs, args.device)
        return
    import torch

    if args.device == "cuda":
        torch.cuda.init()  # the record names the GPU
    bench = harness.Bench(args, compile_bytecode=True)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} cores, device {args.device}")
    naive(ACTS, DATA, 2, args.device)  # warm-up: one-time imports (torch.optim pulls in torch._dynamo)
    members, short = len(ACTS) * len(DATA) * args.seeds, max(1, args.epochs // 5)
    naive_epochs = args.naive_epochs or args.epochs
    # Every round's 480 run directories are kept until the end: on an ext4 file system without a
    # journal (this VM's), creating a file skips inodes freed in the last 1-6 minutes one by one,
    # so deleting one round's 1,920 files would slow the next round's file creation ~20-fold.
    keep = tempfile.mkdtemp(prefix="actbench-bench-")

    def sweep(r: int, epochs: int = args.epochs, name: str = "round") -> float:
        return harness.run(sweep_cmd(os.path.join(keep, f"{name}{r}"), args.seeds, epochs, args.device,
                                     args.engine)).seconds

    paths = {"actbench sweep": sweep, "actbench sweep, a fifth of the epochs": lambda r: sweep(r, short, "short"),
             "naive (sample)": lambda r: harness.clock(naive, ACTS, DATA, naive_epochs, args.device)[0]}
    try:  # an untimed short sweep first: fills the compile store (engine=compiled), so no timed run compiles cold
        sweep(0, short, "warm-up")
        times = harness.interleaved(paths, args.repeat)
    finally:
        shutil.rmtree(keep)
    rate = [members * args.epochs / s for s in times["actbench sweep"]]
    base = [len(ACTS) * len(DATA) * naive_epochs / s for s in times["naive (sample)"]]
    bench.figure("actbench / the seed notebook's loop, model-steps per second", harness.ratios(rate, base), digits=1)
    hand_s, _ = harness.clock(stacked_by_hand, args.seeds, args.epochs, args.device)
    cmd = [*provenance.module(MODULE), "--hand-only", "--seeds", str(args.seeds), "--epochs", str(args.epochs),
           "--device", args.device]
    hand_process_s = harness.run(cmd).seconds
    hand = members * args.epochs / hand_s
    print(f"stacked by hand: {hand:,.0f} model-steps/s in process ({hand_s:.2f} s), "
          f"{members * args.epochs / hand_process_s:,.0f} as a process of its own ({hand_process_s:.2f} s)")
    bench.figure("actbench / stacked by hand as a process, whole process", [hand_process_s / statistics.median(
        times["actbench sweep"])])
    stack = roofline.largest_stack(grid(args.seeds, args.epochs, args.device, args.engine))
    ceiling = roofline.bmm_rate(stack, [64, 64], 10)  # the one output is a multiply and a sum, no bmm
    extra = args.epochs - short
    flops = roofline.training_flops(members, [64, 64, 1], 10, extra)
    update = roofline.update_total(members, stack, [64, 64, 1], extra)
    margins = [a - b for a, b in zip(times["actbench sweep"], times["actbench sweep, a fifth of the epochs"])]
    m = statistics.median(margins)
    print(f"actbench, marginal: {extra} epochs in {m:.2f} s (median over rounds of {args.epochs} less "
          f"{short}); {roofline.line(flops, m, ceiling, update)}; bmm timed on stacks of {stack}")
    bench.figure("share of bmm's rate, marginal", [flops / x / 1e9 / ceiling for x in margins], unit="")
    bench.note(hand_in_process_seconds=hand_s, hand_process_seconds=hand_process_s, stack=stack, bmm_gflops=ceiling)
    bench.finish(times)


if __name__ == "__main__":
    main()
