"""The benchmark grid shared by the peers, and actbench's own members for their check mode.

Grid: 8 activations x 2 data distributions x seeds; each member is a 64-64-1 MLP (Linear ->
activation -> Linear) trained full-batch on 10 samples with Adam (lr 1e-3), its MSE kept every
epoch. This module imports only numpy at the top: the JAX peer must not pay for torch.
"""

from __future__ import annotations

import numpy as np

ACTS = ["gelu", "relu", "silu", "elu", "tanh", "mish", "leaky_relu", "softplus"]
DATA = ["normal", "uniform"]
N_SAMPLES, INPUT_DIM, HIDDEN, LR = 10, 64, 64, 1e-3


def random_members(n: int, data: str, seed: int) -> dict[str, np.ndarray]:
    """n members' data and initial weights (nn.Linear's default init), as numpy float32 arrays.

    In benchmark mode the peers draw their own numbers: what is timed is training, and the
    numbers drawn do not change its cost.
    """
    rng = np.random.default_rng(seed)
    if data == "normal":
        x, y = rng.standard_normal((n, N_SAMPLES, INPUT_DIM)), rng.standard_normal((n, N_SAMPLES, 1))
    else:
        x, y = rng.uniform(-1, 1, (n, N_SAMPLES, INPUT_DIM)), rng.uniform(-1, 1, (n, N_SAMPLES, 1))
    b1, b2 = 1 / np.sqrt(INPUT_DIM), 1 / np.sqrt(HIDDEN)
    out = {
        "x": x, "y": y,
        "w1": rng.uniform(-b1, b1, (n, INPUT_DIM, HIDDEN)), "b1": rng.uniform(-b1, b1, (n, HIDDEN)),
        "w2": rng.uniform(-b2, b2, (n, HIDDEN)), "b2": rng.uniform(-b2, b2, (n,)),
    }
    return {k: v.astype(np.float32) for k, v in out.items()}


def stacks(seeds: int) -> list[dict[str, np.ndarray]]:
    """One stack per activation of ACTS; its members are DATA x seeds."""
    out = []
    for _act in ACTS:
        parts = [random_members(seeds, d, seed=i) for i, d in enumerate(DATA)]
        out.append({k: np.concatenate([p[k] for p in parts]) for k in parts[0]})
    return out


def actbench_member(act: str, data: str, seed: int, epochs: int) -> tuple[dict[str, np.ndarray], list[float]]:
    """One actbench member's data and initial weights (as the peers store them, [1, ...]) and the
    train losses actbench's engine gives it for `epochs` epochs. For the peers' --check mode."""
    import torch

    from activation_bench.config.compose import compose
    from activation_bench.data.synthetic import generator
    from activation_bench.engine import train
    from activation_bench.engine.models.base import linear_init
    from activation_bench.engine.teacher import make_dataset

    cfg = compose([f"activation={act}", f"data={data}", f"seed={seed}", f"epochs={epochs}"])
    ds = make_dataset(cfg)
    gen = generator(cfg.seed, "init")
    w1, b1 = linear_init(INPUT_DIM, HIDDEN, gen, torch.float32)  # w1 [in, out]
    w2, b2 = linear_init(HIDDEN, 1, gen, torch.float32)  # w2 [hidden, 1]
    arrays = {"x": ds.x, "y": ds.y, "w1": w1, "b1": b1, "w2": w2[:, 0], "b2": b2}
    member = {k: v.numpy()[None].astype(np.float32) for k, v in arrays.items()}
    return member, train.train([cfg])[0].train_loss


def check(name: str, losses_of) -> None:
    """Compare a peer's first epochs with actbench's for seed 0 of every activation x data.

    losses_of(act, member, epochs) -> that member's train losses from the peer.
    """
    epochs, worst = 5, 0.0
    for act in ACTS:
        for data in DATA:
            member, ours = actbench_member(act, data, 0, epochs)
            theirs = [float(v) for v in losses_of(act, member, epochs)]
            rel = max(abs(a - b) / abs(b) for a, b in zip(theirs, ours))
            worst = max(worst, rel)
            status = "ok" if rel <= 1e-5 else "MISMATCH"
            print(f"{name} {act:10s} {data:7s} epochs 1-{epochs}: max relative difference {rel:.1e} {status}")
    print(f"{name}: worst relative difference {worst:.1e} ({'ok' if worst <= 1e-5 else 'MISMATCH'}, rtol 1e-5)")
    if worst > 1e-5:
        raise SystemExit(1)
