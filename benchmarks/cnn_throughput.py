"""Convnet throughput: `actbench sweep model=cnn data=mnist1d` against the plain PyTorch loop a user
would write, both as whole processes, side by side in one run; and the share of the machine's
measured matrix-product rate that training reaches.

Grid: MNIST-1D's published CNN (model=cnn's defaults: Conv1d 1->25 kernel 5 stride 2 padding 1,
then 25->25 kernel 3 stride 2 padding 1 twice, flatten 125 -> Linear 10), 8 activations x 30 seeds,
batch 100, shuffle=true, Adam lr 1e-2 (3,200 training rows: 32 steps an epoch), the validation and
test loss and accuracy every epoch: 240 runs.

- actbench: the real command, `actbench sweep ...` in a fresh process, timed whole (start-up,
  imports, reading the cached MNIST-1D arrays, composing, training, writing 240 run directories).
- plain: a fresh Python process that trains one model at a time: nn.Conv1d / nn.Linear in an
  nn.Sequential, nn.CrossEntropyLoss, torch.optim.Adam, a shuffled DataLoader, the validation and
  test loss and accuracy every epoch; a sample of the grid (--plain-seeds seeds of every
  activation) gives its model steps per second, start-up included.

The two run in interleaved rounds (--repeat); the ratio is the median of the rounds' ratios of
model steps per second. Then, in this process: the FLOPs of a training step (forward 2 x rows x
fan_in x channels per convolution and the head, backward twice that) times the sweep's step rate,
against a float32 matrix product of 2048 x 2048 (the machine's rate at a size where the product is
compute-bound) and against a batched product at the convolutions' own shapes.

Usage:
    python benchmarks/cnn_throughput.py [--epochs 2] [--seeds 30] [--repeat 3]
    python benchmarks/cnn_throughput.py --quick      # a smoke run: 2 seeds, 1 epoch, 1 round
"""

from __future__ import annotations

import time

ACTS = ["gelu", "relu", "silu", "elu", "tanh", "mish", "leaky_relu", "softplus"]
BATCH, LR = 100, 0.01


def plain(seeds: int, epochs: int) -> int:
    """The loop a user would write, one model at a time; returns the model steps taken."""
    import torch
    from rounds import fit_classifier  # benchmarks/ is on sys.path when a script there runs
    from torch import nn

    from activation_bench.config.compose import compose
    from activation_bench.data import splits
    from activation_bench.engine.activations import create

    steps = 0
    for seed in range(seeds):
        s = splits.split_arrays(compose(["data=mnist1d", f"seed={seed}"]))

        def t(a, labels=False):  # noqa: ANN001, ANN202
            return torch.tensor(a, dtype=torch.int64) if labels else torch.tensor(a, dtype=torch.float32)[:, None]

        x, y, xv, yv, xt, yt = t(s.x), t(s.y, True), t(s.x_val), t(s.y_val, True), t(s.x_test), t(s.y_test, True)
        for a in ACTS:
            torch.manual_seed(seed)
            model = nn.Sequential(nn.Conv1d(1, 25, 5, 2, 1), create(a), nn.Conv1d(25, 25, 3, 2, 1), create(a),
                                  nn.Conv1d(25, 25, 3, 2, 1), create(a), nn.Flatten(), nn.Linear(125, 10))
            steps += fit_classifier(model, x, y, [(xv, yv), (xt, yt)], epochs, BATCH, LR)
    return steps


def step_flops() -> int:
    """FLOPs of one member's training step on a batch: forward 2 x rows x fan_in x channels per
    convolution (rows = samples x output positions) and the head; backward about twice that
    (the weight gradient and the input gradient; the first block's input gradient is not needed)."""
    from activation_bench.config.compose import compose
    from activation_bench.engine.conv_shapes import blocks

    cfg = compose(["model=cnn", "data=mnist1d"])
    forward = backward = 0
    for i, b in enumerate(blocks((1, 40), cfg.model)):
        f = 2 * BATCH * b.conv_positions[0] * b.fan_in * b.c_out
        forward += f
        backward += f if i == 0 else 2 * f
    head = 2 * BATCH * 125 * 10
    return forward + backward + 3 * head


def rate(fn, flops: float, seconds: float = 1.0) -> float:  # noqa: ANN001
    """FLOP/s of fn(), repeated for about `seconds` after a warm-up."""
    fn()
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        fn()
        n += 1
    return n * flops / (time.perf_counter() - start)


def machine_rates(members: int) -> tuple[float, float]:
    """(a 2048^3 float32 product's FLOP/s, a batched product at the second block's shapes)."""
    import torch

    a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
    big = rate(lambda: a @ b, 2 * 2048**3)
    cols, w = torch.randn(members, BATCH * 10, 75), torch.randn(members, 75, 25)
    conv = rate(lambda: torch.bmm(cols, w), 2 * members * BATCH * 10 * 75 * 25)
    return big, conv


def main() -> None:
    from rounds import mnist1d_sweep_vs_plain  # benchmarks/ is on sys.path when a script there runs

    timings: list[float] = []
    args = mnist1d_sweep_vs_plain(__doc__, __file__, plain, ACTS, BATCH, ["model=cnn", f"lr={LR}"],
                                  f"model=cnn data=mnist1d (MNIST-1D's CNN), batch_size={BATCH}, shuffle=true, lr={LR}",
                                  epochs=2, plain_seeds=3, quick=(2, 1, 1), sweep_walls=timings)
    if args is None:  # the plain loop's worker process
        return
    flops = step_flops()
    big, conv = machine_rates(min(len(ACTS) * args.seeds, 240))
    trained = args.sweep_steps * flops / min(timings)
    print(f"training FLOPs per member step {flops / 1e6:.1f} M; the fastest sweep process trained at "
          f"{trained / 1e9:.1f} GFLOP/s (whole process, start-up included)")
    print(f"machine: float32 2048^3 product {big / 1e9:.1f} GFLOP/s, batched product at block 2's shapes "
          f"{conv / 1e9:.1f} GFLOP/s; training reaches {trained / big:.0%} and {trained / conv:.0%} of them")


if __name__ == "__main__":
    main()
