"""A training stack's model built from its members' configs: each member's weights drawn from its
own seed under its init scheme, one activation module per run of members sharing an activation,
and each member's parameter count."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from activation_bench.cfg import model_name
from activation_bench.data.synthetic import derived_seed, generator
from activation_bench.engine import activations, cnn, grouped
from activation_bench.engine.model import MemberDropout, MemberLayers, Slice, StackedMLP, member_weights

if TYPE_CHECKING:
    from activation_bench.cfg import Cfg


def build_model(ordered: Sequence[Cfg], keys: list[str], dim: int, device: str, dtype: torch.dtype,
                n_out: int = 1, input_shape: tuple[int, ...] | None = None) -> MemberLayers:
    """The stacked model of these members: model=cnn's convnet (cnn.py, on inputs of input_shape),
    else the MLP (`build_mlp`)."""
    first = ordered[0]
    if model_name(first) == "cnn":
        slices = slices_for(ordered, keys, len(first.model.channels), device, dtype)
        return cnn.build_model(ordered, slices, input_shape or (), device, dtype, n_out)
    return build_mlp(ordered, keys, dim, device, dtype, n_out)


def build_mlp(ordered: Sequence[Cfg], keys: list[str], dim: int, device: str, dtype: torch.dtype,
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
    p = float(first.model.get("dropout") or 0.0)
    seeds = [c.seed for c in ordered]
    dropout = MemberDropout(p, seeds, {s: generator(s, "dropout") for s in dict.fromkeys(seeds)}, device) if p else None
    return StackedMLP(ws, bs, w2, b2, slices_for(ordered, keys, depth, device, dtype), dropout,
                      norm=first.model.get("norm") or "none", residual=bool(first.model.get("residual")))


def slices_for(ordered: Sequence[Cfg], keys: list[str], depth: int, device: str, dtype: torch.dtype) -> list[Slice]:
    """One module per run of members sharing an activation, used by every hidden layer; where it
    has parameters or randomness, one per member and layer (a member's layers share one generator
    seeded from that member's seed, drawn from in layer order)."""
    slices: list[Slice] = []
    for i, c in enumerate(ordered):
        cfg = dict(c.activation)
        if grouped.is_groupable(cfg):  # expression members: one module for the whole run of them
            last = slices[-1] if slices else None
            if last and last.stop > i:  # inside the run a grouped slice already covers
                continue
            stop = next((j for j in range(i, len(ordered)) if not grouped.is_groupable(dict(ordered[j].activation))),
                        len(ordered))
            module = grouped.from_configs([dict(o.activation) for o in ordered[i:stop]]).to(device=device)
            slices.append(Slice(i, stop, [module] * depth))
            continue
        per_member = activations.is_per_member(cfg)
        last = slices[-1] if slices else None
        if last and not per_member and not last.per_member and keys[last.start] == keys[i]:
            last.stop = i + 1
            continue
        modules = [activations.create_from_config(cfg).to(device=device, dtype=dtype)
                   for _ in range(depth if per_member else 1)]
        if hasattr(modules[0], "generator"):
            gen = torch.Generator(device=device).manual_seed(derived_seed(c.seed, "activation"))
            for module in modules:
                module.generator = gen
        slices.append(Slice(i, i + 1, modules * (depth // len(modules)), per_member, keys[i]))
    return slices


def param_counts(model: MemberLayers, m: int) -> list[int]:
    """Each member's parameters: the model's per member, plus its activation's (a slice's module
    parameters shared out over the slice's members)."""
    counts = [model.per_member_params()] * m
    for s in model.slices:
        extra = sum(p.numel() for mod in dict.fromkeys(s.modules) for p in mod.parameters())
        if extra:
            for i in range(s.start, s.stop):
                counts[i] += extra // (s.stop - s.start)
    return counts
