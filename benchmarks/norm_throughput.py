"""Batch-norm throughput: a depth-8 `model.norm=batch` sweep against the plain PyTorch loop a user
would write, both as whole processes, side by side in one run.

Grid: the depth study's six activations (gelu, relu, tanh, sigmoid, selu, silu) x 8 seeds, 8 hidden
layers with batch norm (Linear without bias -> BatchNorm1d -> activation), full batch, Adam at lr
1e-3, 500 epochs by default: 48 runs, 24,000 model steps. Two shapes (--shape):
- default: depth_throughput's, the default data (10 training rows of 64 features, random
  targets) and 64 hidden units, no validation set;
- study: the depth study's (docs/studies/depth/), 64 training rows of 16 features with teacher targets
  (noise 0.1), 32 hidden units, and the validation loss on 256 rows after every epoch.

- actbench: the real command, `actbench sweep ... model.depth=8 model.norm=batch` in a fresh
  process, timed whole (start-up, imports, composing, training the 48 members as one stack,
  writing the run directories and results.csv).
- plain: a fresh Python process that trains one model at a time as a user would: nn.Sequential of
  8 x (nn.Linear(bias=False), nn.BatchNorm1d, activation) and an output nn.Linear,
  torch.optim.Adam, a DataLoader, zero_grad/backward/step (and with a validation set its loss in
  eval mode after every epoch). It runs a sample of the grid (--plain-seeds seeds of every
  activation), which gives its model steps per second, start-up included.

The two run in interleaved rounds (--repeat); the ratio reported is the median of the rounds'
ratios of model steps per second. Each round also runs the sweep at a fifth of the epochs: the
difference is the marginal time of the rest, whose training FLOPs per second the last line gives
against torch.bmm's rate at the stack's own shapes (benchmarks/roofline.py). Usage:
    python -m benchmarks.norm_throughput [--shape default|study] [--epochs 500] [--seeds 8] [--repeat 3]
        [--engine compiled]
    python -m benchmarks.norm_throughput --quick      # a smoke run: 2 seeds, 20 epochs, 1 round
"""

from __future__ import annotations

import argparse
import os
import statistics

from benchmarks import harness, plain, provenance, roofline

ACTS = ["gelu", "relu", "tanh", "sigmoid", "selu", "silu"]
DEPTH = 8
# (training rows, input features, hidden width, validation rows, actbench's data overrides)
SHAPES = {
    "default": (10, 64, 64, 0, []),  # depth_throughput's: the default data, 64 hidden units
    "study": (64, 16, 32, 256, ["data.target=teacher", "data.input_dim=16", "data.n_samples=64", "data.n_val=256",
                                "data.noise=0.1", "model.hidden_dim=32"]),  # the depth study's
}


def loop(shape: str, seeds: int, epochs: int) -> int:
    """The loop a user would write, one model at a time; returns the model steps taken."""
    rows, inputs, hidden, val, _ = SHAPES[shape]
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    from activation_bench.engine.activations.registry import create

    steps = 0
    for seed in range(seeds):
        for a in ACTS:
            torch.manual_seed(seed)
            x, y = torch.randn(rows, inputs), torch.randn(rows, 1)
            xv, yv = torch.randn(val, inputs), torch.randn(val, 1)
            layers: list[nn.Module] = []
            for k in range(DEPTH):
                layers += [nn.Linear(inputs if k == 0 else hidden, hidden, bias=False), nn.BatchNorm1d(hidden),
                           create(a)]
            model = nn.Sequential(*layers, nn.Linear(hidden, 1))
            opt = torch.optim.Adam(model.parameters(), lr=1e-3)
            loader = DataLoader(TensorDataset(x, y), batch_size=rows)
            crit = nn.MSELoss()
            history = []

            def record(loss: torch.Tensor, model: nn.Module = model, crit: nn.Module = crit, history: list = history,
                       xv: torch.Tensor = xv, yv: torch.Tensor = yv) -> None:
                if not val:
                    history.append(loss.item())
                    return
                model.eval()
                with torch.no_grad():
                    history.append((loss.item(), crit(model(xv), yv).item()))

            steps += plain.train_epochs(model, loader, opt, crit, epochs, record)
    return steps


def main() -> None:
    ap = harness.parser(__doc__)
    ap.add_argument("--shape", choices=sorted(SHAPES), default="default",
                    help="default: depth_throughput's data and widths; study: the depth study's")
    ap.add_argument("--epochs", type=int, default=500)
    ap.add_argument("--seeds", type=int, default=8)
    ap.add_argument("--plain-seeds", type=int, default=2, help="seeds of every activation the plain loop runs")
    ap.add_argument("--repeat", type=int, default=3, help="interleaved rounds; the ratio is their median")
    ap.add_argument("--quick", action="store_true", help="a smoke run: 2 seeds, 20 epochs, 1 round")
    ap.add_argument("--engine", default="eager", help="actbench's engine= (eager, compiled, auto)")
    ap.add_argument("--plain-worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.plain_worker:
        print(loop(args.shape, args.plain_seeds, args.epochs))
        return
    if args.quick:
        args.seeds, args.epochs, args.repeat, args.plain_seeds = 2, 20, 1, 1
    import torch

    rows, inputs, hidden, val, data = SHAPES[args.shape]
    bench = harness.Bench(args, compile_bytecode=True)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} cores; {len(ACTS)} "
          f"activations x {args.seeds} seeds x {args.epochs} epochs, depth {DEPTH} x {hidden}, batch norm, "
          f"{rows} rows of {inputs} features (full batch), {val} validation rows ({args.shape})")
    sweep_steps = len(ACTS) * args.seeds * args.epochs
    worker = [*provenance.module("benchmarks.norm_throughput"), "--plain-worker", "--shape", args.shape,
              "--plain-seeds", str(args.plain_seeds), "--epochs", str(args.epochs)]

    def grid(epochs: int = args.epochs) -> list[str]:
        return [f"activation={','.join(ACTS)}", f"seed=range({args.seeds})", f"model.depth={DEPTH}",
                "model.norm=batch", *data, f"epochs={epochs}", "lr=0.001", f"engine={args.engine}"]

    def sweep_cmd(runs: str, epochs: int = args.epochs) -> list[str]:
        return [*provenance.actbench(), "sweep", "--runs-dir", runs, "-q", *grid(epochs)]

    short = max(1, args.epochs // 5)
    ratio, times = plain.sweep_vs_plain(bench, sweep_cmd, worker, sweep_steps, args.repeat,
                                        "plain loop, one model at a time", lambda runs: sweep_cmd(runs, short))
    stack = roofline.largest_stack(grid())
    ceiling = roofline.bmm_rate(stack, [inputs, *[hidden] * DEPTH], rows)  # the one output: no bmm
    flops = roofline.training_flops(len(ACTS) * args.seeds, [inputs, *[hidden] * DEPTH, 1], rows,
                                    args.epochs - short, val, args.epochs - short)
    margins = [w - s for w, s in zip(times[plain.SWEEP], times[plain.SHORT])]
    marginal = statistics.median(margins)
    update = roofline.update_total(len(ACTS) * args.seeds, stack, [inputs, *[hidden] * DEPTH, 1], args.epochs - short)
    print(f"marginal: {args.epochs - short} epochs in {marginal:.2f} s (median over rounds of {args.epochs} less "
          f"{short} epochs); actbench / plain = {ratio:.1f}x; {roofline.line(flops, marginal, ceiling, update)}; "
          f"bmm timed on stacks of {stack}")
    bench.figure("share of bmm's rate, marginal", [flops / m / 1e9 / ceiling for m in margins], unit="")
    bench.note(stack=stack, bmm_gflops=ceiling)
    bench.finish(times)


if __name__ == "__main__":
    main()
