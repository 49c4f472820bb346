"""A convnet's geometry from its config, in plain arithmetic (no torch: config validation uses it
before anything is built).

Block k maps (channels, *positions) to (channels[k], *positions'): a convolution of kernel[k]
(square for images), stride[k] and zero padding[k] on every side, positions' = (p + 2 padding -
kernel) // stride + 1 per spatial axis (torch's Conv1d/Conv2d arithmetic), then with model.pool
a max or average pooling of window and stride model.pool_size (positions // pool_size, the
incomplete last window dropped, as torch's pooling does without ceil_mode). The head reads the
last block's channels x positions (flattened), or its channels averaged over positions
(model.global_pool).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

POOLS = ("none", "max", "avg")
LIST_KEYS = ("channels", "kernel", "stride", "padding")
PAD_OUT = 16  # an output layer's columns are padded to a multiple of 16 (one AVX-512 vector): see StackedMLP


@dataclass(frozen=True)
class Block:
    """One convolution block's sizes: its input (channels, positions), the convolution's output
    positions and the positions left after pooling."""

    c_in: int
    c_out: int
    kernel: int
    stride: int
    padding: int
    positions_in: tuple[int, ...]
    conv_positions: tuple[int, ...]
    positions_out: tuple[int, ...]

    @property
    def fan_in(self) -> int:
        """Inputs of one output value: c_in x kernel^dims (the im2col row's width)."""
        return self.c_in * self.kernel ** len(self.positions_in)


def blocks(input_shape: tuple[int, ...], model: Any) -> list[Block]:
    """Each block's sizes for an input (channels, *positions); raises ValueError with one line
    where the config cannot apply (a kernel larger than its padded input, pooling that leaves no
    positions, lists of different lengths, zero or negative sizes)."""
    lists = {k: list(model[k]) for k in LIST_KEYS}
    lengths = {k: len(v) for k, v in lists.items()}
    if len(set(lengths.values())) != 1:
        given = ", ".join(f"model.{k} has {n}" for k, n in lengths.items())
        raise ValueError(f"model.channels, kernel, stride and padding need one value per block: {given}")
    if not lists["channels"]:
        raise ValueError("model.channels is empty: a CNN needs at least one convolution block")
    for key, low in (("channels", 1), ("kernel", 1), ("stride", 1), ("padding", 0)):
        bad = [v for v in lists[key] if not isinstance(v, int) or isinstance(v, bool) or v < low]
        if bad:
            raise ValueError(f"model.{key} must be integers >= {low}, got {lists[key]}")
    pool, size = model.pool, model.pool_size
    if pool not in POOLS:
        raise ValueError(f"unknown model.pool '{pool}'; valid: {', '.join(POOLS)}")
    if not isinstance(size, int) or size < 1:
        raise ValueError(f"model.pool_size must be an integer >= 1, got {size}")
    c, positions = input_shape[0], tuple(input_shape[1:])
    out = []
    for i, (ch, k, s, p) in enumerate(zip(*lists.values())):
        if any(n + 2 * p < k for n in positions):
            raise ValueError(f"block {i + 1}'s kernel {k} is larger than its input of {_shape(positions)} positions "
                             f"padded by {p} on each side (input shape {_shape(input_shape)})")
        conv = tuple((n + 2 * p - k) // s + 1 for n in positions)
        pooled = tuple(n // size for n in conv) if pool != "none" else conv
        if pool != "none" and min(pooled) < 1:
            raise ValueError(f"block {i + 1}'s {pool} pooling of size {size} leaves no positions (its convolution "
                             f"gives {_shape(conv)}); lower model.pool_size or use model.pool=none")
        out.append(Block(c, ch, k, s, p, positions, conv, pooled))
        c, positions = ch, pooled
    return out


def head_inputs(input_shape: tuple[int, ...], model: Any) -> int:
    """The head's inputs: the last block's channels, times its positions unless global_pool."""
    last = blocks(input_shape, model)[-1]
    return last.c_out * (1 if model.global_pool else math.prod(last.positions_out))


def _shape(dims: tuple[int, ...]) -> str:
    return "x".join(str(d) for d in dims)
