"""The MLP, as a stack of independent members trained at once.

Member m computes, for hidden layers k = 1..depth (depth 1: the two-layer MLP),
    a_0 = x_m,   a_k = drop_k(act_m(norm_k(a_{k-1} @ W_k[m] + b_k[m]))),   y = a_depth @ W_out[m] + b_out[m]
with one output per sample for a regressor (the output layer, a single row, is evaluated as a
multiply and a sum) or K outputs (logits) for a classifier. drop_k is dropout in training mode
(model.dropout > 0), the identity otherwise; norm_k is model.norm's batch or layer normalization
(norm.py), the identity for none. With model.residual each hidden layer after the first adds its
input to that: a_k = a_{k-1} + drop_k(act_m(norm_k(...))) for k >= 2 (its input and output are
both the activation's output width, so they always match).
A single run is a stack of one. Weights are stored [members, in, out] so one `baddbmm` per layer
evaluates every member; activations are applied per contiguous slice of members that share one.
Initial weights come from one of the schemes in INITS, drawn per member from its own generator.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
from torch import nn

from activation_bench.data.synthetic import generator
from activation_bench.engine.activations import registry as activations
from activation_bench.engine.models import slices
from activation_bench.engine.models.base import MemberDropout, MemberLayers, Slice, init_layer
from activation_bench.engine.models.conv_shapes import PAD_OUT

if TYPE_CHECKING:
    from activation_bench.cfg import Cfg


def member_weights(
    scheme: str, input_dim: int, h1: int, h2: int, depth: int, gen: torch.Generator, dtype: torch.dtype,
    n_out: int = 1,
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """A member's layers in order, [(W [in, out], b [out])] for the depth hidden layers and then the
    output layer, drawn from gen in that order (so depth 1 draws exactly what it always did, and
    at one seed a deeper model's first layer equals the shallower one's).

    A hidden layer produces h1 values and the activation leaves h2 (gated units: h1 = 2 h2), so
    layer 1 maps input_dim -> h1, layers 2..depth map h2 -> h1, and the output layer h2 -> n_out
    (1 for a regressor, K classes for a classifier).
    Drawn in float32 and converted: a float64 run starts from the float32 run's weights.
    """
    fans = [(input_dim, h1)] + [(h2, h1)] * (depth - 1) + [(h2, n_out)]
    return [tuple(t.to(dtype) for t in init_layer(scheme, i, o, gen, torch.float32)) for i, o in fans]


class StackedMLP(MemberLayers):
    def __init__(
        self,
        ws: list[torch.Tensor] | torch.Tensor,  # per hidden layer [M, in, h1] (one tensor: depth 1)
        bs: list[torch.Tensor] | torch.Tensor,  # per hidden layer [M, 1, h1]
        w2: torch.Tensor,  # [M, 1, h2]: the output layer's single row; K outputs: [M, h2, K]
        b2: torch.Tensor,  # [M, 1, n_out]; stored padded to [M, 1, a multiple of 16], see below
        slices: list[Slice],
        dropout: MemberDropout | None = None,
        norm: str = "none",
        residual: bool = False,
    ) -> None:
        super().__init__()
        self.n_out = b2.shape[-1]
        self.dropout = dropout
        self.residual = residual
        ws, bs = ([t] if isinstance(t, torch.Tensor) else list(t) for t in (ws, bs))
        # Batch norm subtracts each unit's batch mean, which removes a hidden Linear's bias: its
        # gradient is zero up to rounding, and Adam would turn that rounding into lr-sized steps
        # (moving the running mean the evaluation uses). So with batch norm the hidden Linears have
        # no bias (as nn.Linear(bias=False) before nn.BatchNorm1d); the drawn one is not used.
        hidden_bias = norm != "batch"
        # the first hidden layer keeps the names of the two-layer model (w1, b1: what hand_gradient.py's
        # hand-written gradient is written for); layers 2..depth follow in lists
        self.w1, self.b1 = nn.Parameter(ws[0]), nn.Parameter(bs[0]) if hidden_bias else None
        self.w_deep = nn.ParameterList(nn.Parameter(w) for w in ws[1:])
        self.b_deep = nn.ParameterList(nn.Parameter(b) for b in bs[1:] if hidden_bias)
        # The output bias is one number per member. Stored alone it is an M-element tensor, and
        # vectorised optimiser kernels treat its elements by scalar or SIMD code depending on M,
        # which rounds differently. Padding each member's bias to 16 elements (one AVX-512
        # vector; the padding's gradient is zero, so it stays zero) keeps a member's update the
        # same in a stack of any size. K outputs are padded to a multiple of 16 alike, and so are
        # the output weight's columns: a member's block of logits [N, K] then starts at a 64-byte
        # boundary whatever its place in the stack (with K = 10 and N = 55, every other member's
        # block did not, and MKL's batched product rounded those members differently). The
        # padding columns get zero gradients, so they stay zero; `n_out` logits are used.
        pad = -self.n_out % PAD_OUT
        self.w2 = nn.Parameter(w2 if self.n_out == 1 else torch.nn.functional.pad(w2, (0, pad)))
        self.b2_padded = nn.Parameter(torch.nn.functional.pad(b2, (0, pad)))
        self._init_layers(slices, ws, norm)

    @property
    def ws(self) -> list[torch.Tensor]:
        """Every hidden layer's weight [M, in, h1], first layer first."""
        return [self.w1, *self.w_deep]

    @property
    def bs(self) -> list[torch.Tensor]:
        """Every hidden layer's bias [M, 1, h1] (none with batch norm)."""
        return [self.b1, *self.b_deep] if self.b1 is not None else []

    @property
    def depth(self) -> int:
        return 1 + len(self.w_deep)

    def dropout_shapes(self, rows: int) -> list[tuple[int, int]]:
        """Each hidden layer's dropout mask per member on a batch of `rows` samples: (rows, units)."""
        units = self.w2.shape[-1] if self.n_out == 1 else self.w2.shape[1]
        return [(rows, units)] * self.depth

    def activation_shapes(self, rows: int) -> list[tuple[int, int]]:
        """Each hidden layer's activation input per member on a batch of `rows` samples: (rows, units)."""
        return [(rows, w.shape[-1]) for w in self.ws]

    def per_member_params(self) -> int:
        """One member's parameters, the output padding left out (activation parameters: slices.param_counts)."""
        h2 = self.w2.shape[-1] if self.n_out == 1 else self.w2.shape[1]
        norms = [p for n in self.norms for p in n.parameters()] if self.norms is not None else []
        return sum(p[0].numel() for p in (*self.ws, *self.bs, *norms)) + (h2 + 1) * self.n_out

    def pre_activation(self, layer: int, a: torch.Tensor, batch_stats: bool | None = None) -> torch.Tensor:
        """The activation's input in this hidden layer, [M, N, h1]: the Linear's output, normalized
        where model.norm is set. Batch norm uses the batch's statistics in training mode (and
        updates the running ones) and the running ones in evaluation mode; batch_stats=True in
        evaluation mode uses the batch's without updating anything (the pre-activation probe)."""
        return self.normalized(layer, a, self.ws[layer], self.bs[layer] if self.b1 is not None else None, batch_stats)

    def layer_output(self, layer: int, a: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """The hidden layer's output from its input a and its (dropped-out) activation output."""
        return a + out if self.residual and layer > 0 else out

    def next_input(self, layer: int, a: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """The next layer's input: dropout on the activation output (training), then the skip."""
        if self.dropout is not None and self.training:
            out = self.dropout(out)
        return self.layer_output(layer, a, out)

    def forward(self, x: torch.Tensor, record: list[torch.Tensor] | None = None,
                preacts: list[torch.Tensor] | None = None, batch_stats: bool | None = None) -> torch.Tensor:
        """x: [M, N, in] -> [M, N, n_out] (`hidden`'s record and preacts)."""
        a = self.hidden(x, record, preacts, batch_stats)
        if self.n_out > 1:
            return torch.baddbmm(self.b2_padded, a, self.w2)[..., : self.n_out]
        return one_output(a, self.w2, self.b2_padded)


def one_output(a: torch.Tensor, w2: torch.Tensor, b2_padded: torch.Tensor) -> torch.Tensor:
    """A regressor's output [M, N, 1] from the last hidden layer a [M, N, h2] and the output row w2
    [M, 1, h2]: a broadcast multiply and a sum, which beat three tiny batched GEMMs (forward and two
    in backward) by about 1 ms a step for 480 members. The one definition the eager model, the
    hand-written gradient and the compiled steps use."""
    return (a * w2).sum(dim=-1, keepdim=True) + b2_padded[..., :1]


def build(ordered: Sequence[Cfg], keys: list[str], dim: int, device: str, dtype: torch.dtype,
              n_out: int = 1) -> StackedMLP:
    """The stacked model of these members (sharing one stack key), each initialised from its own
    seed's "init" stream under its model.init_resolved scheme, with n_out outputs (K classes),
    dropout drawn from each member's "dropout" stream where model.dropout > 0, and model.norm's
    normalization (scale 1, shift 0: no draws) and model.residual's skips."""
    first = ordered[0]
    h1, h2 = activations.hidden_width(dict(first.activation), first.model.hidden_dim)
    depth = first.model.depth
    layers = [member_weights(c.model.init_resolved or "torch_default", dim, h1, h2, depth,
                             generator(c.seed, "init"), dtype, n_out) for c in ordered]
    ws = [torch.stack([mem[k][0] for mem in layers]).to(device) for k in range(depth)]
    bs = [torch.stack([mem[k][1][None] for mem in layers]).to(device) for k in range(depth)]
    # one output: the single row [1, h2]; K outputs: [h2, K] for a batched matrix product
    w2 = torch.stack([mem[depth][0].T if n_out == 1 else mem[depth][0] for mem in layers]).to(device)
    b2 = torch.stack([mem[depth][1][None] for mem in layers]).to(device)
    p = float(first.model.dropout)
    seeds = [c.seed for c in ordered]
    dropout = MemberDropout(p, seeds, {s: generator(s, "dropout") for s in dict.fromkeys(seeds)}, device) if p else None
    return StackedMLP(ws, bs, w2, b2, slices.slices_for(ordered, keys, depth, device, dtype), dropout,
                      norm=first.model.norm, residual=bool(first.model.residual))
