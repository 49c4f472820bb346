"""Data sets, drawn from seeded generators: identical for every activation at the same seed."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from activation_bench.config import Cfg

DTYPES = {"float32": torch.float32, "float64": torch.float64}


def derived_seed(seed: int, purpose: str) -> int:
    """A seed for one purpose (data, init, teacher, activation), derived from the run's seed.

    Separate streams make runs that differ only in activation see identical data and identical
    initial weights, which is what makes comparisons paired.
    """
    digest = hashlib.sha256(f"activation-bench:{seed}:{purpose}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def generator(seed: int, purpose: str) -> torch.Generator:
    return torch.Generator().manual_seed(derived_seed(seed, purpose))


@dataclass
class Dataset:
    x: torch.Tensor  # [n_samples, input_dim]
    y: torch.Tensor  # [n_samples, 1]
    x_val: torch.Tensor  # [n_val, input_dim]
    y_val: torch.Tensor  # [n_val, 1]
    x_test: torch.Tensor | None = None  # [n_test, input_dim]: real and function tasks only
    y_test: torch.Tensor | None = None
    info: dict[str, Any] | None = None  # real and function tasks: sizes, source, target scale


def _draw(d: Cfg, shape: tuple[int, ...], gen: torch.Generator, dtype: torch.dtype) -> torch.Tensor:
    # drawn in float32 whatever the dtype (torch draws other numbers for float64), so a float64
    # run sees the same data as the float32 run of the same seed
    if d.name == "normal":
        return torch.randn(shape, generator=gen).to(dtype) * d.std + d.mean
    return torch.rand(shape, generator=gen).to(dtype) * (d.high - d.low) + d.low


def make_dataset(cfg: Cfg) -> Dataset:
    """Inputs from the configured distribution; targets random (as in the seed) or from a teacher."""
    d = cfg.data
    dtype = DTYPES[cfg.dtype]
    gen = generator(cfg.seed, "data")
    n, n_val = d.n_samples, d.n_val
    if d.target == "random":
        x = _draw(d, (n, d.input_dim), gen, dtype)
        y = _draw(d, (n, 1), gen, dtype)
        x_val = _draw(d, (n_val, d.input_dim), gen, dtype)
        y_val = _draw(d, (n_val, 1), gen, dtype)
        return Dataset(x, y, x_val, y_val)
    # training inputs first, then validation inputs, then noise: the training set does not depend
    # on n_val or noise, and the noise does not depend on the teacher
    x = _draw(d, (n, d.input_dim), gen, dtype)
    x_val = _draw(d, (n_val, d.input_dim), gen, dtype)
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
    from activation_bench import activations
    from activation_bench.model import linear_init

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
