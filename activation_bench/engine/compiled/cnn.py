"""The compiled step of the convnet (model=cnn): cnn.py's StackedCNN written once more as a pure
function of the stack's parameters, differentiated by torch.func inside the graph inductor
compiles (compiled_mlp.train_step), so that the elementwise work between a block's batched
products (im2col's copies, the activation and its derivative, norm, pooling, dropout, the loss,
and Adam's update) runs as a few fused loops instead of one pass over [members, rows x positions,
channels] each.

The ops are the eager model's (the same channels-last im2col windows in the same row order, the
same pooling, batch norm's statistics over samples and positions, the head over the flattened or
pooled features); the gradient of the windows is autograd's, not _Im2col's hand-written one (a
custom autograd.Function does not trace under torch.func). Evaluation and the unit shares run
compiled passes over a split in parts (`parts`); the evaluation takes the loss and accuracy of
the joined outputs with the eager engine's functions.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Any

import torch
from torch.nn import functional as F

from activation_bench.engine.compiled.mlp import (
    Act,
    Aux,
    Layout,
    affine,
    cross_entropy,
    folded_affine,
    layer_activation,
    layout_of,
    train_step,
)

# the dropout masks are the MLP step's (by each model's dropout_shapes): choose.py asks this module for them
from activation_bench.engine.compiled.mlp import masks as masks  # noqa: F401 - a re-export
from activation_bench.engine.diagnostics import SATURATED_SLOPE, member_norms, share_rows
from activation_bench.engine.models import norm
from activation_bench.engine.models.conv_shapes import Block
from activation_bench.engine.models.losses import member_accuracy, member_cross_entropy, member_mse

SplitFn = Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]  # a split's (x, y) -> two tensors


def layout(model: Any, params: list[torch.Tensor]) -> Layout:
    """compiled_mlp.layout for a StackedCNN: each block's weight, bias (None with batch norm) and
    norm's gamma and beta; the head's weight and bias (both padded to PAD_OUT logits)."""
    return layout_of(params, list(model.conv_ws), model.conv_bs, model.norms, model.w_out, model.b_out)


def windows(a: torch.Tensor, b: Block) -> torch.Tensor:
    """_Im2col's forward: a channels-last input [M, N, *positions, C] -> its zero-padded windows
    [M, N x positions', kernel^d x C], kernel offsets outer and channels inner. Written as one
    strided slice per kernel offset, stacked: inductor compiled unfold over two axes (and its
    backward) into code that corrupted the heap (torch 2.13, CPU)."""
    dims = a.dim() - 3
    if b.padding:
        a = F.pad(a, (0, 0) + (b.padding, b.padding) * dims)
    s = b.stride
    parts = [a[(slice(None), slice(None),
                *(slice(j, j + s * (n - 1) + 1, s) for j, n in zip(offset, b.conv_positions)))]
             for offset in itertools.product(range(b.kernel), repeat=dims)]
    return torch.stack(parts, dim=-2).reshape(a.shape[0], -1, b.fan_in)


def pooled(out: torch.Tensor, b: Block, pool: str, k: int) -> torch.Tensor:
    """StackedCNN.layer_output: the activation output [M, rows, C] as [M, N, *positions, C],
    max- or average-pooled (windows of k, the incomplete last one dropped). Each window's values
    are the last axis in the order unfold gives them (so max's gradient goes to the same first
    largest value), made by a reshape and a permutation instead of unfold (see windows())."""
    dims = len(b.conv_positions)
    out = out.reshape(out.shape[0], -1, *b.conv_positions, out.shape[-1])
    if pool == "none":
        return out
    m, n, c = out.shape[0], out.shape[1], out.shape[-1]
    for axis, size in enumerate(b.positions_out):
        out = out.narrow(2 + axis, 0, size * k)
    out = out.reshape(m, n, *(d for size in b.positions_out for d in (size, k)), c)
    order = [0, 1, *(2 + 2 * i for i in range(dims)), 2 + 2 * dims, *(3 + 2 * i for i in range(dims))]
    out = out.permute(order).flatten(-dims)
    return out.max(-1).values if pool == "max" else out.mean(-1)


class _Shape:
    """What the pure functions read off the eager model, as plain values."""

    def __init__(self, model: Any) -> None:
        self.geometry: list[Block] = list(model.geometry)
        self.input_shape: tuple[int, ...] = tuple(model.input_shape)
        self.dims, self.n_out = model.dims, model.n_out
        self.pool, self.pool_size, self.global_pool = model.pool, model.pool_size, model.global_pool
        self.norm = model.norms[0].kind if model.norms is not None else "none"

    def images(self, x: torch.Tensor) -> torch.Tensor:
        """Flat features [M, N, C x positions] -> channels-last [M, N, *positions, C]."""
        return x.reshape(x.shape[0], x.shape[1], *self.input_shape).movedim(2, -1)

    def head(self, a: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """The logits (or the regressor's output) [M, N, n_out] of the last block's output."""
        m, n = a.shape[:2]
        feats = a.mean(dim=tuple(range(2, 2 + self.dims))) if self.global_pool else a.reshape(m, n, -1)
        return affine(feats, w, b)[..., : self.n_out]

    def rows(self, layer: int, batch: int) -> int:
        """The rows a block's batch statistics are over: samples x the convolution's positions."""
        return batch * math.prod(self.geometry[layer].conv_positions)


def step_function(acts: list[Act], sizes: list[int], lay: Layout, model: Any, kind: str,
                  betas: tuple[float, float], eps: float, grad_norms: bool = False) -> Callable[..., Any]:
    """The pure step, with compiled_mlp.step_function's arguments and effects: (params, exp_avgs,
    exp_avg_sqs, running, masks, scale, x, y) -> per-member loss [M] before the update (with
    grad_norms, and the norms compiled_mlp.train_step gives)."""
    shape, activate = _Shape(model), layer_activation(acts, sizes, lay)
    depth, dropout = len(shape.geometry), model.dropout is not None

    def forward(params: list[torch.Tensor], x: torch.Tensor, y: torch.Tensor,
                masks: list[torch.Tensor]) -> tuple[torch.Tensor, Aux]:
        a, stats, act_norms = shape.images(x), [], []
        for k, block in enumerate(shape.geometry):
            cols, b = windows(a, block), lay.b[k]
            h = affine(cols, params[lay.w[k]], None if b is None else params[b])
            if shape.norm == "batch":
                h, mean, var, _, _ = norm.standardize(h, params[lay.gamma[k]], params[lay.beta[k]], 1)  # type: ignore[index]
                stats += [mean.detach(), var.detach()]
            out = activate(h, params, k, masks[depth:] if dropout else masks)
            if grad_norms:
                act_norms.append(member_norms(out))
            a = pooled(out, block, shape.pool, shape.pool_size)
            if dropout:
                a = (a.reshape(a.shape[0], -1, a.shape[-1]) * masks[k]).view(a.shape)
        out = shape.head(a, params[lay.w2], params[lay.b2])
        loss = (out - y).square().mean(dim=(1, 2)) if shape.n_out == 1 else cross_entropy(out, y)
        return loss, (stats, act_norms)

    return train_step(forward, shape.rows, shape.norm == "batch", kind, betas, eps, lay.w if grad_norms else None)


def plain(model: Any) -> bool:
    """Whether the hand-written step of compiled/choose.py takes this model: never a convnet."""
    return False


def eval_function(acts: list[Act], sizes: list[int], lay: Layout, model: Any,
                  classify: bool) -> Callable[..., torch.Tensor]:
    """The pure evaluation forward: (params, running, x, y) -> the outputs [M, N, n_out] (y unused:
    compile_store keys a function's shapes by its last two arguments), no dropout, batch norm from
    its running statistics folded into the weight (as StackedCNN.normalized). The loss and accuracy
    of the outputs are `evaluation`'s (eager), so `classify` is not needed here."""
    shape, blocks = _Shape(model), _eval_blocks(acts, sizes, lay, model)

    def outputs(params: list[torch.Tensor], running: list[torch.Tensor], x: torch.Tensor,
                y: torch.Tensor) -> torch.Tensor:  # noqa: ARG001
        a = shape.images(x)
        for k in range(len(shape.geometry)):
            a, _, _ = blocks(params, running, k, a)
        return shape.head(a, params[lay.w2], params[lay.b2])

    return outputs


def shares_function(acts: list[Act], sizes: list[int], lay: Layout, model: Any) -> Callable[..., list[torch.Tensor]]:
    """The unit-share pass (diagnostics.unit_shares) in evaluation mode: (params, running, x, y) ->
    per block the count of nonzero outputs of each member's channel over x's rows and positions
    [M, C], and the count of slopes |f'(h)| not below SATURATED_SLOPE [M, C] (NaN slopes count,
    as they fail the comparison; -1 for gated units, whose output is not elementwise); y unused."""
    shape, blocks, activate = _Shape(model), _eval_blocks(acts, sizes, lay, model), layer_activation(acts, sizes, lay)

    def counts(params: list[torch.Tensor], running: list[torch.Tensor], x: torch.Tensor,
               y: torch.Tensor) -> list[torch.Tensor]:  # noqa: ARG001
        a, out = shape.images(x), []
        for k in range(len(shape.geometry)):
            a, h, act = blocks(params, running, k, a)
            nonzero = torch.count_nonzero(act, dim=1)
            if act.shape == h.shape:
                _, back = torch.func.vjp(lambda t, k=k: activate(t, params, k), h)
                slope = back(torch.ones_like(act))[0]
                out += [nonzero, torch.count_nonzero(~(slope.abs() < SATURATED_SLOPE), dim=1)]
            else:  # gated units: no elementwise slope, -1 marks it
                out += [nonzero, torch.full_like(nonzero, -1)]
        return out

    return counts


def _eval_blocks(acts: list[Act], sizes: list[int], lay: Layout, model: Any) -> Callable[..., tuple[torch.Tensor, ...]]:
    """One block in evaluation mode: (params, running, k, a) -> (the next block's input, the
    activation's input h [M, rows, C] and its output)."""
    shape, activate = _Shape(model), layer_activation(acts, sizes, lay)

    def block(params: list[torch.Tensor], running: list[torch.Tensor], k: int,
              a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        b = shape.geometry[k]
        cols, w, bias = windows(a, b), params[lay.w[k]], lay.b[k]
        if shape.norm == "batch":
            h = folded_affine(cols, w, params, running, lay, k)
        else:
            h = affine(cols, w, None if bias is None else params[bias])
        act = activate(h, params, k)
        return pooled(act, b, shape.pool, shape.pool_size), h, act

    return block


def parts(model: Any, x: torch.Tensor, y: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """A split as the compiled evaluation and unit-share passes take it: in equal parts of at most
    diagnostics.share_rows rows, the last filled up with the split's first rows, so that every
    part has one shape (one compiled function; the evaluation drops the filler rows' outputs, and a
    row seen twice changes no share). The parts' largest tensors stay within SHARE_BYTES: larger
    ones are fresh mappings of glibc's, faulted in page by page (the unit-share pass in parts of
    800 rows took 1.7 s a stack against the eager pass's 1.16 s, 0.58 s in these parts)."""
    n = x.shape[1]
    rows = -(-n // -(-n // share_rows(model, x)))
    xs, ys = list(x.split(rows, dim=1)), list(y.split(rows, dim=1))
    fill = -n % rows
    if fill:  # only the last part is copied (parts are views: evaluation calls this every epoch)
        xs[-1], ys[-1] = torch.cat([xs[-1], x[:, :fill]], dim=1), torch.cat([ys[-1], y[:, :fill]], dim=1)
    return list(zip(xs, ys))


def evaluation(evaluate: Callable[..., torch.Tensor], params: list[torch.Tensor], running: list[torch.Tensor],
               model: Any, classify: bool) -> SplitFn:
    """Compiled.evaluate: the compiled outputs of each part, joined, and the eager engine's loss
    and accuracy of them."""

    def run(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = torch.cat([evaluate(params, running, *part) for part in parts(model, x, y)], dim=1)[:, : x.shape[1]]
        if not classify:
            return member_mse(out, y), torch.zeros_like(out[:, 0, 0])
        return member_cross_entropy(out, y), member_accuracy(out, y)

    return run


def unit_shares(shares: Callable[..., list[torch.Tensor]], params: list[torch.Tensor],
                running: list[torch.Tensor], model: Any) -> SplitFn:
    """Compiled.shares: diagnostics.unit_shares from the compiled counts of every part (a unit is
    dead where no part counts a nonzero output, saturated where none counts a slope not below
    SATURATED_SLOPE; NaN for gated units)."""

    def run(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.no_grad():  # as build() checked it (grad mode is one of the graph's guards)
            counts = [shares(params, running, *part) for part in parts(model, x, y)]
        totals = [torch.stack(column).sum(0) for column in zip(*counts)]
        dead = torch.stack([(t == 0).to(x.dtype).mean(dim=-1) for t in totals[0::2]])
        saturated = torch.stack([(t == 0).to(x.dtype).mean(dim=-1) if bool((t >= 0).all())
                                 else torch.full_like(t[..., 0], float("nan"), dtype=x.dtype) for t in totals[1::2]])
        return dead, saturated

    return run
