"""The torch side of expression activations (activation_bench.engine.activations.expr): a checked tree
becomes a function of a tensor, built from torch ops node by node (never eval). Trees (expr.Node)
and expressions (expr.Expr) come in as arguments; this module imports nothing from expr.

A subtree without x or a learnable parameter is a number: it is computed once, in float64, and
enters the ops as a Python scalar (as `1.702` does in `x * torch.sigmoid(1.702 * x)`), so an
expression runs the same kernels as the hand-written module. Gradients come from autograd.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

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


def compile_tree(node: Any, learnable: frozenset[str] = frozenset()) -> Fn:
    """A function (x, params) -> value of the tree; `learnable` names parameters given as tensors
    (the others are numbers: subtrees of numbers and them are computed in float64; subtrees of
    numbers alone once, here)."""
    if node.op not in ("x", "num", "param") and _numbers_only(node):
        value = _compile(node, learnable)(None, {})  # type: ignore[arg-type]
        return lambda x, p: value
    return _compile(node, learnable)


def _numbers_only(node: Any) -> bool:
    return node.op == "num" or (node.op not in ("x", "param") and all(_numbers_only(a) for a in node.args))


def _compile(node: Any, learnable: frozenset[str]) -> Fn:
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


def _varies(node: Any, learnable: frozenset[str]) -> bool:
    """True where the subtree's value is a tensor: it holds x or a learnable parameter."""
    if node.op == "x" or (node.op == "param" and node.name in learnable):
        return True
    return any(_varies(a, learnable) for a in node.args)


def _full(value: Value, x: torch.Tensor) -> torch.Tensor:
    if isinstance(value, torch.Tensor) and value.shape == x.shape:
        return value
    return torch.zeros_like(x) + value


def evaluate(tree: Any, x: torch.Tensor, params: Mapping[str, Any]) -> torch.Tensor:
    """The tree at every element of x; params: name -> float, or a 0-d tensor (learnable)."""
    tensors = frozenset(k for k, v in params.items() if isinstance(v, torch.Tensor))
    return _full(compile_tree(tree, tensors)(x, params), x)


class ExprActivation(nn.Module):
    """An expression activation; with learnable=True its parameters are nn.Parameters (0-d)."""

    def __init__(self, expr: Any, params: dict[str, float], learnable: bool = False) -> None:
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

    def learned(self) -> dict[str, float]:
        """The learnable parameters' current values by name (empty when not learnable)."""
        return {n: v.item() for n, v in zip(self.names, self.values)} if self.learnable else {}

    def extra_repr(self) -> str:
        return self.expr.canonical
