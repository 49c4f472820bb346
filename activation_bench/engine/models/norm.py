"""Normalization of each hidden layer's pre-activations, per member of a stack (model.norm).

A hidden layer computes act(norm(a @ W + b)): the normalization sits between the Linear and the
activation, where the GELU paper's premise ("neuron inputs tend to follow a normal distribution,
especially with Batch Normalization") puts it. For pre-activations h [members, rows, units]:

- batch: each unit standardised over the batch's rows (each member over its own rows: no statistic
  crosses members), then scaled and shifted by learned gamma and beta [members, 1, units]
  (initialised to 1 and 0). In training the batch's own mean and biased variance are used and
  running estimates are updated as torch.nn.BatchNorm1d does (momentum 0.1, the unbiased
  variance); in evaluation (validation and test losses, the unit shares) the running estimates.
- layer: each row standardised over its own units (per sample, the same in training and
  evaluation), with the same learned per-unit gamma and beta (torch.nn.LayerNorm's affine).

eps is 1e-5 for both, torch's default. The forward and backward are written out (`_Normalize`):
torch's var_mean over the rows' axis costs ~50x a plain mean there, and autograd of the explicit
ops twice the kernels. Every op is per member (means along one member's rows or units), so a
member computes the same alone as in any stack.
"""

from __future__ import annotations

import torch
from torch import nn

NORMS = ("none", "batch", "layer")
EPS = 1e-5
MOMENTUM = 0.1


def standardize(h: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor,
                dim: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """gamma * (h - mean) / sqrt(var + eps) + beta, mean and biased var over `dim`: (output, mean,
    var, h - mean, rstd). The one definition of the forward: `_Normalize` (eager) and the compiled
    step (compiled/mlp.py, differentiated there by torch.func) both call it."""
    mean = h.mean(dim, keepdim=True)
    d = h - mean
    var = d.square().mean(dim, keepdim=True)
    rstd = (var + EPS).rsqrt_()
    return torch.addcmul(beta, d, rstd * gamma), mean, var, d, rstd


def update_running(running_mean: torch.Tensor, running_var: torch.Tensor, mean: torch.Tensor, var: torch.Tensor,
                   n: int) -> None:
    """Batch norm's running statistics, in place, after a training batch of n rows with these
    statistics (torch.nn.BatchNorm1d's: momentum MOMENTUM, the unbiased variance)."""
    running_mean.lerp_(mean, MOMENTUM)
    running_var.lerp_(var * (n / (n - 1)), MOMENTUM)


class _Normalize(torch.autograd.Function):
    """gamma * (h - mean) / sqrt(var + eps) + beta, mean and biased var over `dim` (1: the rows,
    batch norm; -1: the units, layer norm), gamma and beta [M, 1, units]; returns the output and
    (no gradient) the mean and var used. With xhat = (h - mean) rstd and g the output's gradient:
        dh = rstd (gamma g - mean(gamma g) - xhat mean(gamma g xhat)),   means over dim,
        dgamma = sum over rows of g xhat,   dbeta = sum over rows of g.
    Along the rows gamma is constant, so batch norm's dh is k g + c1 + c2 (h - mean) with per-unit
    k = gamma rstd, c1 = -k mean(g), c2 = -k rstd^2 mean(g (h - mean)): two fused passes."""

    @staticmethod
    def forward(ctx, h: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor, dim: int):  # type: ignore[override]
        out, mean, var, d, rstd = standardize(h, gamma, beta, dim)
        ctx.save_for_backward(d, rstd, gamma)
        ctx.dim = dim
        ctx.mark_non_differentiable(mean, var)
        return out, mean, var

    @staticmethod
    def backward(ctx, go: torch.Tensor, _mean: torch.Tensor, _var: torch.Tensor):  # type: ignore[override]
        d, rstd, gamma = ctx.saved_tensors
        g_beta = go.sum(1, keepdim=True)
        if ctx.dim == 1:  # rstd [M, 1, units]: constant along the rows
            n = d.shape[1]
            g_d = (go * d).sum(1, keepdim=True)
            k = gamma * rstd
            c1, c2 = k * g_beta / -n, k * rstd.square() * g_d / -n
            return torch.addcmul(c1, go, k).addcmul_(d, c2), g_d * rstd, g_beta, None
        xhat = d * rstd  # rstd [M, N, 1]: one per row
        g_xhat = go * gamma
        proj = (g_xhat * xhat).mean(-1, keepdim=True)
        g_h = (g_xhat - g_xhat.mean(-1, keepdim=True)).sub_(xhat * proj).mul_(rstd)
        return g_h, (go * xhat).sum(1, keepdim=True), g_beta, None


class MemberNorm(nn.Module):
    """One hidden layer's normalization for every member of a stack: weight (gamma) and bias
    (beta) [members, 1, units]; batch norm also keeps running_mean and running_var."""

    def __init__(self, kind: str, members: int, units: int, dtype: torch.dtype, device: str) -> None:
        super().__init__()
        if kind not in ("batch", "layer"):
            raise ValueError(f"unknown norm '{kind}'; valid: batch, layer")
        self.kind = kind
        shape = (members, 1, units)
        self.weight = nn.Parameter(torch.ones(shape, dtype=dtype, device=device))
        self.bias = nn.Parameter(torch.zeros(shape, dtype=dtype, device=device))
        if kind == "batch":
            self.register_buffer("running_mean", torch.zeros(shape, dtype=dtype, device=device))
            self.register_buffer("running_var", torch.ones(shape, dtype=dtype, device=device))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        """h [M, N, units], normalized with its own statistics: batch norm's over the rows (in
        training mode also updating the running statistics), layer norm's over the units. Batch
        norm in evaluation is `folded`, applied by the model to the Linear."""
        if self.kind == "layer":
            return _Normalize.apply(h, self.weight, self.bias, -1)[0]
        out, mean, var = _Normalize.apply(h, self.weight, self.bias, 1)
        if self.training:
            with torch.no_grad():
                update_running(self.running_mean, self.running_var, mean, var, h.shape[1])
        return out

    def folded(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Batch norm in evaluation (the running statistics), h -> scale h + shift, per member and
        unit [M, 1, units]."""
        scale = (self.running_var + EPS).rsqrt_().mul_(self.weight)
        return scale, self.bias - self.running_mean * scale
