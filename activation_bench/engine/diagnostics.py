"""Training diagnostics: per-layer gradient and activation norms while training (grads.csv), and
the share of dead or saturated hidden units at the end (summary.json).

Both read the stacked model without changing it: the norms are taken after backward and before
the optimiser step, and the unit shares from a separate pass in eval mode after training.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from activation_bench.engine.models.base import MemberLayers

SATURATED_SLOPE = 1e-3  # |f'(h)| below this on every sample: a saturated (or dead) unit
SHARE_BYTES = 16 << 20  # a convnet's unit-share pass: its largest tensor per chunk of rows (see share_rows)


def member_norms(t: torch.Tensor) -> torch.Tensor:
    """Each member's L2 norm [M] of t [M, ...], detached: what GradLog records (the compiled step
    computes its norms with this too)."""
    return t.detach().flatten(1).norm(dim=1)


class GradLog:
    """Per logged epoch, hidden layer and member: the L2 norm of the layer's weight gradient and
    of its activation output (over the batch's samples and the layer's units).

    Logged epochs: 1, every `every`-th, and the last. With minibatches, the epoch's last batch."""

    def __init__(self, every: int, epochs: int, depth: int, members: int, dtype: torch.dtype, device: str) -> None:
        self.epochs = [e for e in range(1, epochs + 1) if e == 1 or e % every == 0 or e == epochs]
        self.row = {e: i for i, e in enumerate(self.epochs)}
        shape = (len(self.epochs), depth, members)
        self.weight_grad = torch.full(shape, float("nan"), dtype=dtype, device=device)
        self.act = torch.full(shape, float("nan"), dtype=dtype, device=device)

    def due(self, epoch: int) -> bool:
        return epoch in self.row

    @torch.no_grad()
    def add(self, epoch: int, model: MemberLayers, outputs: list[torch.Tensor]) -> None:
        i = self.row[epoch]
        for layer, (w, a) in enumerate(zip(model.ws, outputs)):
            self.weight_grad[i, layer] = member_norms(w.grad)
            self.act[i, layer] = member_norms(a)

    def put(self, epoch: int, weight_grad: torch.Tensor, act: torch.Tensor) -> None:
        """The norms [depth, M] as the compiled step computed them (add's, from its tensors)."""
        self.weight_grad[self.row[epoch]] = weight_grad
        self.act[self.row[epoch]] = act

    def per_member(self, stops: list[int]) -> list[list[tuple[int, int, float, float]]]:
        """Each member's rows (epoch, layer, weight_grad_norm, act_norm), up to its last epoch."""
        wg, an = self.weight_grad.cpu().tolist(), self.act.cpu().tolist()
        out = []
        for m, stop in enumerate(stops):
            out.append([(e, k + 1, wg[i][k][m], an[i][k][m])
                        for i, e in enumerate(self.epochs) if e <= stop for k in range(len(wg[i]))])
        return out


def unit_shares(model: MemberLayers, x: torch.Tensor,
                rows: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Per hidden layer and member, the share of units that are dead and that are saturated on
    every sample of x, each [depth, M] (call in eval mode, so stochastic activations are their
    expectations); with `rows`, x is passed through in chunks of that many samples (a convnet).

    dead: the unit outputs exactly 0 for every sample (a dead ReLU; a convnet's channel: at every
    position too). saturated: the activation's slope |f'(h)| is below SATURATED_SLOPE for every
    sample, so no gradient passes through the unit (dead ReLUs count here too; tanh and sigmoid far
    from 0). For gated units, whose output is not an elementwise function of one pre-activation,
    the saturated share is NaN. The layers are those of the forward pass: normalized (batch norm
    with its running statistics in eval mode) and with residual skips where the model has them.
    """
    chunks = [_unit_masks(model, part) for part in (x.split(rows, dim=1) if rows else [x])]
    return combine(chunks, model.depth, x.dtype)


Masks = list[tuple[torch.Tensor, torch.Tensor | None]]  # per hidden layer: (dead, saturated or None) [M, units]


def combine(chunks: list[Masks], depth: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """The shares [depth, M] of units dead (and saturated) on every chunk of samples: a unit counts
    where it is so in every chunk; saturated NaN where a layer's units are gated (mask None)."""
    dead, saturated = [], []
    for layer in range(depth):
        d = torch.stack([c[layer][0] for c in chunks]).all(0)
        dead.append(d.to(dtype).mean(dim=-1))
        s = [c[layer][1] for c in chunks]
        saturated.append(torch.stack(s).all(0).to(dtype).mean(dim=-1) if s[0] is not None  # type: ignore[arg-type]
                         else torch.full_like(dead[-1], float("nan")))
    return torch.stack(dead), torch.stack(saturated)


def share_rows(model: Any, x: torch.Tensor) -> int:
    """Rows per chunk of a convnet's unit-share pass over x [M, N, ...]: its largest tensor (a
    block's im2col copy or output over the members) within SHARE_BYTES. glibc maps a block above
    32 MB afresh at every allocation and faults it in page by page: in chunks of 1,000 rows
    (MNIST-1D's CNN, 80 members: 152 MB) a one-epoch sweep took 6.7 million page faults and 13 s
    of system time, in chunks of 100 rows 2.5 million and 6 s (2026-11-26, 2-core AMD EPYC)."""
    per_row = max(math.prod(b.conv_positions) * max(b.fan_in, b.c_out) for b in model.geometry)
    return max(1, SHARE_BYTES // (x.shape[0] * per_row * x.element_size()))


def _within(t: torch.Tensor, low: float, high: float, strict: bool = False) -> torch.Tensor:
    """Whether every row of t [M, rows, units] lies in [low, high] (strict: in (low, high)), per
    member and unit [M, units]; a NaN anywhere in a unit's rows makes it False (amin and amax
    propagate it, and it fails every comparison). A reduction over the rows is one pass at memory
    speed: all() along them ran at a third of its speed, count_nonzero(dim=1) casts its mask to
    int64 first and aminmax took 3.5x amin + amax ([60, 3200, 64]: 15.6 ms against 4.4); the share
    pass of 60 MNIST-1D members at depth 2 x 64 took 0.26 s with count_nonzero (2026-11-27,
    2-core AMD EPYC)."""
    lo, hi = t.amin(dim=1), t.amax(dim=1)
    return (lo > low) & (hi < high) if strict else (lo >= low) & (hi <= high)


def _unit_masks(model: MemberLayers, x: torch.Tensor) -> Masks:
    """Per hidden layer, which units [M, units] are dead and which saturated on every sample of x
    (None: gated units, no elementwise slope)."""
    masks = []
    a = x.detach()
    for layer in range(model.depth):
        with torch.no_grad():
            h = model.pre_activation(layer, a)
        out, layer_masks = activated(model, layer, h)
        masks.append(layer_masks)
        a = model.layer_output(layer, a, out)
    return masks


def activated(model: MemberLayers, layer: int, h: torch.Tensor) -> tuple[torch.Tensor, tuple[torch.Tensor,
                                                                                                torch.Tensor | None]]:
    """The layer's activation output on its input h [M, rows, units] (detached), and which units
    are dead and which saturated on every row (saturated None for gated units: no elementwise slope)."""
    return activated_by(lambda t: model.activate(layer, t), h)


def activated_by(activate: Any, h: torch.Tensor) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor | None]]:
    """`activated` for any activation h [M, rows, units] -> output (model=module's sites: each
    member's own module): the one definition of a dead and of a saturated unit."""
    h = h.detach().requires_grad_(True)
    with torch.enable_grad():
        out = activate(h)
    dead = _within(out.detach(), 0.0, 0.0)
    saturated = None
    if out.shape == h.shape:
        (slope,) = torch.autograd.grad(out.sum(), h)
        saturated = _within(slope, -SATURATED_SLOPE, SATURATED_SLOPE, strict=True)
    return out.detach(), (dead, saturated)
