"""Activations' derivatives in closed form, for the hand-written gradient (models/hand_gradient.py)
and the plain MLP's compiled step (compiled/plain.py): a rule maps h to (activation(h), backward),
the backward taking dL/d activation to dL/dh from values the forward already computed. torch's own
kernels where they are fast (called without autograd's graph), written-out forms for GELU and Mish
(whose CPU kernels are several times slower), autograd for everything else. tests/test_hand_gradient.py and
tests/test_activations.py check the forms against the modules."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

# h -> (activation(h), backward), backward: dL/d activation -> dL/dh
Rule = Callable[[torch.Tensor], tuple[torch.Tensor, Callable[[torch.Tensor], torch.Tensor]]]
Backward = Callable[[torch.Tensor], torch.Tensor]
aten = torch.ops.aten
_SQRT_HALF = 1.0 / math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


def _native(fwd: Callable[[torch.Tensor], torch.Tensor],
            bwd: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]) -> Rule:
    """torch's own forward and backward kernels (fast ones), called without autograd's graph."""
    def rule(h: torch.Tensor):
        a = fwd(h)
        return a, lambda g: bwd(g, h, a)
    rule.value = fwd  # type: ignore[attr-defined]
    return rule


def _with_derivative(a: torch.Tensor, d: torch.Tensor):
    """A forward that also computed its derivative d: the backward is one multiply."""
    return a, lambda g: g * d


def _gelu(h: torch.Tensor):
    # torch's CPU gelu_backward is ~8x slower than its forward; Phi and the density are computed
    # once here, in the forward: a = h Phi(h), a' = Phi(h) + h phi(h)
    u = h * _SQRT_HALF
    phi_cdf = torch.erf(u).mul_(0.5).add_(0.5)
    pdf = u.square_().neg_().exp_().mul_(_INV_SQRT_2PI)
    return _with_derivative(h * phi_cdf, torch.addcmul(phi_cdf, h, pdf))


def gelu_value(h: torch.Tensor) -> torch.Tensor:
    """_gelu's value alone (the same ops, so the same bits), for validation and test losses."""
    return h * torch.erf(h * _SQRT_HALF).mul_(0.5).add_(0.5)


def _mish(h: torch.Tensor):
    # torch's CPU Mish is slow both ways (~10 % of a step for 1/8 of the members). With e = exp(h)
    # and n = e (e + 2): tanh(softplus(h)) = n / (n + 2), and its derivative is 4 e (e + 1) / (n + 2)^2.
    # exp is clamped at h = 20, where n / (n + 2) is already 1 in float32 (and the derivative ~0).
    e = h.clamp(max=20.0).exp_()
    n = e * (e + 2.0)
    n2 = n + 2.0
    t = n / n2
    dt = (e + 1.0).mul_(e).mul_(4.0).div_(n2.square_())
    return _with_derivative(h * t, torch.addcmul(t, h, dt))


def mish_value(h: torch.Tensor) -> torch.Tensor:
    """_mish's value alone (the same ops, so the same bits)."""
    e = h.clamp(max=20.0).exp_()
    n = e * (e + 2.0)
    return h * (n / (n + 2.0))


# Validation and test losses need the activation's value only: computing the derivative too cost
# about a third of an epoch on real data (88 + 88 evaluation rows against 266 training rows).
_gelu.value = gelu_value  # type: ignore[attr-defined]
_mish.value = mish_value  # type: ignore[attr-defined]


def autograd_rule(module: nn.Module) -> Rule:
    """Any other module (gated, parametrised, random, a user's): its forward on a detached leaf,
    its backward by autograd, which also accumulates its own parameters' gradients (PReLU)."""
    def rule(h: torch.Tensor):
        with torch.enable_grad():
            leaf = h.detach().requires_grad_()
            a = module(leaf)

        def back(g: torch.Tensor) -> torch.Tensor:
            a.backward(g)
            return leaf.grad
        return a.detach(), back
    return rule


def closed_form(module: nn.Module) -> Rule | None:
    """The rule for one of torch's activation modules, or None."""
    kind = type(module)
    if kind is nn.GELU and module.approximate == "none":
        return _gelu
    if kind is nn.Mish:
        return _mish
    if kind is nn.ReLU:
        return _native(torch.relu, lambda g, h, a: aten.threshold_backward(g, a, 0))
    if kind is nn.Tanh:
        return _native(torch.tanh, lambda g, h, a: aten.tanh_backward(g, a))
    if kind is nn.SiLU:
        return _native(nn.functional.silu, lambda g, h, a: aten.silu_backward(g, h))
    if kind is nn.LeakyReLU:
        s = module.negative_slope
        return _native(lambda h: nn.functional.leaky_relu(h, s),
                       lambda g, h, a: aten.leaky_relu_backward(g, h, s, False))
    if kind is nn.ELU:
        alpha = module.alpha
        return _native(lambda h: nn.functional.elu(h, alpha),
                       lambda g, h, a: aten.elu_backward(g, alpha, 1.0, 1.0, False, h))
    if kind is nn.Softplus:
        beta, thr = module.beta, module.threshold
        return _native(lambda h: nn.functional.softplus(h, beta, thr),
                       lambda g, h, a: aten.softplus_backward(g, h, beta, thr))
    return None
