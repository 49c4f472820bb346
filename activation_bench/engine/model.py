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

import math
from dataclasses import dataclass

import torch
from torch import nn

from activation_bench.engine.norm import MemberNorm


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


INITS = ("torch_default", "he", "lecun", "xavier")


def init_layer(
    scheme: str, fan_in: int, fan_out: int, gen: torch.Generator, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """One layer's weight [fan_in, fan_out] and bias [fan_out] under an initialisation scheme.

    - torch_default: nn.Linear's, U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weights and bias;
    - he: Kaiming normal, fan-in mode, gain sqrt(2): N(0, 2/fan_in); bias 0;
    - lecun: N(0, 1/fan_in) (what SELU's self-normalisation assumes); bias 0;
    - xavier: Glorot uniform, U(-sqrt(6/(fan_in+fan_out)), +sqrt(6/(fan_in+fan_out))); bias 0.
    Weights are drawn as nn.Linear stores them ([out, in]) and transposed.
    """
    if scheme == "torch_default":
        return linear_init(fan_in, fan_out, gen, dtype)
    if scheme in ("he", "lecun"):
        std = math.sqrt((2.0 if scheme == "he" else 1.0) / fan_in)
        w = torch.randn(fan_out, fan_in, generator=gen, dtype=dtype) * std
    elif scheme == "xavier":
        bound = math.sqrt(6.0 / (fan_in + fan_out))
        w = torch.empty(fan_out, fan_in, dtype=dtype).uniform_(-bound, bound, generator=gen)
    else:
        raise ValueError(f"unknown init scheme '{scheme}'; valid: {', '.join(INITS)}")
    return w.t().contiguous(), torch.zeros(fan_out, dtype=dtype)


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


@dataclass
class Slice:
    """Members [start, stop) of the stack share these activation modules, one per hidden layer
    (the same stateless module for every layer, or each layer its own where the activation has
    parameters or randomness)."""

    start: int
    stop: int
    modules: list[nn.Module]  # or one module: it serves every hidden layer
    per_member: bool = False
    key: str = ""  # the activation's config (plan's key): per-member slices with equal keys build equal modules

    def __post_init__(self) -> None:
        if isinstance(self.modules, nn.Module):
            self.modules = [self.modules]

    @property
    def module(self) -> nn.Module:
        """The first hidden layer's module (the only one at depth 1)."""
        return self.modules[0]


class MemberDropout:
    """Dropout whose masks come from each member's own stream (purpose "dropout" of its seed): per
    hidden layer and step, one draw of uniforms [rows, units] per distinct seed of the stack, in
    float32 whatever the dtype; a unit is kept where the uniform is >= p and scaled by 1/(1-p), as
    nn.Dropout does. Members sharing a seed share masks (so comparisons at one seed stay paired),
    and a member draws the same masks in any stack as alone: stacked == alone holds with dropout."""

    def __init__(self, p: float, seeds: list[int], gens: dict[int, torch.Generator], device: str) -> None:
        self.p, self.seeds, self.gens, self.device = p, seeds, gens, device

    def __call__(self, a: torch.Tensor) -> torch.Tensor:
        return a * self.mask(*a.shape[1:], a.dtype)

    def mask(self, rows: int, units: int, dtype: torch.dtype) -> torch.Tensor:
        """The next mask [members, rows, units]: 1/(1-p) where a unit is kept, else 0 (one draw
        per distinct seed, as each call does; the compiled step draws it here too)."""
        draws = {s: torch.rand((rows, units), generator=g) for s, g in self.gens.items()}
        keep = torch.stack([draws[s] for s in self.seeds]).to(self.device) >= self.p
        return keep.to(dtype).div_(1.0 - self.p)


class MemberLayers(nn.Module):
    """What the stacked MLP and the stacked convnet (cnn.py) share: per hidden layer, each slice
    of members' activation, and the normalization between the layer's product and its
    activation."""

    slices: list[Slice]
    norms: nn.ModuleList | None
    depth: int  # hidden layers (the convnet's blocks); each model also gives pre_activation and next_input

    def _init_layers(self, slices: list[Slice], ws: list[torch.Tensor], norm: str) -> None:
        """The slices (a slice given one module uses it in every layer), their modules registered
        (PReLU weights etc.; a module shared by several layers once), and per layer each member's
        normalization parameters (and batch norm's running statistics)."""
        for s in slices:
            if len(s.modules) == 1:
                s.modules = s.modules * len(ws)
        self.slices = slices
        self.acts = nn.ModuleList(dict.fromkeys(m for s in slices for m in s.modules))
        self.norms = (nn.ModuleList(MemberNorm(norm, w.shape[0], w.shape[-1], w.dtype, str(w.device)) for w in ws)
                      if norm != "none" else None)

    def activate(self, layer: int, h: torch.Tensor) -> torch.Tensor:
        """Apply each slice's activation of this hidden layer to its members' rows of h."""
        if len(self.slices) == 1:
            return self.slices[0].modules[layer](h)
        # split (not indexing) so that backward is one cat, not a zero-filled copy per slice
        parts = h.split([s.stop - s.start for s in self.slices], dim=0)
        return torch.cat([s.modules[layer](part) for s, part in zip(self.slices, parts)], dim=0)

    def hidden(self, x: torch.Tensor, record: list[torch.Tensor] | None = None,
               preacts: list[torch.Tensor] | None = None, batch_stats: bool | None = None) -> torch.Tensor:
        """Every hidden layer on x: pre-activation, activation, then the model's `next_input`
        (dropout in training, residual skips or pooling). With `record`, each layer's activation
        output (before dropout) is appended to it (the gradient-norm log); with `preacts`, each
        layer's activation input (after the norm)."""
        a = x
        for layer in range(self.depth):
            h = self.pre_activation(layer, a, batch_stats)
            if preacts is not None:
                preacts.append(h)
            out = self.activate(layer, h)
            if record is not None:
                record.append(out)
            a = self.next_input(layer, a, out)
        return a

    def normalized(self, layer: int, a: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None,
                   batch_stats: bool | None = None) -> torch.Tensor:
        """a @ w + b, normalized where model.norm is set. b is None with batch norm (it subtracts
        each unit's mean: see StackedMLP): the batch's statistics in training mode (updating the
        running ones) and the running ones in evaluation mode, folded into w (one product);
        batch_stats=True in evaluation mode uses the batch's without updating anything."""
        if b is None:
            norm = self.norms[layer]  # type: ignore[index]
            if not (self.training if batch_stats is None else batch_stats):
                scale, shift = norm.folded()
                return torch.baddbmm(shift, a, w * scale)
            return norm(torch.bmm(a, w))
        h = torch.baddbmm(b, a, w)
        return h if self.norms is None else self.norms[layer](h)


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
        # the first hidden layer keeps the names of the two-layer model (w1, b1: what fused.py's
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
        pad = -self.n_out % 16
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

    def per_member_params(self) -> int:
        """One member's parameters, the output padding left out (activation parameters: members.py)."""
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
        # one output unit: a broadcast multiply and a sum beat three tiny batched GEMMs
        # (forward and two in backward) by about 1 ms a step for 480 members
        return (a * self.w2).sum(dim=-1, keepdim=True) + self.b2_padded[..., :1]


def member_cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Per-member mean softmax cross-entropy (nats), [M]: logits [M, N, K], labels [M, N] (int64).
    Every op is per row or per member, so a member's loss is the same in any stack."""
    if logits.shape[:2] != labels.shape or labels.dtype != torch.int64:
        raise ValueError(f"logits {tuple(logits.shape)} and labels {tuple(labels.shape)} ({labels.dtype}) do not "
                         "match: want [M, N, K] and int64 [M, N]")
    return logits.log_softmax(dim=-1).gather(-1, labels[..., None]).squeeze(-1).neg().mean(dim=1)


def member_accuracy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Per-member share of rows whose largest logit is the label's (the first on ties), [M]."""
    return (logits.argmax(dim=-1) == labels).to(logits.dtype).mean(dim=1)


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
