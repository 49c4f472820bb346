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
