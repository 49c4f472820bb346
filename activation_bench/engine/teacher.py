"""Synthetic data sets with their targets: random targets (as in the seed notebook) or a teacher
network's outputs. The teacher is a small network built from the activation registry and the model's
initialiser, so it lives in the engine; the inputs are data/synthetic.py's draws."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from activation_bench.data.synthetic import DTYPES, Dataset, draw, generator
from activation_bench.engine.activations import registry as activations
from activation_bench.engine.models.base import linear_init

if TYPE_CHECKING:
    from activation_bench.cfg import Cfg


def make_dataset(cfg: Cfg) -> Dataset:
    """Inputs from the configured distribution; targets random (as in the seed) or from a teacher."""
    d = cfg.data
    dtype = DTYPES[cfg.dtype]
    gen = generator(cfg.seed, "data")
    n, n_val = d.n_samples, d.n_val
    if d.target == "random":
        x = draw(d, (n, d.input_dim), gen, dtype)
        y = draw(d, (n, 1), gen, dtype)
        x_val = draw(d, (n_val, d.input_dim), gen, dtype)
        y_val = draw(d, (n_val, 1), gen, dtype)
        return Dataset(x, y, x_val, y_val)
    # training inputs first, then validation inputs, then noise: the training set does not depend
    # on n_val or noise, and the noise does not depend on the teacher
    x = draw(d, (n, d.input_dim), gen, dtype)
    x_val = draw(d, (n_val, d.input_dim), gen, dtype)
    y, y_val = teacher_targets(cfg, x), teacher_targets(cfg, x_val)
    if d.noise > 0:
        y = y + d.noise * torch.randn(y.shape, generator=gen).to(dtype)
        y_val = y_val + d.noise * torch.randn(y_val.shape, generator=gen).to(dtype)
    return Dataset(x, y, x_val, y_val)


def teacher_targets(cfg: Cfg, x: torch.Tensor) -> torch.Tensor:
    """A fixed random two-layer teacher network, seeded from the run's seed (not the student's
    init stream): Linear(input_dim, teacher_hidden_dim) -> teacher_activation (eval mode, so the
    stochastic ones are deterministic) -> Linear(., 1). Gated teacher activations get a 2h-wide
    first layer, as the student does. Returns [len(x), 1]."""
    d = cfg.data
    act_cfg = {"name": d.teacher_activation}
    h1, h2 = activations.hidden_width(act_cfg, d.teacher_hidden_dim)
    gen = generator(cfg.seed, "teacher")
    # weights drawn in float32 (as the data): the same teacher for float32 and float64 runs
    w1, b1 = (t.to(x.dtype) for t in linear_init(d.input_dim, h1, gen, torch.float32))
    w2, b2 = (t.to(x.dtype) for t in linear_init(h2, 1, gen, torch.float32))
    act = activations.create_from_config(act_cfg).to(dtype=x.dtype).eval()
    with torch.no_grad():
        return act(x @ w1 + b1) @ w2 + b2
