"""The compiled step of every other MLP: depth > 1, dropout, batch and layer norm, residual skips,
regression and classification (compiled/plain.py keeps its hand-written step for the plain depth-1 MLP).

The model's forward is written here once as a pure function of the stack's parameters, the same
ops as StackedMLP's eager forward (norm.standardize is shared with the eager norm); its gradient is
torch.func.vjp's, inside the graph that inductor compiles, which fuses the forward's
and backward's elementwise work (activations and their derivatives, norm, dropout, the loss) and
the optimiser's update into a few C++ loops between the batched products.

What the graph cannot draw it takes as inputs: dropout's masks come from MemberDropout.mask (each
member's own stream, as eager draws them) and batch norm's running statistics are updated in place
inside the step (norm.update_running), so evaluation reads them as eager does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from activation_bench.engine.activations import closed_forms, grouped
from activation_bench.engine.diagnostics import member_norms
from activation_bench.engine.models import norm
from activation_bench.engine.models.base import per_slice
from activation_bench.engine.models.stacked_mlp import one_output

Act = Callable[[torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class Layout:
    """Where each of the model's tensors sits in the optimiser's parameter list: per hidden layer its
    weight, bias (None with batch norm) and norm's gamma and beta (None without norm); the output
    layer's weight and padded bias."""

    w: tuple[int, ...]
    b: tuple[int | None, ...]
    gamma: tuple[int | None, ...]
    beta: tuple[int | None, ...]
    w2: int
    b2: int
    # per hidden layer and run of members (compiled_acts.Runs), its stacked learned parameters'
    # places (empty: no activation with learned parameters in the stack)
    act: tuple[tuple[tuple[int, ...], ...], ...] = ()
    # per hidden layer and run, its random draws' places in the step's draws (after dropout's masks)
    noise: tuple[tuple[tuple[int, ...], ...], ...] = ()


def layout(model: Any, params: list[torch.Tensor]) -> Layout:
    """The Layout of a StackedMLP whose parameters the optimiser holds as `params` (by identity);
    raises where the optimiser holds any other parameter (an activation's: not compiled)."""
    return layout_of(params, model.ws, model.bs, model.norms, model.w2, model.b2_padded)


def layout_of(params: list[torch.Tensor], ws: Any, bs: Any, norms: Any, w2: torch.Tensor, b2: torch.Tensor) -> Layout:
    """The Layout of these tensors in `params` (by identity): per hidden layer (a convnet's block)
    its weight, bias (bs empty or None: none, batch norm) and norm's gamma and beta (norms None: none)."""
    index = {id(p): i for i, p in enumerate(params)}
    depth = len(ws)
    bs = list(bs) if bs else [None] * depth  # the MLP gives [] with batch norm, the convnet None
    norms = list(norms) if norms is not None else [None] * depth
    lay = Layout(tuple(index[id(w)] for w in ws), tuple(None if b is None else index[id(b)] for b in bs),
                 tuple(None if n is None else index[id(n.weight)] for n in norms),
                 tuple(None if n is None else index[id(n.bias)] for n in norms), index[id(w2)], index[id(b2)])
    used = {*lay.w, *lay.b, *lay.gamma, *lay.beta, lay.w2, lay.b2} - {None}
    if len(used) != len(params):
        raise ValueError("the optimiser holds parameters the compiled step does not know")
    return lay


def step_function(acts: list[Act], sizes: list[int], lay: Layout, model: Any, kind: str,
                  betas: tuple[float, float], eps: float, grad_norms: bool = False) -> Callable[..., Any]:
    """The pure step: (params, exp_avgs, exp_avg_sqs, running, masks, scale, x, y) -> per-member loss
    [M] before the update, updating params, the optimiser's state and batch norm's running
    statistics (`running`: mean and var of every layer, flat) in place. `masks`: dropout's per
    hidden layer (empty without dropout), then the random activations' draws (compiled_acts.draws).
    `scale` as plain.step_function's. With grad_norms, (loss, the norms train_step gives)."""
    depth, n_out, residual, dropout = model.depth, model.n_out, model.residual, model.dropout is not None
    kind_norm = model.norms[0].kind if model.norms is not None else "none"
    dim = 1 if kind_norm == "batch" else -1

    activate = layer_activation(acts, sizes, lay)

    def forward(params: list[torch.Tensor], x: torch.Tensor, y: torch.Tensor,
                masks: list[torch.Tensor]) -> tuple[torch.Tensor, Aux]:
        a, stats, act_norms = x, [], []
        for k in range(depth):
            w, b = params[lay.w[k]], lay.b[k]
            h = affine(a, w, None if b is None else params[b])
            if kind_norm != "none":
                h, mean, var, _, _ = norm.standardize(h, params[lay.gamma[k]], params[lay.beta[k]], dim)  # type: ignore[index]
                stats += [mean.detach(), var.detach()]
            out = activate(h, params, k, masks[depth:] if dropout else masks)
            if grad_norms:
                act_norms.append(member_norms(out))
            if dropout:
                out = out * masks[k]
            a = a + out if residual and k > 0 else out
        w2, b2 = params[lay.w2], params[lay.b2]
        if n_out == 1:
            loss = (one_output(a, w2, b2) - y).square().mean(dim=(1, 2))
        else:
            logits = affine(a, w2, b2)[..., :n_out]
            loss = cross_entropy(logits, y)
        return loss, (stats, act_norms)

    return train_step(forward, lambda _layer, rows: rows, kind_norm == "batch", kind, betas, eps,
                      lay.w if grad_norms else None)


Aux = tuple[list[torch.Tensor], list[torch.Tensor]]  # batch norm's mean and var of every layer, flat; act norms
Forward = Callable[[list[torch.Tensor], torch.Tensor, torch.Tensor, list[torch.Tensor]], tuple[torch.Tensor, Aux]]


def train_step(forward: Forward, norm_rows: Callable[[int, int], int], batch_norm: bool, kind: str,
               betas: tuple[float, float], eps: float, weights: tuple[int, ...] | None = None) -> Callable[..., Any]:
    """The step of a model whose pure `forward(params, x, y, masks)` gives (per-member loss [M],
    (batch norm's mean and var of every layer, flat; each hidden layer's activation-output norm
    [M], for log.grad_norms)): the gradient by torch.func.vjp, the running statistics updated
    (`norm_rows(layer, batch rows)`: the rows each layer's statistics are over), then Adam's or
    SGD's update, all in place (compiled_cnn.py's step is this one too). With `weights` (the hidden
    layers' weights' places in params), the step returns (loss, [depth, M] norms of those weights'
    gradients, [depth, M] norms of the activation outputs): diagnostics.GradLog's values."""

    def step(params: list[torch.Tensor], exp_avgs: list[torch.Tensor], exp_avg_sqs: list[torch.Tensor],
             running: list[torch.Tensor], masks: list[torch.Tensor], scale: torch.Tensor, x: torch.Tensor,
             y: torch.Tensor) -> Any:
        loss, back, (stats, act_norms) = torch.func.vjp(lambda ps: forward(ps, x, y, masks), params, has_aux=True)
        grads = back(torch.ones_like(loss))[0]
        if batch_norm:
            for k in range(len(stats) // 2):
                norm.update_running(running[2 * k], running[2 * k + 1], stats[2 * k], stats[2 * k + 1],
                                    norm_rows(k, x.shape[1]))
        out: Any = loss.detach()
        if weights is not None:
            out = (out, torch.stack([member_norms(grads[i]) for i in weights]), torch.stack(act_norms))
        if kind == "sgd":
            for p, g in zip(params, grads):
                p.sub_(g * scale[0])
            return out
        adam(params, grads, exp_avgs, exp_avg_sqs, scale, betas, eps)
        return out

    return step


def adam(params: list[torch.Tensor], grads: list[torch.Tensor], exp_avgs: list[torch.Tensor],
         exp_avg_sqs: list[torch.Tensor], scale: torch.Tensor, betas: tuple[float, float], eps: float) -> None:
    """Adam's update in place, as the eager foreach Adam computes it but for one rounding: `scale`
    holds lr / (1 - beta1^t) and 1 / sqrt(1 - beta2^t) (build._scale), and sqrt(v) is multiplied
    by the latter where eager divides by sqrt(1 - beta2^t). A vector division costs several
    multiplies: the update of a 240-member stack of 64-64-1 MLPs took 0.23 ms with the division and
    0.17 ms with the multiply, about 5% of the whole step."""
    beta1, beta2 = betas
    step_size, inv_bias2_sqrt = scale[0], scale[1]
    for p, g, m, v in zip(params, grads, exp_avgs, exp_avg_sqs):
        m.lerp_(g, 1.0 - beta1)
        v.mul_(beta2).addcmul_(g, g, value=1.0 - beta2)
        p.sub_(m / (v.sqrt() * inv_bias2_sqrt + eps) * step_size)


def plain(model: Any) -> bool:
    """The depth-1 MLP without dropout or normalization: compiled/choose.py's hand-written step;
    every other MLP takes this module's (the model's forward differentiated by torch.func)."""
    return model.depth == 1 and model.dropout is None and model.norms is None


shares_function = None  # an MLP's unit shares are the eager pass (diagnostics.unit_shares)


def parts(model: Any, x: torch.Tensor, y: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """A split as the compiled evaluation takes it: whole."""
    return [(x, y)]


def evaluation(evaluate: Callable[..., tuple[torch.Tensor, torch.Tensor]], params: list[torch.Tensor],
               running: list[torch.Tensor], model: Any, classify: bool) -> Callable[..., Any]:
    """Compiled.evaluate: the compiled loss and accuracy of a split."""
    return lambda x, y: evaluate(params, running, x, y)


def eval_function(acts: list[Act], sizes: list[int], lay: Layout, model: Any,
                  classify: bool) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    """The pure evaluation: (params, running, x, y) -> (per-member loss [M], accuracy [M]; zeros
    for a regressor), in evaluation mode as the eager model computes it (no dropout; batch norm
    from its running statistics, folded into the weight as MemberNorm.folded does)."""
    depth, n_out, residual = model.depth, model.n_out, model.residual
    kind_norm = model.norms[0].kind if model.norms is not None else "none"

    activate = layer_activation(acts, sizes, lay)

    def evaluate(params: list[torch.Tensor], running: list[torch.Tensor], x: torch.Tensor,
                 y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a = x
        for k in range(depth):
            w, b = params[lay.w[k]], lay.b[k]
            if kind_norm == "batch":
                h = folded_affine(a, w, params, running, lay, k)
            else:
                h = affine(a, w, None if b is None else params[b])
                if kind_norm == "layer":
                    h = norm.standardize(h, params[lay.gamma[k]], params[lay.beta[k]], -1)[0]  # type: ignore[index]
            out = activate(h, params, k)
            a = a + out if residual and k > 0 else out
        w2, b2 = params[lay.w2], params[lay.b2]
        if not classify:
            pred = one_output(a, w2, b2)
            return (pred - y).square().mean(dim=tuple(range(1, pred.dim()))), torch.zeros_like(pred[:, 0, 0])
        logits = affine(a, w2, b2)[..., :n_out]
        loss = cross_entropy(logits, y)
        return loss, (logits.argmax(dim=-1) == y).to(logits.dtype).mean(dim=1)

    return evaluate


def folded_affine(a: torch.Tensor, w: torch.Tensor, params: list[torch.Tensor], running: list[torch.Tensor],
                  lay: Layout, k: int) -> torch.Tensor:
    """Layer k's product followed by batch norm in evaluation mode, its running statistics folded
    into the weight and a shift (as MemberNorm.folded): one product (the MLP's and the convnet's)."""
    scale = (running[2 * k + 1] + norm.EPS).rsqrt().mul(params[lay.gamma[k]])  # type: ignore[index]
    return affine(a, w * scale, params[lay.beta[k]] - running[2 * k] * scale)  # type: ignore[index]


def activation(acts: list[Act], sizes: list[int]) -> Act:
    """The stack's activation: each slice's function on its members' rows of h [M, ...]."""
    if len(acts) == 1:
        return acts[0]
    return lambda h: per_slice(acts, h, sizes)


def layer_activation(acts: list[Any], sizes: list[int], lay: Layout) -> Callable[..., torch.Tensor]:
    """activate(h, params, k, draws=()): hidden layer k's activation of h [M, ...], each run's
    function on its members' rows; a run with learned parameters (compiled_acts) also takes its
    stacked parameters of layer k from params, a random one its uniforms from draws."""
    if not lay.act and not lay.noise:
        plain = activation(acts, sizes)
        return lambda h, _params, _k, _draws=(): plain(h)
    none = tuple(() for _ in acts)

    def activate(h: torch.Tensor, params: list[torch.Tensor], k: int, draws: Any = ()) -> torch.Tensor:
        parts = h.split(sizes) if len(acts) > 1 else [h]
        outs = []
        for act, part, idx, drawn in zip(acts, parts, lay.act[k] if lay.act else none,
                                         lay.noise[k] if lay.noise else none):
            if idx:
                outs.append(act(part, [params[i] for i in idx]))
            elif drawn:
                outs.append(act(part, [draws[i] for i in drawn]))
            else:
                outs.append(act(part))
        return torch.cat(outs) if len(outs) > 1 else outs[0]

    return activate


def cross_entropy(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Each member's mean cross-entropy [M] of logits [M, rows, K] against labels [M, rows]."""
    return logits.log_softmax(dim=-1).gather(-1, y[..., None]).squeeze(-1).neg().mean(dim=1)


def affine(a: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    """a @ w + b per member. Not baddbmm: it copies the broadcast bias into its output before the
    product (a pass over [M, rows, units]); added after bmm, inductor fuses the addition into the
    next loop (the activation's, the norm's, the loss's)."""
    return torch.bmm(a, w) if b is None else torch.bmm(a, w) + b


def acts_of(model: Any) -> list[Act]:
    """Each slice's activation as a plain function of its input (the same module in every layer:
    the compiled engine takes no per-layer modules): form()'s where it has one."""
    return [form(s.module) or grouped.functional(s.module) for s in model.slices]


def form(module: torch.nn.Module) -> Act | None:
    """A faster formula of the module's forward for inductor, or None (the module's own). Their
    gradients are autograd's of these ops, which inductor fuses with the forward into one loop.
    Measured in the compiled step (2026-11-26, one thread, [32, 128, 64], forward and backward):
    Mish 1,630 -> 250 us (torch's decomposition: tanh, log1p, exp, and more for its derivative;
    here one exp), exact GELU 333 -> 242 us, Tanh 456 -> 262 us (its expm1 form)."""
    kind = type(module)
    if kind is torch.nn.Mish:
        return closed_forms.mish_value
    if kind is torch.nn.GELU and module.approximate == "none":
        return closed_forms.gelu_value
    if kind is torch.nn.Tanh:
        return tanh
    return None


def tanh(h: torch.Tensor) -> torch.Tensor:
    """tanh(h) = expm1(2h) / (expm1(2h) + 2): one expm1 (accurate near 0); clamped at |h| = 20,
    where tanh is 1 in float32 and float64 alike, before expm1(2h) overflows."""
    e = torch.expm1(h.clamp(-20.0, 20.0) * 2.0)
    return e / (e + 2.0)


def running_of(model: Any) -> list[torch.Tensor]:
    """Batch norm's running mean and var of every hidden layer, flat (none for other stacks)."""
    if model.norms is None or model.norms[0].kind != "batch":
        return []
    return [t for n in model.norms for t in (n.running_mean, n.running_var)]


def masks(model: Any, xb: torch.Tensor, draw: bool = True) -> list[torch.Tensor]:
    """This step's dropout masks for batch xb, one per hidden layer (a convnet's block) [M, rows,
    units] (the model's `dropout_shapes`), drawn from the members' streams in eager's order (none
    without dropout); draw=False: uninitialised tensors of their shapes, nothing drawn. The MLP's
    and the convnet's steps share it."""
    if model.dropout is None:
        return []
    shapes = model.dropout_shapes(xb.shape[1])
    if not draw:
        return [xb.new_empty(xb.shape[0], rows, units) for rows, units in shapes]
    return [model.dropout.mask(rows, units, xb.dtype) for rows, units in shapes]
