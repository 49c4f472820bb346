"""The activation modules of a stack, one per run of members sharing an activation (every family
has them), and each member's parameter count."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from activation_bench.data.synthetic import derived_seed
from activation_bench.engine.activations import grouped
from activation_bench.engine.activations import registry as activations
from activation_bench.engine.models.base import MemberLayers, Slice

if TYPE_CHECKING:
    from activation_bench.cfg import Cfg


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
