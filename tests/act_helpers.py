"""User-defined activation modules for the `_target_` tests (importable as `act_helpers`)."""

from __future__ import annotations

import torch
from torch import nn


class ScaledTanh(nn.Module):
    """scale * tanh(x): a user module with a constructor argument."""

    def __init__(self, scale: float = 1.0) -> None:
        super().__init__()
        if scale <= 0:
            raise ValueError("scale must be > 0")
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale * torch.tanh(x)


def not_a_module(x: torch.Tensor) -> torch.Tensor:
    return x


NOT_A_CLASS = 3


class LearnedSlope(nn.Module):
    """A user module with a learned parameter of its own shape: x * sigmoid(beta x), one beta per unit."""

    def __init__(self, width: int = 6) -> None:
        super().__init__()
        self.beta = nn.Parameter(torch.ones(width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(self.beta * x)


class NoisyTanh(nn.Module):
    """A user module that draws from torch's global generator: the compiled step cannot take it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x) + 0.01 * torch.randn_like(x) if self.training else torch.tanh(x)


class RowCentred(nn.Module):
    """A user module that is not elementwise: tanh of x less its mean over the rows (each member's own)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x - x.mean(dim=-2, keepdim=True))


class ShiftedTanh(nn.Module):
    """A user module with a buffer: state the compiled step does not carry."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("shift", torch.zeros(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x - self.shift)


class SignedTanh(nn.Module):
    """A user module whose forward branches on its input's values: tracing cannot follow it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x) if x.sum() > 0 else torch.tanh(-x)
