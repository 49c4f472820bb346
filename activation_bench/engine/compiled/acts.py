"""Activations with parameters or random draws in the compiled step: learned parameters (`prelu`,
learnable expressions, a user's module), and the random draws of `rrelu` and `stochastic_gelu`.

The eager engine gives each such member its own module in every hidden layer, each with its own
parameter tensors. The compiled step takes them stacked instead: per run of neighbouring members
with the same function and per hidden layer, one tensor [members, 1, 1] per parameter, which the
step's activation broadcasts over the members' rows, or [members, *shape] for a user's module, whose
forward runs on each member's rows through torch.func.vmap; the step's Adam updates them in place. The
modules' parameters and the optimiser's state for them become views of these stacked tensors, so
whatever eager code reads afterwards (the unit shares, the learned values in summary.json, a
checkpoint) sees the step's values, and a checkpoint restored into them (`copy_`) reaches the step.

`rrelu` and `stochastic_gelu` draw uniforms from each member's own generator in training (rrelu's
slopes; stochastic_gelu's Bernoulli mask, which is the uniforms compared with Phi(h)). The step
takes them as inputs, drawn before it with the same calls the eager module makes (torch.rand of the
member's activation input's shape, layer after layer), so a member draws the same numbers under
either engine; in evaluation both use their means, as eager does. stochastic_gelu's mask compares
the same uniforms with Phi(h) as the compiled step computes it, and that differs from eager's by
rounding (inductor's erf, and h itself once the trajectories part): where a uniform falls within
that rounding of Phi(h), the two engines' masks differ in that unit and row, a jump in that member's
trajectory rather than a rounding. Both are exact Bernoulli(Phi(h)) draws for their own h.
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from activation_bench.engine.activations import expr_torch
from activation_bench.engine.activations.registry import RReLU, StochasticGELU, normal_cdf

ParamAct = Callable[[torch.Tensor, list[torch.Tensor]], torch.Tensor]  # (h, the run's parameters) -> output


def form(module: nn.Module, key: str = "") -> tuple[Any, ParamAct, ParamAct] | None:
    """(key, training function of (h, parameters), evaluation function) of a per-member module the
    compiled step takes with its parameters, or None. Members whose modules share a key share one
    function; the parameters come in `module.parameters()` order, stacked [members, 1, 1] (prelu,
    expressions: broadcast over the rows) or [members, *shape] (a user's module). `key`: the
    slice's activation config, which tells a user's modules apart."""
    if type(module) is nn.PReLU and module.weight.numel() == 1:
        # torch.prelu's forward and gradients: the slope where h <= 0 (0 gives 0 either way)
        def prelu(h: torch.Tensor, ps: list[torch.Tensor]) -> torch.Tensor:
            return torch.where(h > 0, h, ps[0] * h)
        return "prelu", prelu, prelu
    if isinstance(module, expr_torch.ExprActivation) and module.learnable:
        fn, names = module.fn, module.names

        def learned(h: torch.Tensor, ps: list[torch.Tensor]) -> torch.Tensor:
            return expr_torch._full(fn(h, dict(zip(names, ps))), h)
        return ("expr", module.expr.canonical), learned, learned
    if type(module) in (RReLU, StochasticGELU, expr_torch.ExprActivation):
        return None  # random_form's, or not per member
    if any(True for _ in module.buffers()) or hasattr(module, "generator"):
        return None  # state the step does not carry from call to call
    train, evaluate = _per_member(module, True), _per_member(module, False)
    if not any(True for _ in module.parameters()):  # a plain function of h (no parameters to pass)
        return ("module", key), lambda h: train(h, []), lambda h: evaluate(h, [])  # type: ignore[return-value]
    return ("module", key), train, evaluate


def _per_member(module: nn.Module, training: bool) -> ParamAct:
    """A user's module (activation._target_) in the step: called on each member's rows [1, rows,
    units], as the eager engine calls it, through torch.func.vmap over the members, with that
    member's parameters (torch.func.functional_call), in training or evaluation mode. A forward
    that draws random numbers (vmap refuses them) or branches on values (tracing refuses that)
    fails to compile, and the stack trains eager, saying so."""
    names = [n for n, _ in module.named_parameters()]

    def one(h: torch.Tensor, *ps: torch.Tensor) -> torch.Tensor:
        return torch.func.functional_call(module, dict(zip(names, ps)), (h,))

    def act(h: torch.Tensor, ps: list[torch.Tensor]) -> torch.Tensor:
        was = module.training
        module.train(training)
        try:
            return torch.func.vmap(one)(h.unsqueeze(1), *ps).squeeze(1)
        finally:
            module.train(was)
    return act


def code(model: Any) -> list[str]:
    """The source files' digests of the user's modules in the model (where Python can find them):
    the compiled step bakes their code in, so a changed file must not load an old package."""
    out = set()
    for s in model.slices:
        if not s.per_member or not _users(form(s.module, s.key)):
            continue
        try:
            path = inspect.getsourcefile(type(s.module))
            out.add(hashlib.sha256(Path(path).read_bytes()).hexdigest() if path else type(s.module).__qualname__)
        except (OSError, TypeError):
            out.add(type(s.module).__qualname__)
    return sorted(out)


def _users(learned: tuple[Any, ParamAct, ParamAct] | None) -> bool:
    """Whether form() gave a user's module's functions."""
    return learned is not None and isinstance(learned[0], tuple) and learned[0][0] == "module"


def random_form(module: nn.Module) -> tuple[Any, ParamAct, Callable[[torch.Tensor], torch.Tensor]] | None:
    """(key, training function of (h, [uniforms]), evaluation function of h) of a module that
    draws random numbers the step can take, or None (the module's own formulas)."""
    if type(module) is RReLU:
        lower, upper = module.lower, module.upper
        return (("rrelu", lower, upper), lambda h, us: torch.where(h >= 0, h, h * (lower + (upper - lower) * us[0])),
                lambda h: torch.where(h >= 0, h, h * ((lower + upper) / 2)))
    if type(module) is StochasticGELU:
        # torch.bernoulli(p, generator) is torch.rand(p.shape, generator) < p, bit for bit and
        # draw for draw; the mask carries no gradient, as eager's (drawn from Phi(h) detached)
        return ("stochastic_gelu", lambda h, us: h * (us[0] < normal_cdf(h)).to(h.dtype), lambda h: h * normal_cdf(h))
    return None


def covered(model: Any) -> bool:
    """Whether every per-member slice of the model has a form() or random_form() the step takes."""
    return all(form(m, s.key) is not None or random_form(m) is not None
               for s in model.slices if s.per_member for m in s.modules)


@dataclass
class Runs:
    """The stack's activations for the compiled step, run by run: `acts` (a plain function of h,
    or a ParamAct for a run of members with learned parameters or random draws), `eval_acts` (in
    evaluation mode) and `sizes` (members each); per hidden layer and run, the places of its
    stacked parameters in the step's parameter list (`index`) and of its draws in draws()'s list
    (`noise`), each empty where it has none; the stacked parameters and their Adam state; per
    draw, its layer and the run's members' generators."""

    acts: list[Any]
    eval_acts: list[Any]
    sizes: list[int]
    index: tuple[tuple[tuple[int, ...], ...], ...]
    noise: tuple[tuple[tuple[int, ...], ...], ...]
    params: list[torch.Tensor]
    exp_avgs: list[torch.Tensor]
    exp_avg_sqs: list[torch.Tensor]
    draws: list[tuple[int, list[torch.Generator]]]


def runs(model: Any, opt: Any, plain: list[Any], first: int) -> Runs:
    """Group the model's slices (their plain functions `plain`, one per slice) into runs; stack the
    learned parameters of each run of per-member slices sharing a form, as the module's docstring
    says. `first`: the step's parameter list's length before the stacked ones."""
    depth = model.depth
    out = Runs([], [], [], (), (), [], [], [], [])
    index: list[list[tuple[int, ...]]] = [[] for _ in range(depth)]
    noise: list[list[tuple[int, ...]]] = [[] for _ in range(depth)]
    slices = list(zip(model.slices, plain))
    i = 0
    while i < len(slices):
        s, act = slices[i]
        if not s.per_member:
            out.acts.append(act)
            out.eval_acts.append(act)
            out.sizes.append(s.stop - s.start)
            for k in range(depth):
                index[k].append(())
                noise[k].append(())
            i += 1
            continue
        key = _key(s)
        j = i + 1
        while j < len(slices) and slices[j][0].per_member and _key(slices[j][0]) == key:
            j += 1
        members = [t for t, _ in slices[i:j]]
        out.sizes.append(sum(t.stop - t.start for t in members))
        learned, drawn = form(s.modules[0], s.key), random_form(s.modules[0])
        if learned is not None:
            out.acts.append(learned[1])
            out.eval_acts.append(learned[2])
        else:
            out.acts.append(drawn[1])  # type: ignore[index]
            out.eval_acts.append(drawn[2])  # type: ignore[index]
        for k in range(depth):
            layer = [list(t.modules[k].parameters()) for t in members]  # per member, its parameters
            index[k].append(tuple(first + len(out.params) + n for n in range(len(layer[0]))))
            for n in range(len(layer[0])):  # a user's module's in their own shapes, the others' broadcast over rows
                _stack_parameter(out, opt, [ps[n] for ps in layer], _users(learned))
            noise[k].append((len(out.draws),) if drawn is not None else ())
            if drawn is not None:
                out.draws.append((k, [t.modules[k].generator for t in members]))
        i = j
    out.index, out.noise = tuple(tuple(layer) for layer in index), tuple(tuple(layer) for layer in noise)
    return out


def _key(s: Any) -> Any:
    learned, drawn = form(s.modules[0], s.key), random_form(s.modules[0])
    return learned[0] if learned is not None else drawn[0]  # type: ignore[index]


def draws(r: Runs, model: Any, xb: torch.Tensor, draw: bool = True) -> list[torch.Tensor]:
    """This step's uniforms for batch xb, per random run and layer [members, rows, units] (a
    member's activation input: rows, a convnet's samples x positions, by units), drawn from each
    member's generator as its eager module draws them; draw=False: zeros of their shapes, nothing
    drawn (the compile-time check must not advance the members' streams)."""
    rows, dtype, device = xb.shape[1], xb.dtype, xb.device
    shapes = model.activation_shapes(rows)
    if not draw:
        return [torch.zeros((len(gens), *shapes[k]), dtype=dtype, device=device) for k, gens in r.draws]
    return [torch.cat([torch.rand((1, *shapes[k]), generator=g, dtype=dtype, device=device) for g in gens])
            for k, gens in r.draws]


def _stack_parameter(out: Runs, opt: Any, params: list[nn.Parameter], own_shape: bool = False) -> None:
    """One stacked tensor for these members' parameter, [members, 1, 1] (one element each) or with
    own_shape [members, *shape], and the parameters and their Adam state re-pointed to views of it."""
    where = {id(p): i for i, p in enumerate(opt.params)}
    shape = tuple(params[0].shape) if own_shape else (1, 1)
    stacked = torch.stack([p.detach().reshape(shape) for p in params])
    out.params.append(stacked)
    state = [(opt.exp_avgs, out.exp_avgs), (opt.exp_avg_sqs, out.exp_avg_sqs)] if opt.kind == "adam" else []
    for eager, mine in state:
        mine.append(torch.stack([eager[where[id(p)]].reshape(shape) for p in params]))
    for r, p in enumerate(params):
        p.data = stacked[r].view(p.shape)
        for (eager, _), mine in zip(state, (out.exp_avgs, out.exp_avg_sqs)):
            eager[where[id(p)]] = mine[-1][r].view(p.shape)
