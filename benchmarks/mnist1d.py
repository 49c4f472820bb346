"""What the two MNIST-1D benchmarks (classification_throughput, cnn_throughput) share: their command
line, their plain loop's worker process, and the interleaved rounds of `actbench sweep` against it
with the share of torch.bmm's rate that the sweep's marginal epochs reach (roofline.py)."""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable

from benchmarks import harness, plain, provenance, roofline


def options(doc: str, epochs: int, plain_seeds: int) -> argparse.ArgumentParser:
    """The command line of an MNIST-1D benchmark."""
    ap = harness.parser(doc)
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
    return ap


def sweep_vs_plain(doc: str, module: str, loop: Callable[[int, int], int], acts: list[str], batch: int,
                   overrides: list[str], what: str, epochs: int, plain_seeds: int,
                   quick: tuple[int, int, int], roof: Callable[[], roofline.Roof], goal: str | None = None) -> None:
    """The benchmark `module` (its options: options(); --quick: (seeds, epochs, plain seeds) in one
    round): in its plain-loop worker (`loop(seeds, epochs)` in a fresh `python -m module`) prints
    the model steps; else interleaved rounds of `actbench sweep` (the activations x seeds with
    `overrides`) against that worker, each round also timing the sweep at a fifth of the epochs,
    then the marginal training rate against torch.bmm's at these shapes (`roof()`, judged against
    `goal`) and the products + Adam roof."""
    args = options(doc, epochs, plain_seeds).parse_args()
    if args.plain_worker:
        print(loop(args.plain_seeds, args.epochs))
        return
    if args.quick:
        (args.seeds, args.epochs, args.plain_seeds), args.repeat = quick, 1
    import torch

    from activation_bench.config.compose import compose
    from activation_bench.data import splits

    data = splits.split_arrays(compose(["data=mnist1d"]))  # fills the per-machine MNIST-1D cache before timing
    bench = harness.Bench(args, compile_bytecode=True)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; {len(acts)} activations x {args.seeds} "
          f"seeds x {args.epochs} epochs, {what}, engine={args.engine}, {args.jobs} sweep process(es)")
    worker = [*provenance.module(module), "--plain-worker", "--plain-seeds", str(args.plain_seeds),
              "--epochs", str(args.epochs)]

    def grid(n: int = args.epochs) -> list[str]:
        return [f"activation={','.join(acts)}", f"seed=range({args.seeds})", "data=mnist1d", f"batch_size={batch}",
                "shuffle=true", f"epochs={n}", f"engine={args.engine}", *overrides]

    def sweep_cmd(runs: str, n: int = args.epochs) -> list[str]:
        jobs = ["--launcher", "joblib", "--jobs", str(args.jobs)] if args.jobs > 1 else []
        return [*provenance.actbench(), "sweep", "--runs-dir", runs, "-q", *jobs, *grid(n)]

    short = max(1, args.epochs // 5)
    member = roof()
    stack = roofline.largest_stack(grid())
    # timed right before and right after each round's sweeps. This VM's bmm rate at two threads moves
    # between about 145 and 85 GFLOP/s from one minute to the next while the training does not
    # follow it, so every round is judged against the best rate timed in the run
    ceilings: list[float] = []
    updates: list[float] = []  # torch's fused Adam on one stack, one step, timed beside each ceiling

    def ceiling() -> None:
        ceilings.append(roofline.products_rate(stack, member.products))
        updates.append(roofline.adam_seconds(stack, member.params))

    sweep_steps = len(acts) * args.seeds * args.epochs * -(-3200 // batch)
    ratio, times = plain.sweep_vs_plain(bench, sweep_cmd, worker, sweep_steps, args.repeat,
                                        "plain loop, DataLoader (sample)", lambda runs: sweep_cmd(runs, short),
                                        ceiling)
    n, n_eval = len(data.x), len(data.x_val) + len(data.x_test)
    extra = args.epochs - short
    steps = extra * -(-n // batch)
    flops = member.flops(len(acts) * args.seeds, steps, extra * n_eval)
    margins = [w - s for w, s in zip(times[plain.SWEEP], times[plain.SHORT])]
    best = max(ceilings)
    update = min(updates) * steps * len(acts) * args.seeds / stack
    pairs = ", ".join(f"{a:.0f}/{b:.0f}" for a, b in zip(ceilings[::2], ceilings[1::2]))
    print(f"bmm before/after each round's sweeps {pairs} GFLOP/s; bmm timed on stacks of {stack}")
    bench.figure("share of bmm's best rate, marginal", [flops / m / 1e9 / best for m in margins], goal=goal, unit="")
    marginal = statistics.median(margins)
    print(f"marginal: {extra} epochs in {marginal:.2f} s (median over rounds of {args.epochs} less {short} "
          f"epochs); actbench / plain = {ratio:.1f}x; {roofline.line(flops, marginal, best, update)}")
    bench.note(marginal_seconds=margins, bmm_gflops=ceilings, stack=stack)
    bench.finish(times)
