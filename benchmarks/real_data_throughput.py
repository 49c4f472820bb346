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
    python -m benchmarks.real_data_throughput [--epochs 200] [--seeds 30] [--repeat 3]
    python -m benchmarks.real_data_throughput --quick      # a smoke run: 4 seeds, 20 epochs, 1 round
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile

from benchmarks import harness, provenance, roofline
from benchmarks.peers.grid import ACTS
from benchmarks.plain import train_epochs

BATCH = 32
STEPS = -(-266 // BATCH)  # minibatch steps an epoch: 266 training rows


def naive(acts: list[str], seed: int, epochs: int) -> int:
    """One model at a time, a shuffled DataLoader (the seed's split read and standardised, timed);
    returns the model steps."""
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    from activation_bench.config.compose import compose
    from activation_bench.data import splits
    from activation_bench.engine.activations.registry import create

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

        def evaluate(loss: torch.Tensor, model: nn.Module = model, crit: nn.Module = crit,
                     history: list = history) -> None:
            model.eval()
            with torch.no_grad():
                history.append((loss.item(), crit(model(xv), yv).item(), crit(model(xt), yt).item()))

        steps += train_epochs(model, loader, opt, crit, epochs, evaluate)
    return steps


def sweep_cmd(root: str, seeds: int, epochs: int, engine: str) -> list[str]:
    return [*provenance.actbench(), "sweep", "--runs-dir", root, "-q", f"activation={','.join(ACTS)}",
            f"seed=range({seeds})", "data=diabetes", f"batch_size={BATCH}", "shuffle=true", f"epochs={epochs}",
            f"engine={engine}"]


def main() -> None:
    ap = harness.parser(__doc__)
    ap.add_argument("--epochs", type=int, default=200)
    ap.add_argument("--seeds", type=int, default=30)
    ap.add_argument("--repeat", type=int, default=3, help="interleaved rounds; the ratio is their median")
    ap.add_argument("--engines", default="eager,compiled", help="actbench's engines to time (comma list)")
    ap.add_argument("--quick", action="store_true", help="a smoke run: 4 seeds, 20 epochs, 1 round")
    ap.add_argument("--cpu-time", action="store_true", help="one thread for both paths, timed by CPU time (a busy "
                    "machine's scheduler does not inflate it)")
    args = ap.parse_args()
    if args.cpu_time:
        os.environ.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    if args.quick:
        args.seeds, args.epochs, args.repeat = 4, 20, 1
    import torch

    if args.cpu_time:
        torch.set_num_threads(1)
    bench = harness.Bench(args, compile_bytecode=True)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} cores; "
          f"{len(ACTS)} activations x {args.seeds} seeds x {args.epochs} epochs, data=diabetes, "
          f"batch_size={BATCH}, shuffle=true; {'CPU' if args.cpu_time else 'wall'} seconds")
    naive(ACTS[:1], 0, 2)  # warm-up: one-time imports (torch.optim pulls in torch._dynamo), the table's first read
    engines = [e for e in args.engines.split(",") if e]
    short = max(1, args.epochs // 5)
    keep = tempfile.mkdtemp(prefix="actbench-real-bench-")
    os.environ["ACTBENCH_CACHE_DIR"] = os.path.join(keep, "cache")  # the compiled engine's, empty
    os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)

    def sweep(engine: str, epochs: int, name: str):  # noqa: ANN202
        return lambda r: harness.run(sweep_cmd(os.path.join(keep, f"{name}{r}-{engine}"), args.seeds, epochs, engine),
                                     cpu_time=args.cpu_time).seconds

    paths = {"naive (sample)": lambda r: harness.clock(naive, ACTS, r, args.epochs, cpu_time=args.cpu_time)[0]}
    for engine in engines:
        paths[f"engine={engine}"] = sweep(engine, args.epochs, "round")
        paths[f"engine={engine}, a fifth of the epochs"] = sweep(engine, short, "short")
    try:
        if "compiled" in engines:
            cold = sweep("compiled", args.epochs, "cold")(0)
            print(f"engine=compiled from an empty store (compiles every stack): {cold:.2f} s")
            bench.note(cold_compiled_seconds=cold)
        times = harness.interleaved(paths, args.repeat)
    finally:
        shutil.rmtree(keep)
    base = [len(ACTS) * args.epochs * STEPS / s for s in times["naive (sample)"]]
    for engine in engines:
        rates = [len(ACTS) * args.seeds * args.epochs * STEPS / s for s in times[f"engine={engine}"]]
        bench.figure(f"engine={engine} / naive, model-steps per second", harness.ratios(rates, base), digits=1)
    grid = [f"activation={','.join(ACTS)}", f"seed=range({args.seeds})", "data=diabetes", f"batch_size={BATCH}",
            "shuffle=true"]
    stack = roofline.largest_stack(grid)
    ceiling = roofline.bmm_rate(stack, [10, 64], BATCH)  # the one output is a multiply and a sum, no bmm
    # an epoch's 9 batches cover the 266 training rows once (the last has 10): 6 x 266 x W an epoch
    flops = roofline.training_flops(len(ACTS) * args.seeds, [10, 64, 1], 266, args.epochs - short, 88 + 88,
                                    args.epochs - short)
    update = roofline.update_total(len(ACTS) * args.seeds, stack, [10, 64, 1], (args.epochs - short) * STEPS)
    for engine in engines:
        margins = [a - b for a, b in zip(times[f"engine={engine}"], times[f"engine={engine}, a fifth of the epochs"])]
        m = statistics.median(margins)
        print(f"engine={engine}, marginal: {args.epochs - short} epochs in {m:.2f} s (median over rounds of "
              f"{args.epochs} less {short}); {roofline.line(flops, m, ceiling, update)}; bmm timed on stacks of "
              f"{stack}")
        bench.figure(f"engine={engine}: share of bmm's rate, marginal", [flops / x / 1e9 / ceiling for x in margins],
                     unit="")
    bench.note(stack=stack, bmm_gflops=ceiling)
    bench.finish(times)


if __name__ == "__main__":
    main()
