"""Training-step variants of the engine, timed in one process, interleaved (training alone).

Trains the grid (8 activations x 2 data x --seeds seeds, --epochs epochs) through
`train.train`, stack by stack as `actbench sweep` plans it, once per variant per round:

- autograd: the engine's autograd path (StackedMLP forward, member_mse, backward);
- hand: models/hand_gradient.py's hand-written gradient (the default);
- hand, stacks <= 128: the same with smaller stacks (4 of 120 members instead of 2 of 240), whose
  tensors stay in the CPU's caches.

Rounds alternate the variants so a slow spell of a shared machine hits both; printed: each
round's seconds and model-steps/s, and the median ratio of each variant's time over the first's.

Usage:
    python benchmarks/step_variants.py [--seeds 30] [--epochs 300] [--repeat 3] [--threads N]
"""

from __future__ import annotations

import argparse
import statistics
import time

ACTS = ["gelu", "relu", "silu", "elu", "tanh", "mish", "leaky_relu", "softplus"]
DATA = ["normal", "uniform"]


def variants() -> dict:
    """name -> (whether to use the hand-written gradient, largest stack)."""
    from activation_bench.engine import plan

    return {"autograd": (False, plan.MAX_STACK), "hand": (True, plan.MAX_STACK), "hand, stacks <= 128": (True, 128)}


def run_grid(cfgs: list, hand: bool, max_members: int) -> float:
    from activation_bench.engine import plan, train

    train.HAND_GRADIENT = hand
    start = time.perf_counter()
    for stack in plan.plan_stacks(cfgs, max_members=max_members):
        train.train([cfgs[i] for i in stack])
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=30)
    ap.add_argument("--epochs", type=int, default=300)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = ap.parse_args()
    import torch

    from activation_bench.config.compose import compose_many

    if args.threads:
        torch.set_num_threads(args.threads)
    cfgs = compose_many([[f"activation={a}", f"data={d}", f"seed={s}", f"epochs={args.epochs}"]
                                for a in ACTS for d in DATA for s in range(args.seeds)])
    steps = len(cfgs) * args.epochs
    found = variants()
    times: dict[str, list[float]] = {k: [] for k in found}
    from provenance import header  # benchmarks/ is on sys.path when a script there runs

    print(header())
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; {len(cfgs)} members x {args.epochs} epochs")
    for use in found.values():  # warm-up: first-call costs
        run_grid(cfgs[:: max(1, len(cfgs) // 16)], *use)
    for r in range(1, args.repeat + 1):
        order = list(found) if r % 2 else list(found)[::-1]
        for name in order:
            wall = run_grid(cfgs, *found[name])
            times[name].append(wall)
            print(f"round {r} {name:20s} {wall:8.2f} s {steps / wall:10.0f} model-steps/s", flush=True)
    base = next(iter(found))
    for name in found:
        ratios = [b / t for b, t in zip(times[base], times[name])]
        print(f"{name:20s} median {statistics.median(times[name]):.2f} s; {base} / {name} = "
              f"{statistics.median(ratios):.2f}x (rounds: {', '.join(f'{x:.2f}' for x in ratios)})")


if __name__ == "__main__":
    main()
