"""Deep sweeps: `actbench sweep model.depth=D` against the naive loop, measured in one run.

Grid (defaults): depth 8 x 8 activations (gelu, relu, silu, elu, tanh, mish, leaky_relu, softplus)
x 30 seeds x 200 epochs on the default data (10 samples of 64 features), 64 hidden units per layer:
240 runs, 48,000 model steps (a step is one optimiser update of one 64-(64 x 8)-1 MLP).

- actbench: the real command, `actbench sweep ... model.depth=8` in a fresh process, timed whole
  (start-up, imports, composing, training stacked with one baddbmm per layer, writing the run
  directories and results.csv).
- actbench engine alone: the same grid through `plan.plan_stacks`/`train.train` in this process
  (training only: no start-up, composing or files), against the median naive rate.
- naive: one model at a time, as the seed notebook trains: nn.Sequential of depth x (Linear,
  activation; with --norm the norm before each activation, the Linear without bias before batch
  norm) and a Linear output, a DataLoader, torch.optim.Adam, zero_grad/backward/step. Timed
  on one member per activation (its steps per second stand for the whole grid).

Rounds are interleaved (--repeat) and the ratio reported is the median of the rounds' ratios, as
in sweep_throughput.py. Last, the engine's marginal training rate: in process, the grid at --epochs
less the grid at a fifth of them (after one untimed run at that fifth, so compilation and warm-up
are paid before either), its training FLOPs over that time against torch.bmm's rate at the stack's
own shapes (benchmarks/roofline.py says how FLOPs are counted). Usage:
    python -m benchmarks.depth_throughput [--depth 8] [--epochs 200] [--seeds 30] [--repeat 3]
        [--norm none|batch|layer] [--engine eager|compiled]
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile

from benchmarks import harness, provenance, roofline
from benchmarks.peers.grid import ACTS
from benchmarks.plain import train_epochs


def naive(acts: list[str], depth: int, epochs: int, hidden: int = 64, norm: str = "none") -> int:
    """The seed notebook's loop at this depth, one model per activation; returns the model steps."""
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    from activation_bench.engine.activations.registry import create

    steps = 0
    for a in acts:
        torch.manual_seed(0)
        x, y = torch.randn(10, 64), torch.randn(10, 1)
        layers: list[nn.Module] = []
        for k in range(depth):
            layers.append(nn.Linear(64 if k == 0 else hidden, hidden, bias=norm != "batch"))
            if norm != "none":
                layers.append(nn.BatchNorm1d(hidden) if norm == "batch" else nn.LayerNorm(hidden))
            layers.append(create(a))
        model = nn.Sequential(*layers, nn.Linear(hidden, 1))
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        loader = DataLoader(TensorDataset(x, y), batch_size=10)
        steps += train_epochs(model, loader, opt, nn.MSELoss(), epochs)
    return steps


def sweep_cmd(root: str, depth: int, seeds: int, epochs: int, extra: list[str]) -> list[str]:
    return [*provenance.actbench(), "sweep", "--runs-dir", root, "-q", f"activation={','.join(ACTS)}",
            f"seed=range({seeds})", f"epochs={epochs}", f"model.depth={depth}", *extra]


def engine_in_process(depth: int, seeds: int, epochs: int, extra: list[str]) -> float:
    """Seconds of actbench's engine alone (composed configs in, losses out) in this process: no
    start-up, no files."""
    from activation_bench.config.compose import compose_many
    from activation_bench.config.grid import expand
    from activation_bench.engine import plan, train

    grid = expand([f"activation={','.join(ACTS)}", f"seed=range({seeds})", f"epochs={epochs}",
                   f"model.depth={depth}", *extra])
    cfgs = compose_many(grid.members)
    return harness.clock(lambda: [train.train([cfgs[i] for i in stack]) for stack in plan.plan_stacks(cfgs)])[0]


def main() -> None:
    ap = harness.parser(__doc__)
    ap.add_argument("--depth", type=int, default=8)
    ap.add_argument("--epochs", type=int, default=200)
    ap.add_argument("--seeds", type=int, default=30)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--norm", default="none", help="model.norm of the sweep (none, batch, layer)")
    ap.add_argument("--engine", default="eager", help="actbench's engine= (eager, compiled, auto)")
    args = ap.parse_args()
    extra = [f"model.norm={args.norm}", f"engine={args.engine}"]
    import torch

    bench = harness.Bench(args, compile_bytecode=True)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} cores, "
          f"depth {args.depth}, {len(ACTS)} activations x {args.seeds} seeds x {args.epochs} epochs, "
          f"model.norm={args.norm}, engine={args.engine}")
    naive(ACTS[:1], args.depth, 2, norm=args.norm)  # warm-up: one-time imports are not counted against the naive loop
    keep = tempfile.mkdtemp(prefix="actbench-depth-bench-")  # kept until the end (see sweep_throughput)
    paths = {"actbench sweep": lambda r: harness.run(sweep_cmd(os.path.join(keep, f"round{r}"), args.depth,
                                                               args.seeds, args.epochs, extra)).seconds,
             "naive (sample)": lambda r: harness.clock(naive, ACTS, args.depth, args.epochs, norm=args.norm)[0]}
    try:
        times = harness.interleaved(paths, args.repeat)
    finally:
        shutil.rmtree(keep)
    steps = len(ACTS) * args.seeds * args.epochs
    rates = [steps / s for s in times["actbench sweep"]]
    bases = [len(ACTS) * args.epochs / s for s in times["naive (sample)"]]
    bench.figure(f"depth {args.depth}: actbench / naive, model-steps per second", harness.ratios(rates, bases),
                 digits=1)
    short = max(1, args.epochs // 5)
    engine_in_process(args.depth, args.seeds, short, extra)  # untimed: compilation, caches, first-touch
    short_wall = engine_in_process(args.depth, args.seeds, short, extra)
    wall = engine_in_process(args.depth, args.seeds, args.epochs, extra)
    bench.figure("engine alone in process / naive, model-steps per second", [steps / wall / statistics.median(bases)],
                 digits=1)
    members, hidden = len(ACTS) * args.seeds, [64] * (args.depth + 1)  # 64 inputs, 64 per hidden layer
    grid = [f"activation={','.join(ACTS)}", f"seed=range({args.seeds})", f"model.depth={args.depth}", *extra]
    # the one-output layer is a multiply and a sum, no bmm
    stack = roofline.largest_stack(grid)
    ceiling = roofline.bmm_rate(stack, hidden, 10)
    flops = roofline.training_flops(members, [*hidden, 1], 10, args.epochs - short)
    update = roofline.update_total(members, stack, [*hidden, 1], args.epochs - short)
    print(f"engine alone, marginal: {args.epochs - short} epochs in {wall - short_wall:.2f} s ({args.epochs} less "
          f"{short}); {roofline.line(flops, wall - short_wall, ceiling, update)}")
    goal = ">= 0.5" if args.engine == "compiled" and args.norm == "batch" else None
    bench.figure("engine alone: share of bmm's rate, marginal", [flops / (wall - short_wall) / 1e9 / ceiling],
                 unit="", goal=goal)
    bench.note(stack=stack, bmm_gflops=ceiling, engine_seconds={"short": short_wall, "full": wall})
    bench.finish(times)


if __name__ == "__main__":
    main()
