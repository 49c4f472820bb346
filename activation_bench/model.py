"""The two-layer MLP regressor, as a stack of independent members trained at once.

Member m computes  y = act_m(x_m @ W1[m] + b1[m]) @ W2[m] + b2[m]  with one output per sample
(the output layer, a single row, is evaluated as a multiply and a sum).
A single run is a stack of one. Weights are stored [members, in, out] so one `baddbmm` evaluates
every member's layer; activations are applied per contiguous slice of members that share one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn


def linear_init(
    fan_in: int, fan_out: int, gen: torch.Generator, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """torch.nn.Linear's default init, U(-1/sqrt(fan_in), 1/sqrt(fan_in)), from a generator.

    Returns the weight as [fan_in, fan_out] (transposed from nn.Linear's [out, in]) and the bias.
    """
    bound = 1.0 / math.sqrt(fan_in)
    w = torch.empty(fan_out, fan_in, dtype=dtype).uniform_(-bound, bound, generator=gen)
    b = torch.empty(fan_out, dtype=dtype).uniform_(-bound, bound, generator=gen)
    return w.t().contiguous(), b


@dataclass
class Slice:
    """Members [start, stop) of the stack share this activation module."""

    start: int
    stop: int
    module: nn.Module
    per_member: bool = False


class StackedMLP(nn.Module):
    def __init__(
        self,
        w1: torch.Tensor,  # [M, in, h1]
        b1: torch.Tensor,  # [M, 1, h1]
        w2: torch.Tensor,  # [M, 1, h2]: the output layer's single row
        b2: torch.Tensor,  # [M, 1, 1]; stored padded to [M, 1, 16], see below
        slices: list[Slice],
    ) -> None:
        super().__init__()
        self.w1, self.b1 = nn.Parameter(w1), nn.Parameter(b1)
        # The output bias is one number per member. Stored alone it is an M-element tensor, and
        # vectorised optimiser kernels treat its elements by scalar or SIMD code depending on M,
        # which rounds differently. Padding each member's bias to 16 elements (one AVX-512
        # vector; the padding's gradient is zero, so it stays zero) keeps a member's update the
        # same in a stack of any size.
        self.w2 = nn.Parameter(w2)
        self.b2_padded = nn.Parameter(torch.nn.functional.pad(b2, (0, 15)))
        self.slices = slices
        self.acts = nn.ModuleList(s.module for s in slices)  # registers PReLU weights etc.

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [M, N, in] -> [M, N, 1]."""
        h = torch.baddbmm(self.b1, x, self.w1)
        if len(self.slices) == 1:
            a = self.slices[0].module(h)
        else:
            # split (not indexing) so that backward is one cat, not a zero-filled copy per slice
            parts = h.split([s.stop - s.start for s in self.slices], dim=0)
            a = torch.cat([s.module(part) for s, part in zip(self.slices, parts)], dim=0)
        # one output unit: a broadcast multiply and a sum beat three tiny batched GEMMs
        # (forward and two in backward) by about 1 ms a step for 480 members
        return (a * self.w2).sum(dim=-1, keepdim=True) + self.b2_padded[..., :1]


def member_mse(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Per-member mean squared error, [M]. Refuses shape mismatches instead of broadcasting.

    The seed notebook's second layer produced 64 outputs against a 1-column target and
    nn.MSELoss broadcast silently; here that is an error.
    """
    if pred.shape != target.shape:
        raise ValueError(
            f"prediction shape {tuple(pred.shape)} does not match target shape "
            f"{tuple(target.shape)}; refusing to broadcast in the loss"
        )
    return (pred - target).square().mean(dim=tuple(range(1, pred.dim())))
