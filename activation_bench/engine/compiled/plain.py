"""The compiled step of the plain depth-1 MLP (one hidden layer, no dropout, no norm, no gradient
log, no per-member activations): the hand-written gradient of models/hand_gradient.py (its
closed-form activation derivatives and mse_head) with the optimiser's update, as one pure function
for inductor. Every other model takes its family's step (compiled/mlp.py, compiled/cnn.py: the
forward differentiated by torch.func); tests/test_compiled.py pins this one to the eager engine."""

from __future__ import annotations

from collections.abc import Callable

import torch

from activation_bench.engine.activations import closed_forms, grouped
from activation_bench.engine.compiled import mlp as compiled_mlp
from activation_bench.engine.models import hand_gradient


def rule(module: torch.nn.Module) -> closed_forms.Rule:
    """The activation's forward and backward inside the compiled step: the closed form of activations/closed_forms.py
    where it has one, else torch.func.vjp of its forward (expressions, gated units, the rest)."""
    if type(module) is torch.nn.Tanh:  # compiled_mlp.form's: 1.7x torch's tanh in inductor
        def tanh(h: torch.Tensor) -> tuple[torch.Tensor, closed_forms.Backward]:
            a = compiled_mlp.tanh(h)
            return a, lambda g: g * (1.0 - a * a)
        return tanh
    closed = closed_forms.closed_form(module)
    if closed is not None:
        return closed
    forward = grouped.functional(module)

    def rule(h: torch.Tensor) -> tuple[torch.Tensor, closed_forms.Backward]:
        a, back = torch.func.vjp(forward, h)
        return a, lambda g: back(g)[0]
    return rule


def step_function(rules: list[closed_forms.Rule], sizes: list[int], n_out: int, kind: str,
                   betas: tuple[float, float], eps: float) -> Callable[..., torch.Tensor]:
    """The pure step: (params, exp_avgs, exp_avg_sqs, scale, x, y) -> per-member loss [M] before
    the update, updating params and the optimiser's state in place. `scale` holds the step's
    scalars (Adam: lr / (1 - beta1^t) and 1 / sqrt(1 - beta2^t); SGD: lr), computed per step outside
    the graph: as a tensor it neither specialises the graph (one graph serves every lr and step)
    nor is recomputed inside every iteration of the update loops (inductor inlines scalar
    arithmetic such as beta^t into each consumer's loop, which made the update 3x slower)."""

    def step(params: list[torch.Tensor], exp_avgs: list[torch.Tensor], exp_avg_sqs: list[torch.Tensor],
             scale: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        w1, b1, w2, b2 = params
        a, backs = hand_gradient.rules_forward(rules, torch.baddbmm(b1, x, w1), sizes)
        rows = x.shape[1]
        if n_out == 1:
            loss, g_w2, g_b2, g_a = hand_gradient.mse_head(a, w2, b2, y)
            g_b2 = torch.nn.functional.pad(g_b2, (0, b2.shape[-1] - 1))
        else:
            logp = torch.baddbmm(b2, a, w2)[..., :n_out].log_softmax(dim=-1)
            loss = logp.gather(-1, y[..., None]).squeeze(-1).neg().mean(dim=1)
            g_logits = (logp.exp() - torch.nn.functional.one_hot(y, n_out).to(logp.dtype)) / rows
            g_logits = torch.nn.functional.pad(g_logits, (0, b2.shape[-1] - n_out))
            g_w2 = torch.bmm(a.transpose(1, 2), g_logits)
            g_b2 = g_logits.sum(dim=1, keepdim=True)
            g_a = torch.bmm(g_logits, w2.transpose(1, 2))
        g_h = hand_gradient.rules_backward(backs, g_a, sizes)
        grads = [torch.bmm(x.transpose(1, 2), g_h), g_h.sum(dim=1, keepdim=True), g_w2, g_b2]
        if kind == "sgd":
            for p, g in zip(params, grads):
                p.sub_(g * scale[0])
            return loss
        compiled_mlp.adam(params, grads, exp_avgs, exp_avg_sqs, scale, betas, eps)
        return loss

    return step
