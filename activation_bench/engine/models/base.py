"""What every stacked model family shares: weight initialisation drawn from a member's own
generator, slices of members sharing an activation, per-member dropout, and `MemberLayers`,
the hidden layers of a stack (activation per slice, normalization between a product and its
activation). Weights are stored [members, in, out] so one batched product evaluates every member."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from activation_bench.engine.models.norm import MemberNorm


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



def per_slice(fns: Sequence[Callable[[torch.Tensor], torch.Tensor]], h: torch.Tensor,
              sizes: Sequence[int]) -> torch.Tensor:
    """Each function on its slice of members' rows of h [M, ...] (sizes: members per slice), joined.
    Split, not indexing, so that backward is one cat, not a zero-filled copy per slice. The one
    place the eager models, the hand-written gradient and the compiled steps apply activations."""
    if len(fns) == 1:
        return fns[0](h)
    return torch.cat([fn(part) for fn, part in zip(fns, h.split(list(sizes)))])


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
    """The contract of a stacked family's model, what the engine asks of it (train.py, optim.py,
    resume.py, diagnostics.py, the compiled steps), and what the stacked MLP, the stacked convnet
    and the stacked GPT (a block's feed-forward unit per hidden layer) share: per hidden layer, each
    slice of members' activation, and the normalization between the layer's product and its
    activation. docs/extending.md shows a family of a package's own.

    A model sets `slices` and `depth`, defines `forward(x [M, N, ...], record, preacts, batch_stats)
    -> [M, N, outputs]` and the methods below that raise NotImplementedError; the rest have defaults.
    Every parameter has the member axis first ([M, ...]), or belongs to one member (`owners`)."""

    slices: list[Slice]  # the members' activation modules (slices.slices_for), [] where it has none
    norms: nn.ModuleList | None
    depth: int  # hidden layers (the convnet's blocks) whose units the diagnostics log

    # -- what the layers are (the default `hidden` pass, the unit shares, the logs) --
    def pre_activation(self, layer: int, a: torch.Tensor, batch_stats: bool | None = None) -> torch.Tensor:
        """Hidden layer `layer`'s activation input on its input a, [M, rows, units]."""
        raise NotImplementedError

    def layer_output(self, layer: int, a: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """The layer's output (the next layer's input, before dropout) from its activation output."""
        raise NotImplementedError

    def next_input(self, layer: int, a: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """The next layer's input in a forward pass (layer_output, then dropout in training)."""
        raise NotImplementedError

    @property
    def ws(self) -> list[torch.Tensor]:
        """Each hidden layer's weight [M, ...] (log.grad_norms reads their gradients)."""
        raise NotImplementedError

    def activation_shapes(self, rows: int) -> list[tuple[int, int]]:
        """Each hidden layer's activation input per member on `rows` samples: (rows', units)."""
        raise NotImplementedError

    def per_member_params(self) -> int:
        """One member's parameters, its activations' left out (slices.param_counts adds them)."""
        raise NotImplementedError

    # -- with defaults --
    def decay_flags(self) -> list[bool]:
        """Which parameters (in parameters() order) AdamW decays: the matrices and kernels."""
        from activation_bench.engine.optim import default_decay

        return default_decay(list(self.parameters()))

    def member_modules(self) -> Iterator[tuple[int, nn.Module]]:
        """(member, module) for the modules that belong to one member, whose parameters and buffers
        have no member axis: each per-member slice's activation modules (PReLU's, a learnable
        expression's), keyed by the slice's first member."""
        return ((s.start, mod) for s in self.slices if s.per_member for mod in s.modules)

    def owners(self) -> dict[int, int]:
        """Parameter index -> member, for the parameters of `member_modules`, which per-member
        clipping counts toward that member's norm."""
        return self._owned(nn.Module.parameters)

    def buffer_owners(self) -> dict[int, int]:
        """Buffer index (in self.buffers() order) -> member, for the buffers of `member_modules`: what
        keeping a member's state (its best-validation weights, engine/whole_split.py) copies with its
        parameters."""
        return self._owned(nn.Module.buffers)

    def _owned(self, tensors: Callable[[nn.Module], Iterator[torch.Tensor]]) -> dict[int, int]:
        """Index among tensors(self) -> member, for the tensors of `member_modules`."""
        mine = {id(t): member for member, mod in self.member_modules() for t in tensors(mod)}
        return {i: mine[id(t)] for i, t in enumerate(tensors(self)) if id(t) in mine}

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

    def learned(self, m: int) -> list[dict[str, list[float]] | None]:
        """Per member (of m), its expression's learned parameters (one value per hidden layer),
        else None (activation=expr with activation.learnable=true: summary.json's `learned`)."""
        out: list[dict[str, list[float]] | None] = [None] * m
        for s in self.slices:
            values = [mod.learned() for mod in s.modules if hasattr(mod, "learned")]
            if s.per_member and values and values[0]:
                out[s.start] = {k: [v[k] for v in values] for k in values[0]}
        return out

    def info(self) -> dict | None:
        """The family's facts about the built model for summary.json (model=module: where the
        activation got in), or None."""
        return None

    def activate(self, layer: int, h: torch.Tensor) -> torch.Tensor:
        """Apply each slice's activation of this hidden layer to its members' rows of h."""
        return per_slice([s.modules[layer] for s in self.slices], h, [s.stop - s.start for s in self.slices])

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


