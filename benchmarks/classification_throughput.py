"""Classification throughput: `actbench sweep` on data=mnist1d against the plain PyTorch loop a user
would write, both as whole processes, side by side in one run.

Grid: 8 activations x 30 seeds on MNIST-1D (3,200 training rows, 800 validation, the canonical 1,000
test rows; 40 features, 10 classes), two hidden layers of 64 (model.depth=2), batch_size=128,
shuffle=true, cross-entropy: 240 runs, 25 minibatch steps an epoch, the validation and test loss
and accuracy evaluated every epoch.

- actbench: the real command, `actbench sweep ...` in a fresh process, timed whole (start-up,
  imports, reading the cached MNIST-1D arrays, splitting, composing, training, writing 240 run
  directories and results.csv).
- plain: a fresh Python process that trains one model at a time as a user would: nn.Sequential,
  nn.CrossEntropyLoss, torch.optim.Adam, a shuffled torch DataLoader over the training rows, and
  the validation and test loss and accuracy every epoch. It runs a sample of the grid (--plain-seeds
  seeds of every activation), which gives its model steps per second, start-up included.

Both use the same data: the seed's split from actbench's data layer (the MNIST-1D cache is filled
before timing). The two run in interleaved rounds (--repeat); the ratio reported is the median of
the rounds' ratios of model steps per second.

Each round also runs the sweep at a fifth of the epochs; the difference is the marginal time of the
other epochs, and the last line gives their training FLOPs per second against torch.bmm's rate at
the stack's own shapes (benchmarks/roofline.py says how FLOPs are counted), against the goal of 0.70.

Usage:
    python -m benchmarks.classification_throughput [--epochs 20] [--seeds 30] [--repeat 3] [--engine compiled]
    python -m benchmarks.classification_throughput --jobs 2   # the sweep as 2 processes of one thread each
    python -m benchmarks.classification_throughput --quick    # a smoke run: 4 seeds, 2 epochs, 1 round
"""

from __future__ import annotations

from benchmarks import mnist1d, roofline
from benchmarks.plain import fit_classifier

ACTS = ["gelu", "relu", "silu", "elu", "tanh", "mish", "leaky_relu", "softplus"]
BATCH, HIDDEN, DEPTH = 128, 64, 2


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
        x, y = torch.tensor(s.x, dtype=torch.float32), torch.tensor(s.y, dtype=torch.int64)
        xv, yv = torch.tensor(s.x_val, dtype=torch.float32), torch.tensor(s.y_val, dtype=torch.int64)
        xt, yt = torch.tensor(s.x_test, dtype=torch.float32), torch.tensor(s.y_test, dtype=torch.int64)
        k = int(y.max()) + 1
        for a in ACTS:
            torch.manual_seed(seed)
            layers: list[nn.Module] = []
            width = x.shape[1]
            for _ in range(DEPTH):
                layers += [nn.Linear(width, HIDDEN), create(a)]
                width = HIDDEN
            model = nn.Sequential(*layers, nn.Linear(width, k))
            steps += fit_classifier(model, x, y, [(xv, yv), (xt, yt)], epochs, BATCH, 1e-3)
    return steps


def roof() -> roofline.Roof:
    """40 inputs, 10 classes (the engine's products run at the logits' padded 16 columns)."""
    return roofline.mlp([40, *[HIDDEN] * DEPTH, 16], BATCH, out=10)


def main() -> None:
    overrides = [f"model.depth={DEPTH}", f"model.hidden_dim={HIDDEN}"]
    mnist1d.sweep_vs_plain(__doc__, "benchmarks.classification_throughput", plain, ACTS, BATCH, overrides,
                           f"data=mnist1d, depth {DEPTH} x {HIDDEN}, batch_size={BATCH}, shuffle=true",
                           epochs=20, plain_seeds=2, quick=(4, 2, 1), roof=roof, goal=">= 0.7")


if __name__ == "__main__":
    main()
