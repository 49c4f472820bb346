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
model steps per second. Each round also times the sweep at a fifth of the epochs (at least one):
the difference is the marginal time of the extra epochs, whose FLOPs (`roof()`: each convolution
as its im2col product, forward and both gradients, the head, and the evaluated rows' forward) are
printed against torch.bmm's rate at those products' own shapes and against the products + Adam
roof, timed before and after every round (benchmarks/roofline.py).

Usage:
    python -m benchmarks.cnn_throughput [--epochs 2] [--seeds 30] [--repeat 3] [--engine eager]
    python -m benchmarks.cnn_throughput --quick      # a smoke run: 2 seeds, 2 epochs, 1 round
"""

from __future__ import annotations

import math

from benchmarks import mnist1d, roofline
from benchmarks.plain import fit_classifier

ACTS = ["gelu", "relu", "silu", "elu", "tanh", "mish", "leaky_relu", "softplus"]
BATCH, LR = 100, 0.01


def plain(seeds: int, epochs: int) -> int:
    """The loop a user would write, one model at a time; returns the model steps taken."""
    import torch
    from torch import nn

    from activation_bench.config.compose import compose
    from activation_bench.data import splits
    from activation_bench.engine.activations.registry import create

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


def roof() -> roofline.Roof:
    """A member's training step on a batch, as roofline counts it: each convolution a product of
    its im2col rows (samples x output positions) by fan_in x channels (forward, weight gradient,
    and input gradient but for the first block's), the head likewise at its padded 16 logits; an
    evaluated row costs the forward's FLOPs of one sample; the parameters are each block's
    weight and bias and the head's."""
    from activation_bench.config.compose import compose
    from activation_bench.engine.models.conv_shapes import PAD_OUT, blocks

    cfg = compose(["model=cnn", "data=mnist1d"])
    products: list[tuple[int, int, int, str]] = []
    step = row = 0.0
    params: list[tuple[int, ...]] = []
    for i, b in enumerate(blocks((1, 40), cfg.model)):
        rows = BATCH * math.prod(b.conv_positions)
        products += [(rows, b.fan_in, b.c_out, "nn"), (b.fan_in, rows, b.c_out, "tn")]
        if i > 0:  # no one needs the gradient of the data
            products.append((rows, b.c_out, b.fan_in, "nt"))
        forward = 2.0 * rows * b.fan_in * b.c_out
        step += forward * (2 if i == 0 else 3)
        row += forward / BATCH
        params += [(b.fan_in, b.c_out), (1, b.c_out)]
    features, classes = b.c_out * math.prod(b.positions_out), 10
    products += [(BATCH, features, PAD_OUT, "nn"), (features, BATCH, PAD_OUT, "tn"), (BATCH, PAD_OUT, features, "nt")]
    step += 6.0 * BATCH * features * classes
    row += 2.0 * features * classes
    params += [(features, classes), (1, classes)]
    return roofline.Roof(step, row, tuple(products), tuple(params))


def main() -> None:
    mnist1d.sweep_vs_plain(__doc__, "benchmarks.cnn_throughput", plain, ACTS, BATCH, ["model=cnn", f"lr={LR}"],
                           f"model=cnn data=mnist1d (MNIST-1D's CNN), batch_size={BATCH}, shuffle=true, lr={LR}",
                           epochs=2, plain_seeds=3, quick=(2, 2, 1), roof=roof)


if __name__ == "__main__":
    main()
