"""A hand-written gradient for the stacked MLP: forward, backward and loss without autograd.

For a stack whose activations all have a rule below, one training step computes the loss and
writes every parameter's `.grad` directly: the output layer and the MSE's backward by hand (a few
elementwise ops), each activation's derivative from the values its forward already computed, and
the first layer's weight gradient as one `bmm`. Autograd records and replays a graph of ~40
small ops a step, and some of torch's CPU activation kernels (GELU's backward, Mish both ways) are
several times slower than the same closed forms written as a few vectorised ops, so this path is
faster on a CPU. Activations without a closed form here (gated, parametrised, random, a user's
module) run their own forward and autograd backward inside the same step, so every stack takes
this path and a member computes the same alone as in any stack.

The derivatives are the closed forms `tests/test_activations.py` checks the modules against.
Members stay independent: every op is per member, so a member's trajectory in a stack equals the
same run alone (tested bitwise in tests/test_sweep.py, as for the autograd path).
"""

from __future__ import annotations

import torch
from torch import nn

from activation_bench.engine.activations.closed_forms import Backward, Rule, autograd_rule, closed_form
from activation_bench.engine.models.base import per_slice
from activation_bench.engine.models.stacked_mlp import StackedMLP, one_output


def rules_forward(rules: list[Rule], h: torch.Tensor, sizes: list[int]) -> tuple[torch.Tensor, list[Backward]]:
    """Each slice's rule on its members' rows of h: the activation and its backward per slice."""
    if len(rules) == 1:
        a, back = rules[0](h)
        return a, [back]
    outs = [rule(part) for rule, part in zip(rules, h.split(sizes))]
    return torch.cat([a for a, _ in outs]), [back for _, back in outs]


def rules_backward(backs: list[Backward], g_a: torch.Tensor, sizes: list[int]) -> torch.Tensor:
    """The activation's input gradient from its output's g_a, slice by slice."""
    return per_slice(backs, g_a, sizes)


def mse_head(a: torch.Tensor, w2: torch.Tensor, b2_padded: torch.Tensor,
             y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The one-output layer's loss and backward: (per-member MSE [M], the output row's gradient
    [M, 1, h2], the output bias's [M, 1, 1], the last hidden layer's [M, N, h2]). The hand-written
    gradient and the compiled engine's plain step both take it."""
    r = one_output(a, w2, b2_padded) - y  # [M, N, 1]
    loss = r.square().mean(dim=(1, 2))
    g_out = r * (2.0 / r.shape[1])  # d(mean of squares)/d prediction
    return loss, (g_out * a).sum(dim=1, keepdim=True), g_out.sum(dim=1, keepdim=True), g_out * w2


class HandGradient:
    """loss(x, y) -> per-member MSE [M], with every parameter's .grad set (replacing autograd)."""

    def __init__(self, model: StackedMLP) -> None:
        self.model = model
        closed = [closed_form(s.module) for s in model.slices]
        self.rules = [r or autograd_rule(s.module) for r, s in zip(closed, model.slices)]
        self.closed = [r is not None for r in closed]
        self.sizes = [s.stop - s.start for s in model.slices]
        self.grad_b2 = torch.zeros_like(model.b2_padded)  # the padding's gradient stays zero

    def hidden(self, x: torch.Tensor) -> tuple[torch.Tensor, list[Backward]]:
        m = self.model
        return rules_forward(self.rules, torch.baddbmm(m.b1, x, m.w1), self.sizes)

    @torch.no_grad()
    def predict(self, x: torch.Tensor) -> torch.Tensor:
        """The training step's forward, [M, N, 1], for validation losses (in the modules' eval
        mode: call model.eval() first)."""
        m = self.model
        h = torch.baddbmm(m.b1, x, m.w1)
        values = [rule.value if closed else s.module  # type: ignore[attr-defined]
                  for rule, closed, s in zip(self.rules, self.closed, m.slices)]
        return one_output(per_slice(values, h, self.sizes), m.w2, m.b2_padded)

    @torch.no_grad()
    def loss(self, x: torch.Tensor, y: torch.Tensor, record: list[torch.Tensor] | None = None) -> torch.Tensor:
        """With `record`, the hidden layer's activation output is appended to it (gradient-norm log)."""
        m = self.model
        a, backs = self.hidden(x)
        if record is not None:
            record.append(a)
        loss, m.w2.grad, self.grad_b2[..., :1], g_a = mse_head(a, m.w2, m.b2_padded, y)
        m.b2_padded.grad = self.grad_b2
        g_h = rules_backward(backs, g_a, self.sizes)
        m.w1.grad = torch.bmm(x.transpose(1, 2), g_h)
        m.b1.grad = g_h.sum(dim=1, keepdim=True)
        return loss


LAYERS = {"w1", "b1", "w2", "b2_padded"}  # the parameters the hand-written gradient knows (depth 1)


def hand_gradient(model: nn.Module) -> HandGradient | None:
    """The hand-written gradient for this stack, or None (then autograd) where the model is not
    exactly the two-layer StackedMLP it is written for (one output, no dropout, no normalization):
    any other layer's parameters would get no gradient here."""
    if type(model) is not StackedMLP or model.n_out != 1 or model.dropout is not None or model.norms is not None:
        return None
    if {n for n, _ in model.named_parameters() if not n.startswith("acts.")} != LAYERS:
        return None
    return HandGradient(model)
