"""The convnet (model=cnn), as a stack of independent members trained at once.

Member m computes, for convolution blocks k = 1..B on an input x_m of shape (channels, *positions)
(1-D sequences or 2-D images, see conv_shapes.py),
    a_0 = x_m,   a_k = drop(pool(act_m(norm_k(conv_k(a_{k-1}; W_k[m], b_k[m]))))),
    y = flatten(a_B) @ W_out[m] + b_out[m]       (model.global_pool: the mean over positions instead)
with one output per sample for a regressor or K logits for a classifier. norm is per-channel batch
normalization (model.norm=batch; the convolution then has no bias, as nn.Conv with bias=False
before nn.BatchNorm), drop is dropout in training mode (model.dropout > 0), pool max or average
pooling (model.pool). Gated activations (glu, geglu, ...) halve the channels they get, so a
block's convolution gives twice model.channels[k] to them, as the MLP's hidden Linear does.

How the members are stacked: tensors are channels-last, [M, N, *positions, C], and every
convolution is an im2col (`unfold` of the padded input into windows, [M, N x positions', C_in x
kernel^d]) followed by one `baddbmm` with the members' weights [M, C_in x kernel^d, C_out]: the
MLP's batched product, whose member blocks round alike in a stack of any size (tests/test_cnn.py
checks stacked == alone bit for bit). A grouped convolution would be the other way, but oneDNN
picks its algorithm by shape and rounds groups=M and groups=1 differently (0 of 8 members equal in
a measurement on torch 2.13). The pre-activation of block k is [M, N x positions, C]: rows are
samples times positions and units are channels, so the MLP's batch norm (statistics per channel
over a batch's rows and positions, as nn.BatchNorm1d/2d), activation slices, dropout masks, unit
shares and pre-activation log apply unchanged.
Weights are drawn per member from its own generator in the layout torch's Conv and Linear use
([C_out, C_in, *kernel], [K, C x positions]) and rearranged, so a member starts where the plain
PyTorch model of the same draws does (tests compare training with nn.Conv1d/nn.Conv2d).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import torch
from torch import nn
from torch.nn import functional as F

from activation_bench.cfg import Cfg
from activation_bench.data.synthetic import generator
from activation_bench.engine.activations import registry as activations
from activation_bench.engine.models.base import MemberDropout, MemberLayers, Slice, init_layer
from activation_bench.engine.models.conv_shapes import PAD_OUT, Block, blocks


def conv_init(scheme: str, block: Block, h1: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """One block's weight [C_in x kernel^d, h1] and bias [h1] in float32, as torch's Conv with the
    same init would draw them ([h1, C_in, *kernel], flattened): torch's default is nn.Linear's
    U(+-1/sqrt(fan_in)) with fan_in = C_in x kernel^d; xavier's fan_out counts the kernel too."""
    if scheme != "xavier":
        return init_layer(scheme, block.fan_in, h1, gen, torch.float32)
    receptive = block.kernel ** len(block.positions_in)
    bound = math.sqrt(6.0 / (block.fan_in + h1 * receptive))
    w = torch.empty(h1, block.fan_in).uniform_(-bound, bound, generator=gen)
    return w.t().contiguous(), torch.zeros(h1)


def head_init(scheme: str, channels: int, positions: tuple[int, ...], n_out: int,
              gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """The head's weight [positions x channels, n_out] (channels-last order) and bias [n_out],
    drawn as nn.Linear over torch's channels-first flatten [n_out, C x positions] and reordered."""
    w, b = init_layer(scheme, channels * math.prod(positions), n_out, gen, torch.float32)
    w = w.t().reshape(n_out, channels, *positions).movedim(1, -1).reshape(n_out, -1)
    return w.t().contiguous(), b


class _Im2col(torch.autograd.Function):
    """The windows of a channels-last input [M, N, *positions, C], zero-padded, as rows
    [M, N x positions', kernel^d x C]: kernel offsets outer and channels inner (the weights are
    stored in that row order: copying whole rows of C channels is about 8x faster than torch's
    channel-major order, whose innermost stride is C).

    The backward adds each kernel offset's slice of the rows' gradient into a strided view of the
    padded input's gradient, kernel^d additions of whole channel rows: measured 4x faster than
    autograd's unfold_backward on MNIST-1D's CNN (and each element's sum runs in offset order,
    whatever the stack's size)."""

    @staticmethod
    def forward(ctx, a: torch.Tensor, b: Block) -> torch.Tensor:  # type: ignore[override]
        dims = a.dim() - 3
        ctx.block, ctx.shape = b, a.shape
        if b.padding:
            a = F.pad(a, (0, 0) + (b.padding, b.padding) * dims)
        for axis in range(dims):  # each unfold appends its window axis: [..., C, k_1, ..., k_d]
            a = a.unfold(2 + axis, b.kernel, b.stride)
        return a.movedim(-1 - dims, -1).reshape(a.shape[0], -1, b.fan_in)

    @staticmethod
    def backward(ctx, g: torch.Tensor):  # type: ignore[override]
        if not ctx.needs_input_grad[0]:
            return None, None
        b, shape = ctx.block, ctx.shape
        dims, (m, n), c, p, s = len(shape) - 3, shape[:2], shape[-1], b.padding, b.stride
        windows = g.view(m, n, *b.conv_positions, *([b.kernel] * dims), c)
        grad = g.new_zeros(m, n, *(size + 2 * p for size in shape[2:-1]), c)
        for offset in itertools.product(range(b.kernel), repeat=dims):
            where = tuple(slice(j, j + s * (o - 1) + 1, s) for j, o in zip(offset, b.conv_positions))
            grad[(slice(None), slice(None), *where)] += windows[(..., *offset, slice(None))]
        if p:
            grad = grad[(slice(None), slice(None), *([slice(p, -p)] * dims))]
        return grad, None


def window_major(w: torch.Tensor, block: Block) -> torch.Tensor:
    """Weights [M, C_in x kernel^d, h1] with rows in torch's (channel, kernel...) order -> rows in
    im2col's (kernel..., channel) order."""
    d = len(block.positions_in)
    m, _, h1 = w.shape
    return w.reshape(m, block.c_in, *([block.kernel] * d), h1).movedim(1, -2).reshape(m, block.fan_in, h1).contiguous()


class StackedCNN(MemberLayers):
    def __init__(self, geometry: list[Block], input_shape: tuple[int, ...], ws: list[torch.Tensor],
                 bs: list[torch.Tensor], w_out: torch.Tensor, b_out: torch.Tensor, slices: list[Slice],
                 dropout: MemberDropout | None = None, norm: str = "none", pool: str = "none",
                 pool_size: int = 2, global_pool: bool = False) -> None:
        """ws[k] [M, C_in x kernel^d, h1], bs[k] [M, 1, h1], w_out [M, F, K], b_out [M, 1, K]."""
        super().__init__()
        self.geometry, self.input_shape = geometry, input_shape
        self.dims = len(input_shape) - 1
        self.n_out = b_out.shape[-1]
        self.dropout, self.pool, self.pool_size, self.global_pool = dropout, pool, pool_size, global_pool
        self.conv_ws = nn.ParameterList(nn.Parameter(w) for w in ws)
        # batch norm removes a convolution's bias (see StackedMLP): none is used then
        self.conv_bs = nn.ParameterList(nn.Parameter(b) for b in bs) if norm != "batch" else None
        pad = -self.n_out % PAD_OUT
        self.w_out = nn.Parameter(F.pad(w_out, (0, pad)))
        self.b_out = nn.Parameter(F.pad(b_out, (0, pad)))
        self._init_layers(slices, ws, norm)

    @property
    def ws(self) -> list[torch.Tensor]:
        """Every block's weight [M, C_in x kernel^d, h1] (the gradient log reads these)."""
        return list(self.conv_ws)

    @property
    def depth(self) -> int:
        return len(self.geometry)

    def dropout_shapes(self, rows: int) -> list[tuple[int, int]]:
        """Each block's dropout mask per member on a batch of `rows` samples: (rows x positions after
        pooling, channels)."""
        return [(rows * math.prod(b.positions_out), b.c_out) for b in self.geometry]

    def activation_shapes(self, rows: int) -> list[tuple[int, int]]:
        """Each block's activation input per member on a batch of `rows` samples: (rows x positions,
        channels)."""
        return [(rows * math.prod(b.conv_positions), b.c_out) for b in self.geometry]

    def per_member_params(self) -> int:
        """One member's parameters, the output padding left out (activation parameters: slices.param_counts)."""
        conv = sum(w[0].numel() for w in self.conv_ws) + sum(b[0].numel() for b in self.conv_bs or [])
        norms = sum(p[0].numel() for n in self.norms or [] for p in n.parameters())
        return conv + norms + (self.w_out.shape[1] + 1) * self.n_out

    def images(self, x: torch.Tensor) -> torch.Tensor:
        """Flat features [M, N, C x positions] (channels first, as stored) -> [M, N, *positions, C]."""
        m, n = x.shape[:2]
        return x.reshape(m, n, *self.input_shape).movedim(2, -1)

    def im2col(self, layer: int, a: torch.Tensor) -> torch.Tensor:
        """[M, N, *positions, C] -> [M, N x positions', kernel^d x C]: each output position's window
        (`_Im2col`)."""
        return _Im2col.apply(a, self.geometry[layer])

    def pre_activation(self, layer: int, a: torch.Tensor, batch_stats: bool | None = None) -> torch.Tensor:
        """The activation's input in block `layer`, [M, N x positions, h1]: the convolution's output,
        batch-normalized per channel where model.norm=batch (the batch's statistics in training
        mode or with batch_stats=True, else the running ones folded into the weights). Block 0
        takes the flat features."""
        cols = self.im2col(layer, self.images(a) if layer == 0 else a)
        bias = self.conv_bs[layer] if self.conv_bs is not None else None
        return self.normalized(layer, cols, self.conv_ws[layer], bias, batch_stats)

    def layer_output(self, layer: int, a: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """The block's output [M, N, *positions, C] from its activation output [M, rows, C]
        (pooled where model.pool is set; dropout is applied by forward, in training only)."""
        b = self.geometry[layer]
        out = out.reshape(out.shape[0], -1, *b.conv_positions, out.shape[-1])
        if self.pool == "none":
            return out
        k = self.pool_size
        for axis, n in enumerate(b.positions_out):
            out = out.narrow(2 + axis, 0, n * k).unfold(2 + axis, k, k)
        out = out.flatten(-self.dims)
        # max: the first largest value of each window takes the gradient, as torch's MaxPool does
        return out.max(-1).values if self.pool == "max" else out.mean(-1)

    def next_input(self, layer: int, a: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """The next block's input: the activation output pooled, then dropout (training)."""
        a = self.layer_output(layer, a, out)
        if self.dropout is not None and self.training:
            a = self.dropout(a.reshape(a.shape[0], -1, a.shape[-1])).view(a.shape)
        return a

    def forward(self, x: torch.Tensor, record: list[torch.Tensor] | None = None,
                preacts: list[torch.Tensor] | None = None, batch_stats: bool | None = None) -> torch.Tensor:
        """x: [M, N, C x positions] -> [M, N, n_out]. `record` gets each block's activation output
        and `preacts` its input ([M, N x positions, channels]), as StackedMLP.forward's do."""
        a = self.hidden(x, record, preacts, batch_stats)
        m, n = a.shape[:2]
        feats = a.mean(dim=tuple(range(2, 2 + self.dims))) if self.global_pool else a.reshape(m, n, -1)
        return torch.baddbmm(self.b_out, feats, self.w_out)[..., : self.n_out]


def build_model(ordered: Sequence[Cfg], slices: list[Slice], input_shape: tuple[int, ...], device: str,
                dtype: torch.dtype, n_out: int) -> StackedCNN:
    """The stacked convnet of these members (sharing one stack key), each member's blocks and head
    drawn in that order from its seed's "init" stream under model.init_resolved; dropout masks
    from its "dropout" stream where model.dropout > 0."""
    first = ordered[0]
    model = first.model
    geometry = blocks(input_shape, model)
    widths = [activations.hidden_width(dict(first.activation), b.c_out)[0] for b in geometry]
    last = geometry[-1]
    head = (last.c_out, ()) if model.global_pool else (last.c_out, last.positions_out)
    per_member = []
    for c in ordered:
        gen, scheme = generator(c.seed, "init"), c.model.init_resolved or "torch_default"
        layers = [conv_init(scheme, b, h1, gen) for b, h1 in zip(geometry, widths)]
        per_member.append([*layers, head_init(scheme, *head, n_out, gen)])

    def stacked(k: int, i: int) -> torch.Tensor:
        t = torch.stack([mem[k][i] for mem in per_member])
        return (t if i == 0 else t[:, None]).to(device=device, dtype=dtype)

    ws = [window_major(stacked(k, 0), b) for k, b in enumerate(geometry)]
    bs = [stacked(k, 1) for k in range(len(geometry))]
    p = float(model.dropout)
    seeds = [c.seed for c in ordered]
    dropout = MemberDropout(p, seeds, {s: generator(s, "dropout") for s in dict.fromkeys(seeds)}, device) if p else None
    return StackedCNN(geometry, input_shape, ws, bs, stacked(len(geometry), 0), stacked(len(geometry), 1), slices,
                      dropout, norm=model.norm, pool=model.pool, pool_size=model.pool_size,
                      global_pool=bool(model.global_pool))
