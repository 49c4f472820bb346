"""The torch side of expression activations (activation_bench.engine.expr): a checked tree
becomes a function of a tensor, built from torch ops node by node (never eval).

A subtree without x or a learnable parameter is a number: it is computed once, in float64, and
enters the ops as a Python scalar (as `1.702` does in `x * torch.sigmoid(1.702 * x)`), so an
expression runs the same kernels as the hand-written module. Gradients come from autograd.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch.nn import functional as F

if TYPE_CHECKING:
    from activation_bench.engine.expr import Expr, Node

Value = torch.Tensor | float
Fn = Callable[[torch.Tensor, Mapping[str, Any]], Value]

_INV_PI = 1.0 / math.pi
UNARY_OPS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "abs": torch.abs, "exp": torch.exp, "log": torch.log, "log1p": torch.log1p, "sqrt": torch.sqrt,
    "sin": torch.sin, "cos": torch.cos, "tanh": torch.tanh, "sinh": torch.sinh, "cosh": torch.cosh,
    "asinh": torch.asinh, "atan": torch.atan, "erf": torch.erf, "sigmoid": torch.sigmoid,
    "softplus": F.softplus, "relu": torch.relu, "gelu": F.gelu, "silu": F.silu,
    "sinc": lambda t: torch.sinc(t * _INV_PI),  # sin(x) / x, 1 at 0 (torch's sinc is sin(pi x) / (pi x))
}


def _scalar(fn: Callable[..., torch.Tensor], *values: float) -> float:
    """An op on numbers, computed in float64 by torch (inf and nan as IEEE says, never an exception)."""
    return fn(*(torch.tensor(v, dtype=torch.float64) for v in values)).item()


def _binary(op: str, a: Value, b: Value) -> Value:
    if op == "add":
        return a + b
    if op == "sub":
        return a - b
    if op == "mul":
        return a * b
    if op == "div":
        return a / b
    if op == "pow":
        return a ** b
    tensor_a, tensor_b = isinstance(a, torch.Tensor), isinstance(b, torch.Tensor)
    if op == "max":
        if tensor_a and tensor_b:
            return torch.maximum(a, b)
        return a.clamp(min=b) if tensor_a else b.clamp(min=a)
    if tensor_a and tensor_b:
        return torch.minimum(a, b)
    return a.clamp(max=b) if tensor_a else b.clamp(max=a)


_TORCH_BINARY = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div, "pow": torch.pow,
                 "max": torch.maximum, "min": torch.minimum}


def compile_tree(node: Node, learnable: frozenset[str] = frozenset()) -> Fn:
    """A function (x, params) -> value of the tree; `learnable` names parameters given as tensors
    (the others are numbers: subtrees of numbers and them are computed in float64)."""
    op = node.op
    if op == "x":
        return lambda x, p: x
    if op == "num":
        value = node.value
        return lambda x, p: value
    if op == "param":
        name = node.name
        return lambda x, p: p[name]
    args = [compile_tree(a, learnable) for a in node.args]
    numeric = not _varies(node, learnable)
    if op == "neg":
        (f,) = args
        return lambda x, p: -f(x, p)
    if op == "call" and len(args) == 1:
        fn, (f,) = UNARY_OPS[node.name], args
        if numeric:
            return lambda x, p: _scalar(fn, f(x, p))
        return lambda x, p: fn(f(x, p))
    kind = node.name if op == "call" else op
    f, g = args
    if numeric:
        fn = _TORCH_BINARY[kind]
        return lambda x, p: _scalar(fn, f(x, p), g(x, p))
    return lambda x, p: _binary(kind, f(x, p), g(x, p))


def _varies(node: Node, learnable: frozenset[str]) -> bool:
    """True where the subtree's value is a tensor: it holds x or a learnable parameter."""
    if node.op == "x" or (node.op == "param" and node.name in learnable):
        return True
    return any(_varies(a, learnable) for a in node.args)


def _full(value: Value, x: torch.Tensor) -> torch.Tensor:
    if isinstance(value, torch.Tensor) and value.shape == x.shape:
        return value
    return torch.zeros_like(x) + value


def evaluate(tree: Node, x: torch.Tensor, params: Mapping[str, Any]) -> torch.Tensor:
    """The tree at every element of x; params: name -> float, or a 0-d tensor (learnable)."""
    tensors = frozenset(k for k, v in params.items() if isinstance(v, torch.Tensor))
    return _full(compile_tree(tree, tensors)(x, params), x)


class ExprActivation(nn.Module):
    """An expression activation; with learnable=True its parameters are nn.Parameters (0-d)."""

    def __init__(self, expr: Expr, params: dict[str, float], learnable: bool = False) -> None:
        super().__init__()
        self.expr = expr
        self.names = list(expr.params)
        values = expr.bind(params)
        self.learnable = learnable and bool(self.names)
        if self.learnable:
            self.values = nn.ParameterList(nn.Parameter(torch.tensor(values[n])) for n in self.names)
        else:
            self.fixed = values
        self.fn = compile_tree(expr.tree, frozenset(self.names) if self.learnable else frozenset())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        params = dict(zip(self.names, self.values)) if self.learnable else self.fixed
        return _full(self.fn(x, params), x)

    def extra_repr(self) -> str:
        return self.expr.canonical


# ---------------------------------------------------------------------------------------------
# `actbench activations --fn`: what the probe says about a function


def summarize(expr: Expr, params: Mapping[str, float]) -> dict[str, Any]:
    """Facts about the function, computed in float64 (the keys `actbench activations --fn` prints):

    - probe: None, or the one-line reason `run` refuses the function;
    - monotonic: "increasing", "decreasing" or "no" (non-strict, on a grid of step 1e-3 over [-10, 10]);
    - bounded: "both", "below", "above" or "no": a side is bounded when its extreme over
      1e3 <= |x| <= 1e4 exceeds the one over |x| <= 1e3 by at most 1 % (growth, not proof);
    - smooth: True when the slope (autograd) is continuous on [-10, 10] (its largest jump between
      neighbouring grid points shrinks as the grid is refined 10x); kink: where it jumps, if not;
    - value_at_0, slope_at_0 (autograd; at a kink, torch's convention);
    - equals: the registry activations (default parameters, not gated or random) equal to it on
      the probe points (rtol 1e-6, atol 1e-8).
    """
    from activation_bench.engine import expr as ex

    f = expr.module(expr.bind(params)).double()
    result = ex.probe(expr, params, torch.float64)
    grid = torch.arange(-10_000, 10_001, dtype=torch.float64) / 1000.0
    with torch.no_grad():
        steps = f(grid).diff()
    zero = torch.zeros(1, dtype=torch.float64, requires_grad=True)
    value = f(zero)
    (slope,) = torch.autograd.grad(value.sum(), zero)
    smooth, kink = _smoothness(f)
    return {
        "fn": expr.canonical,
        "params": dict(params),
        "probe": result.problem,
        "monotonic": "increasing" if bool((steps >= 0).all()) else "decreasing" if bool((steps <= 0).all()) else "no",
        "bounded": _bounded(f),
        "smooth": smooth,
        "kink": kink,
        "value_at_0": value.item(),
        "slope_at_0": slope.item(),
        "equals": _equals(result) if result.finite else [],
    }


def _slopes(f: nn.Module, x: torch.Tensor) -> torch.Tensor:
    x = x.clone().requires_grad_()
    (g,) = torch.autograd.grad(f(x).sum(), x)
    return g


def _smoothness(f: nn.Module) -> tuple[bool, float | None]:
    jumps = []
    for step in (1000, 10_000):  # grid steps 1e-3 and 1e-4
        x = torch.arange(-10 * step, 10 * step + 1, dtype=torch.float64) / step
        d = _slopes(f, x)
        if not bool(torch.isfinite(d).all()):
            return False, x[~torch.isfinite(d)][0].item() + 0.0
        jumps.append((d.diff().abs(), x))
    (coarse, _), (fine, x) = jumps
    if fine.max() <= 1e-9 or fine.max() <= 0.5 * coarse.max():
        return True, None
    return False, round(x[int(fine.argmax())].item(), 3) + 0.0  # + 0.0: no "-0.0"


def _bounded(f: nn.Module) -> str:
    near = torch.cat([torch.arange(0, 1001, dtype=torch.float64) / 100, torch.logspace(1, 3, 500, dtype=torch.float64)])
    far = torch.logspace(3, 4, 500, dtype=torch.float64)
    with torch.no_grad():
        inner = torch.cat([f(near), f(-near)])
        outer = torch.cat([f(far), f(-far)])
    if not bool(torch.isfinite(inner).all()):
        return "no"
    hi, lo = inner.max().item(), inner.min().item()
    above = bool(torch.isfinite(outer).all()) and outer.max().item() <= hi + 0.01 * (1 + abs(hi))
    below = bool(torch.isfinite(outer).all()) and outer.min().item() >= lo - 0.01 * (1 + abs(lo))
    return {(True, True): "both", (False, True): "below", (True, False): "above"}.get((above, below), "no")


def _equals(result: Any) -> list[str]:
    from activation_bench.engine import activations

    found = []
    for row in activations.describe():
        if row["gated"] or row["stochastic"]:
            continue
        module = activations.create(row["name"]).double().eval()
        with torch.no_grad():
            other = module(result.points)
        if torch.allclose(result.outputs, other, rtol=1e-6, atol=1e-8):
            found.append(row["name"])
    return found
