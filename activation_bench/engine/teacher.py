"""Synthetic data sets with their targets: random targets (as in the seed notebook) or a teacher
network's outputs. The teacher is a small network built from the activation registry and the model's
initialiser, so it lives in the engine; the inputs and random targets are data/synthetic.py's draws."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from activation_bench.data import synthetic
from activation_bench.data.synthetic import Dataset, generator
from activation_bench.engine.activations import registry as activations
from activation_bench.engine.models.base import linear_init

if TYPE_CHECKING:
    from activation_bench.cfg import Cfg


def make_dataset(cfg: Cfg) -> Dataset:
    """Inputs from the configured distribution; targets random (as in the seed) or from the teacher
    (data/synthetic.py draws them)."""
    return synthetic.make_dataset(cfg, teacher_targets)


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
