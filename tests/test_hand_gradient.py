"""models/hand_gradient.py's hand-written gradient against autograd: each activation rule, and whole stacks."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from activation_bench.config.compose import compose_many
from activation_bench.engine import plan, train
from activation_bench.engine.activations import closed_forms
from activation_bench.engine.activations import registry as activations
from activation_bench.engine.models import hand_gradient
from activation_bench.engine.models.base import Slice
from activation_bench.engine.models.losses import member_mse
from activation_bench.engine.models.stacked_mlp import StackedMLP

CLOSED = [("gelu", {}), ("mish", {}), ("relu", {}), ("tanh", {}), ("silu", {}), ("leaky_relu", {}),
          ("leaky_relu", {"negative_slope": 0.2}), ("elu", {}), ("elu", {"alpha": 0.5}), ("softplus", {}),
          ("softplus", {"beta": 2.0, "threshold": 10.0})]


@pytest.mark.parametrize(("name", "params"), CLOSED)
def test_closed_form_rules_match_the_module_and_autograd_float64(name, params):
    module = activations.create(name, **params)
    rule = closed_forms.closed_form(module)
    assert rule is not None
    # both signs, zero, large values (Mish's clamp at 20, softplus' threshold) and tiny ones
    h = torch.cat([torch.linspace(-60, 60, 2401, dtype=torch.float64), torch.tensor([0.0, 1e-30, -1e-30, 20.0])])
    h = h.requires_grad_()
    ref = module(h)
    g = torch.linspace(-1, 1, h.numel(), dtype=torch.float64)
    (ref_grad,) = torch.autograd.grad(ref, h, g)
    a, back = rule(h.detach())
    torch.testing.assert_close(a, ref.detach(), rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(back(g), ref_grad, rtol=1e-12, atol=1e-14)


def test_modules_without_a_closed_form_use_autograd_inside_the_step():
    for name in ("prelu", "swiglu", "stochastic_gelu", "rrelu", "gelu_tanh"):
        assert closed_forms.closed_form(activations.create(name)) is None
    assert closed_forms.closed_form(nn.GELU(approximate="tanh")) is None


def _stack(names: list[str], dtype: torch.dtype) -> StackedMLP:
    g = torch.Generator().manual_seed(0)
    m = len(names)
    h1, h2 = activations.hidden_width({"name": names[0]}, 6)
    slices = []
    for i, n in enumerate(names):
        module = activations.create(n).to(dtype)
        if hasattr(module, "generator"):
            module.generator = torch.Generator().manual_seed(i)
        slices.append(Slice(i, i + 1, module, activations.is_per_member({"name": n})))
    return StackedMLP(torch.randn(m, 4, h1, generator=g, dtype=dtype), torch.randn(m, 1, h1, generator=g, dtype=dtype),
                      torch.randn(m, 1, h2, generator=g, dtype=dtype), torch.randn(m, 1, 1, generator=g, dtype=dtype),
                      slices)


STACKS = [["gelu", "mish", "relu", "prelu", "elu"], ["swiglu", "geglu"], ["stochastic_gelu"] * 2]


@pytest.mark.parametrize("names", STACKS)
def test_hand_gradient_equals_autograd_on_whole_stacks_float64(names):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(len(names), 5, 4, generator=g, dtype=torch.float64)
    y = torch.randn(len(names), 5, 1, generator=g, dtype=torch.float64)
    ref_model, hand_model = _stack(names, torch.float64), _stack(names, torch.float64)
    ref_loss = member_mse(ref_model(x), y)
    ref_loss.sum().backward()
    hand = hand_gradient.hand_gradient(hand_model)
    torch.testing.assert_close(hand.loss(x, y), ref_loss.detach(), rtol=1e-12, atol=0)
    for ref_p, p in zip(ref_model.parameters(), hand_model.parameters(), strict=True):
        torch.testing.assert_close(p.grad, ref_p.grad, rtol=1e-10, atol=1e-12)
    ref_model.eval(), hand_model.eval()
    with torch.no_grad():
        torch.testing.assert_close(hand.predict(x), ref_model(x), rtol=1e-12, atol=1e-14)


def test_training_equals_the_autograd_engine_within_rtol(monkeypatch):
    """The same runs through the autograd path of the engine: float rounding only (rtol 1e-5)."""
    acts = ["gelu", "relu", "silu", "elu", "tanh", "mish", "leaky_relu", "softplus", "prelu", "swiglu"]
    cfgs = compose_many([[f"activation={a}", "epochs=30", "lr=0.01", "data.n_val=3"] for a in acts])

    def run_all() -> list[train.RunResult]:
        out: dict[int, train.RunResult] = {}
        for stack in plan.plan_stacks(cfgs):  # swiglu's wider first layer is a stack of its own
            out.update(zip(stack, train.train([cfgs[i] for i in stack])))
        return [out[i] for i in range(len(cfgs))]

    hand = run_all()
    asked: list[object] = []
    # every stack through autograd: the engine finds no hand-written gradient for its model
    monkeypatch.setattr(hand_gradient, "hand_gradient", lambda model: asked.append(model))
    auto = run_all()
    assert len(asked) == len(plan.plan_stacks(cfgs))
    for a, r_hand, r_auto in zip(acts, hand, auto):
        assert r_hand.train_loss == pytest.approx(r_auto.train_loss, rel=1e-5), a
        assert r_hand.val_loss == pytest.approx(r_auto.val_loss, rel=1e-5), a


def test_models_with_other_layers_fall_back_to_autograd():
    model = _stack(["gelu", "relu"], torch.float32)
    assert hand_gradient.hand_gradient(model) is not None
    model.extra = nn.Parameter(torch.zeros(2, 3))  # e.g. a deeper model's next layer
    assert hand_gradient.hand_gradient(model) is None

    class Deeper(StackedMLP):
        pass

    assert hand_gradient.hand_gradient(Deeper(model.w1.data, model.b1.data, model.w2.data,
                                      model.b2_padded.data[..., :1], model.slices)) is None
