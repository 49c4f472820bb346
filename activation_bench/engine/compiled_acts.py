"""Activations with learned parameters (`prelu`, learnable expressions) in the compiled step.

The eager engine gives each such member its own module in every hidden layer, each with its own
parameter tensors. The compiled step takes them stacked instead: per run of neighbouring members
with the same function and per hidden layer, one tensor [members, 1, 1] per parameter, which the
step's activation broadcasts over the members' rows and the step's Adam updates in place. The
modules' parameters and the optimiser's state for them become views of these stacked tensors, so
whatever eager code reads afterwards (the unit shares, the learned values in summary.json, a
checkpoint) sees the step's values, and a checkpoint restored into them (`copy_`) reaches the step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from activation_bench.engine import expr_torch

ParamAct = Callable[[torch.Tensor, list[torch.Tensor]], torch.Tensor]  # (h, the run's parameters) -> output


def form(module: nn.Module) -> tuple[Any, ParamAct] | None:
    """(key, function of (h, parameters)) of a module with learned parameters the compiled step
    takes, or None. Members whose modules share a key share one function; the parameters come in
    `module.parameters()` order, each [members, 1, 1]."""
    if type(module) is nn.PReLU and module.weight.numel() == 1:
        # torch.prelu's forward and gradients: the slope where h <= 0 (0 gives 0 either way)
        return "prelu", lambda h, ps: torch.where(h > 0, h, ps[0] * h)
    if isinstance(module, expr_torch.ExprActivation) and module.learnable:
        fn, names = module.fn, module.names
        return ("expr", module.expr.canonical), lambda h, ps: expr_torch._full(fn(h, dict(zip(names, ps))), h)
    return None


def covered(model: Any) -> bool:
    """Whether every per-member slice of the model has a form() the step takes."""
    return all(form(m) is not None for s in model.slices if s.per_member for m in s.modules)


@dataclass
class Runs:
    """The stack's activations for the compiled step, run by run: `acts` (a plain function of h,
    or a ParamAct for a run of members with learned parameters) and `sizes` (members each); per
    hidden layer and run, the places of its stacked parameters in the step's parameter list
    (`index`, empty for a plain run); the stacked parameters and their Adam state."""

    acts: list[Any]
    sizes: list[int]
    index: tuple[tuple[tuple[int, ...], ...], ...]
    params: list[torch.Tensor]
    exp_avgs: list[torch.Tensor]
    exp_avg_sqs: list[torch.Tensor]


def runs(model: Any, opt: Any, plain: list[Any], first: int) -> Runs:
    """Group the model's slices (their plain functions `plain`, one per slice) into runs; stack the
    learned parameters of each run of per-member slices sharing a form, as the module's docstring
    says. `first`: the step's parameter list's length before the stacked ones."""
    depth = model.depth
    out = Runs([], [], (), [], [], [])
    index: list[list[tuple[int, ...]]] = [[] for _ in range(depth)]
    slices = list(zip(model.slices, plain))
    i = 0
    while i < len(slices):
        s, act = slices[i]
        if not s.per_member:
            out.acts.append(act)
            out.sizes.append(s.stop - s.start)
            for k in range(depth):
                index[k].append(())
            i += 1
            continue
        key, fn = form(s.modules[0])  # type: ignore[misc]
        j = i + 1
        while j < len(slices) and slices[j][0].per_member and form(slices[j][0].modules[0])[0] == key:  # type: ignore[index]
            j += 1
        members = [t for t, _ in slices[i:j]]
        out.acts.append(fn)
        out.sizes.append(sum(t.stop - t.start for t in members))
        for k in range(depth):
            layer = [list(t.modules[k].parameters()) for t in members]  # per member, its parameters
            index[k].append(tuple(first + len(out.params) + n for n in range(len(layer[0]))))
            for n in range(len(layer[0])):
                _stack_parameter(out, opt, [ps[n] for ps in layer])
        i = j
    out.index = tuple(tuple(layer) for layer in index)
    return out


def _stack_parameter(out: Runs, opt: Any, params: list[nn.Parameter]) -> None:
    """One stacked tensor [members, 1, 1] for these members' parameter (one element each), and
    the parameters and their Adam state re-pointed to views of it."""
    where = {id(p): i for i, p in enumerate(opt.params)}
    stacked = torch.stack([p.detach().reshape(1, 1) for p in params])
    out.params.append(stacked)
    state = [(opt.exp_avgs, out.exp_avgs), (opt.exp_avg_sqs, out.exp_avg_sqs)] if opt.kind == "adam" else []
    for eager, mine in state:
        mine.append(torch.stack([eager[where[id(p)]].reshape(1, 1) for p in params]))
    for r, p in enumerate(params):
        p.data = stacked[r].view(p.shape)
        for (eager, _), mine in zip(state, (out.exp_avgs, out.exp_avg_sqs)):
            eager[where[id(p)]] = mine[-1][r].view(p.shape)
