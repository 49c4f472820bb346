"""Where the eager engine's training step goes, against the work no step can skip and the compiled step.

One stack of the peer grid (benchmarks.peer_throughput): 8 activations x 30 seeds = 240
members, 64-64-1 MLPs on 10 samples, whole-batch Adam. In this process, interleaved rounds of:

- the eager step and the compiled step: marginal seconds per step, (train at --epochs - train at a
  fifth of them) / the epochs between, through `train.train` as `actbench sweep` trains a stack
  (the compiled one's store warmed first);
- the floor: torch.bmm over the hidden layer's two products at the stack's shapes (forward and
  weight gradient; benchmarks/roofline.py) plus torch's fused Adam over the stack's parameters,
  each the best of five timings;
- the eager step's kernel calls: torch.profiler's top-level aten calls per step (after the
  timings: steps trained after a profile in the same process ran up to 1.6x slower).

Printed: each round's times; the medians; what the eager step spends beyond the floor, and that per
kernel call. That part is the elementwise work (activations and their derivatives, the output
layer, the loss, the gradients' sums) issued as separate kernels, whose results are the eager
engine's bits; the compiled engine fuses it into a few loops and has other bits.

Usage:
    python -m benchmarks.eager_step [--epochs 1000] [--repeat 3]
"""

from __future__ import annotations

import statistics

from benchmarks import harness, roofline
from benchmarks.peers.grid import ACTS

# the products an engine runs as bmm: the hidden layer's forward [10, 64] x [64, 64] and weight
# gradient [64, 10] x [10, 64] (the 64 -> 1 output layer is elementwise work in every engine, and no
# engine computes the data's gradient)
FIRST_LAYER = ((10, 64, 64, "nn"), (64, 10, 64, "tn"))


def configs(epochs: int, engine: str) -> list:
    from activation_bench.config.compose import compose_many
    from activation_bench.config.grid import expand

    return compose_many(expand([f"activation={','.join(ACTS)}", "data=normal", "seed=range(30)",
                                f"epochs={epochs}", f"engine={engine}"]).members)


def seconds_per_step(engine: str, epochs: int) -> float:
    """Marginal seconds per optimiser step of the stack (one step an epoch: whole-batch)."""
    from activation_bench.engine import train

    short = max(1, epochs // 5)
    full, part = (harness.clock(train.train, configs(n, engine))[0] for n in (epochs, short))
    return (full - part) / (epochs - short)


def kernel_calls(epochs: int = 20) -> float:
    """Top-level aten calls per eager step (what they call inside is not counted again): the calls
    of a run of 2 x `epochs` epochs less those of `epochs`, so building the stack and the end-of-run
    diagnostics drop out."""
    from torch.profiler import profile

    from activation_bench.engine import train

    counts = []
    for n in (epochs, 2 * epochs):
        cfgs = configs(n, "eager")
        train.train(cfgs)
        with profile() as prof:
            train.train(cfgs)
        counts.append(sum(e.name.startswith("aten::") and e.cpu_parent is None for e in prof.events()))
    return (counts[1] - counts[0]) / epochs


def main() -> None:
    ap = harness.parser(__doc__)
    ap.add_argument("--epochs", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    import torch

    bench = harness.Bench(args)
    print(f"# torch {torch.__version__}, {torch.get_num_threads()} threads; one stack of 240 members, 64-64-1, 10 rows")
    members, widths = 240, [64, 64, 1]
    seconds_per_step("compiled", 50)  # warms the compile store (cold: minutes)
    seconds_per_step("eager", 50)  # and eager's one-time costs (data caches, first kernel calls)
    eager, compiled, floor = [], [], []
    for rnd in range(args.repeat):
        eager.append(seconds_per_step("eager", args.epochs))
        compiled.append(seconds_per_step("compiled", args.epochs))
        flops = sum(2.0 * members * rows * inner * cols for rows, inner, cols, _ in FIRST_LAYER)
        products = flops / roofline.products_rate(members, FIRST_LAYER) / 1e9
        adam = roofline.update_seconds(members, widths)
        floor.append(products + adam)
        print(f"round {rnd + 1}: eager {eager[-1] * 1e3:.3f} ms a step, compiled {compiled[-1] * 1e3:.3f} ms, "
              f"products {products * 1e3:.3f} ms + Adam {adam * 1e3:.3f} ms")
    calls = kernel_calls()  # after the timings: the profiler slows the steps that follow it in a process
    e, c, f = (statistics.median(x) for x in (eager, compiled, floor))
    print(f"medians: eager {e * 1e3:.3f} ms, compiled {c * 1e3:.3f} ms ({e / c:.2f}x faster), "
          f"products + Adam {f * 1e3:.3f} ms")
    print(f"eager beyond products + Adam: {(e - f) * 1e3:.3f} ms a step ({(e - f) / e:.0%} of it) over "
          f"{calls:.0f} top-level kernel calls a step: {(e - f) / calls * 1e6:.1f} us a call")
    print(f"compiled beyond products + Adam: {(c - f) * 1e3:.3f} ms a step")
    bench.figure("eager / compiled, seconds a step", harness.ratios(eager, compiled))
    bench.figure("eager / products + Adam, seconds a step", harness.ratios(eager, floor))
    bench.note(kernel_calls_a_step=calls)
    bench.finish({"eager step": eager, "compiled step": compiled, "products + Adam": floor})


if __name__ == "__main__":
    main()
